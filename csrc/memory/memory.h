// Per-context sequence memory: a KV cache for every attention layer and a recurrent state for
// every Gated DeltaNet layer. Each sequence owns a fixed slice [n_ctx_seq] of every KV layer, so
// dropping positions >= p is just a length change.
//
// Recurrent state keeps n_planes copies per sequence (1, or n_max+1 with MTP). A verification batch
// writes the state after row i into its own plane, so rolling back to any verified position is a
// plane switch: no copies, no recomputation, and at most (n_max+1) x the plain state in memory.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "ggml/types.h"

namespace pyllm {

struct KVLayer {
  int64_t n_embd_k = 0, n_embd_v = 0;
  ggml_type tk = GGML_TYPE_F16, tv = GGML_TYPE_F16;  // -ctk / -ctv: f16 (default), bf16, q8_0, q4_0
  size_t k_row = 0, v_row = 0;  // bytes of one position's row
  std::vector<uint8_t> k, v;    // [n_seq][n_ctx_seq][k_row|v_row]
};

struct RSLayer {
  int64_t conv_size = 0;  // (d_conv-1) * conv_dim floats, [d_conv-1][conv_dim] oldest first
  int64_t ssm_size = 0;   // H_v * dk * dv floats
  std::vector<float> conv, ssm;  // [n_seq][n_planes][size]
};

class Memory {
 public:
  Memory(int n_layer, int n_seq, int n_ctx_seq, int n_planes)
      : n_seq(n_seq), n_ctx_seq(n_ctx_seq), n_planes(n_planes < 1 ? 1 : n_planes), kv(n_layer), rs(n_layer),
        kv_len(n_seq, 0), cur_plane(n_seq, 0), plane_pos(n_seq * (n_planes < 1 ? 1 : n_planes), -1) {
    for (int s = 0; s < n_seq; s++) plane_pos[s * this->n_planes] = 0;
  }

  void add_kv_layer(int il, int64_t n_embd_k, int64_t n_embd_v);
  void add_rs_layer(int il, int64_t conv_size, int64_t ssm_size);
  bool has_recurrent() const { return n_rs_layers > 0; }

  uint8_t* k_ptr(int il, int seq, int64_t pos) { auto& L = kv[il]; return L.k.data() + ((int64_t)seq * n_ctx_seq + pos) * L.k_row; }
  uint8_t* v_ptr(int il, int seq, int64_t pos) { auto& L = kv[il]; return L.v.data() + ((int64_t)seq * n_ctx_seq + pos) * L.v_row; }
  // The KV cache types of every attention layer (before anything is stored): throws
  // std::invalid_argument for a type the attention kernel cannot hold or a row it cannot split.
  void set_kv_types(ggml_type tk, ggml_type tv);
  float* conv_ptr(int il, int seq, int plane) { auto& L = rs[il]; return L.conv.data() + ((int64_t)seq * n_planes + plane) * L.conv_size; }
  float* ssm_ptr(int il, int seq, int plane) { auto& L = rs[il]; return L.ssm.data() + ((int64_t)seq * n_planes + plane) * L.ssm_size; }

  // Number of positions the sequence holds (KV length == recurrent position).
  int32_t seq_pos(int seq) const { return kv_len[seq]; }
  // Drop positions >= p0. Throws if the recurrent state cannot be rolled back to p0.
  void seq_rm(int seq, int32_t p0);
  // Whether seq_rm(seq, p0) would succeed.
  bool can_rm(int seq, int32_t p0) const;
  void seq_clear(int seq) { seq_rm(seq, 0); }

  // Bookkeeping called by the model forward for a run of rows of one sequence.
  // Recurrent planes: row i of the run reads plane in_plane(i) and writes out_plane(i). A snapshot run
  // writes the planes other than the current one lowest first, then the current one (a ring of n_planes
  // rows: the last n_planes rows' states survive). Lowest first keeps a k-token verification on the
  // lowest k + 2 planes whatever n_planes is: a ring from the current plane went round all of them, and
  // on the 12M model an --spec-draft-n-max 7 context's 1-token steps ran 11 % slower than an n_max 1
  // context's (the 8 planes' states no longer stayed in cache).
  int run_out_plane(int seq, int i, bool snap) const {
    const int c = cur_plane[seq];
    if (!snap) return c;
    const int j = i % n_planes;
    return j == n_planes - 1 ? c : j < c ? j : j + 1;
  }
  int run_in_plane(int seq, int i, bool snap) const { return snap && i > 0 ? run_out_plane(seq, i - 1, true) : cur_plane[seq]; }
  void commit_run(int seq, int32_t pos0, int n_rows, bool snap);

  size_t bytes() const;

  int n_seq, n_ctx_seq, n_planes;
  int n_rs_layers = 0;
  std::vector<KVLayer> kv;
  std::vector<RSLayer> rs;
  std::vector<int32_t> kv_len;     // [n_seq]
  std::vector<int> cur_plane;      // [n_seq]
  std::vector<int32_t> plane_pos;  // [n_seq][n_planes]: positions consumed by the state in that plane, -1 = stale
};

}  // namespace pyllm
