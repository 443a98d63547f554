// y = W x for B activation rows. Activations are quantized once per row to the weight type's
// vec_dot_type, then every weight row is dotted with all B rows while it sits in cache: the weights
// are read once per batch, which is what makes verifying n+1 draft tokens cost about one decode.
// Batch invariance: each (weight row, activation row) pair uses the same kernel whatever B is.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/threadpool.h"
#include "ggml/types.h"

namespace pyllm {

struct Weight {
  std::string name;
  ggml_type type = GGML_TYPE_F32;
  int64_t ne[4] = {0, 1, 1, 1};  // ne[0] = input dim K, ne[1] = output rows N, ne[2] = experts
  const uint8_t* data = nullptr;
  size_t nb1 = 0;  // bytes per row
  size_t nb2 = 0;  // bytes per expert matrix
  // rows interleaved in groups of 16 (ggml/repack.h, converted at load; matmul uses the type's x16_tile):
  // row r's bytes are in group r / 16 at data + (r / 16) * 16 * nb1
  bool grouped = false;
  bool valid() const { return data != nullptr; }
  Weight expert(int64_t e) const {  // the e-th matrix of a 3-D expert tensor
    Weight w = *this; w.data = data + e * nb2; w.ne[2] = 1; return w;
  }
  Weight rows(int64_t r0, int64_t n) const {  // a contiguous slice of output rows (grouped: r0 % 16 == 0)
    if (grouped && r0 % 16) throw std::logic_error("tensor '" + name + "': a slice of 16-row groups must start at a multiple of 16, not " + std::to_string(r0));
    Weight w = *this; w.data = data + r0 * nb1; w.ne[1] = n; w.nb2 = n * nb1; return w;
  }
};

// Activations already converted to a vec_dot_type: B rows of row_bytes each.
struct QuantActs {
  ggml_type type = GGML_TYPE_F32;
  int64_t K = 0;
  int B = 0;
  size_t row_bytes = 0;
  std::vector<uint8_t> buf;  // [B][row_bytes]
  const uint8_t* row(int b) const { return buf.data() + (size_t)b * row_bytes; }
};

void quantize_acts(ThreadPool& tp, const float* X, int64_t ldx, int B, int64_t K, ggml_type vdt, QuantActs& out);

// Y[b*ldy + n] = sum_k W[n,k] X[b*ldx + k]
void matmul(ThreadPool& tp, const Weight& W, const float* X, int64_t ldx, int B, float* Y, int64_t ldy);
// Several products of the same X (Q, K and V; gate and up) in one dispatch of the thread pool: X is
// quantized once per vec_dot_type, and each output's bits are matmul's.
struct MatmulOut {
  const Weight* W;
  float* Y;
  int64_t ldy;
};
constexpr int kMaxMatmulMulti = 4;
void matmul_multi(ThreadPool& tp, const MatmulOut* outs, int n_out, const float* X, int64_t ldx, int B);
// same with pre-quantized activations (must be W's vec_dot_type)
void matmul_q(ThreadPool& tp, const Weight& W, const QuantActs& qa, float* Y, int64_t ldy);
// rows [n0, n1) of W against all of qa's rows, single-threaded, for callers that already run inside a
// parallel region (MoE experts)
void matmul_q_st(const Weight& W, const QuantActs& qa, float* Y, int64_t ldy, int64_t n0, int64_t n1);
// qa's rows `rows[0..m)` copied into `out` (an expert's gathered tokens), contiguous
void gather_acts(const QuantActs& qa, const int* rows, int m, QuantActs& out);

// Embedding lookup: row `id` of W dequantized to float.
void get_row(const Weight& W, int64_t id, float* out);
// Row `id` of W in its GGUF layout (row_size bytes), for grouped weights too.
void copy_row(const Weight& W, int64_t id, uint8_t* out);
// Whether W can go into 16-row groups: its type has a group layout, its rows come in whole groups, and this
// SIMD level's group kernel is the fast one (avx512, amx; the others have the reference).
bool can_group(const Weight& W);
// W's rows into 16-row groups at dst (W.nb2 * experts bytes; dst == W.data where that is writable), and W
// pointed at them.
void group_rows(Weight& W, uint8_t* dst);

}  // namespace pyllm
