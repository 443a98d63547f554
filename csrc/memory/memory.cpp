#include "memory/memory.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace pyllm {

void Memory::add_kv_layer(int il, int64_t n_embd_k, int64_t n_embd_v) {
  auto& L = kv[il];
  L.n_embd_k = n_embd_k; L.n_embd_v = n_embd_v;
  L.k_row = row_size(L.tk, n_embd_k); L.v_row = row_size(L.tv, n_embd_v);
  L.k.assign((size_t)n_seq * n_ctx_seq * L.k_row, 0);
  L.v.assign((size_t)n_seq * n_ctx_seq * L.v_row, 0);
}

void Memory::set_kv_types(ggml_type tk, ggml_type tv) {
  for (ggml_type t : {tk, tv})
    if (t != GGML_TYPE_F16 && t != GGML_TYPE_BF16 && t != GGML_TYPE_Q8_0 && t != GGML_TYPE_Q4_0)
      throw std::invalid_argument(std::string("KV cache type ") + type_name(t) + " is not supported (f16, bf16, q8_0, q4_0)");
  for (size_t il = 0; il < kv.size(); il++) {
    KVLayer& L = kv[il];
    if (!L.n_embd_k) continue;
    const int64_t bk = get_type_traits(tk).blck_size, bv = get_type_traits(tv).blck_size;
    if (L.n_embd_k % bk || L.n_embd_v % bv)
      throw std::invalid_argument("KV cache type " + std::string(type_name(L.n_embd_k % bk ? tk : tv)) + ": layer " + std::to_string(il) +
                                  " rows of " + std::to_string(L.n_embd_k % bk ? L.n_embd_k : L.n_embd_v) + " values are not whole blocks");
    L.tk = tk; L.tv = tv;
    add_kv_layer((int)il, L.n_embd_k, L.n_embd_v);
  }
}

void Memory::add_rs_layer(int il, int64_t conv_size, int64_t ssm_size) {
  auto& L = rs[il];
  L.conv_size = conv_size; L.ssm_size = ssm_size;
  L.conv.assign((size_t)n_seq * n_planes * conv_size, 0.f);
  L.ssm.assign((size_t)n_seq * n_planes * ssm_size, 0.f);
  n_rs_layers++;
}

bool Memory::can_rm(int seq, int32_t p0) const {
  if (p0 >= kv_len[seq]) return true;
  if (!has_recurrent() || p0 <= 0) return true;
  for (int p = 0; p < n_planes; p++) if (plane_pos[seq * n_planes + p] == p0) return true;
  return false;
}

void Memory::seq_rm(int seq, int32_t p0) {
  if (p0 < 0) p0 = 0;
  if (p0 >= kv_len[seq]) return;
  if (has_recurrent()) {
    if (p0 == 0) {
      int c = cur_plane[seq];
      for (auto& L : rs) {
        if (!L.conv_size) continue;
        std::fill_n(conv_ptr((int)(&L - rs.data()), seq, c), L.conv_size, 0.f);
        std::fill_n(ssm_ptr((int)(&L - rs.data()), seq, c), L.ssm_size, 0.f);
      }
      for (int p = 0; p < n_planes; p++) plane_pos[seq * n_planes + p] = -1;
      plane_pos[seq * n_planes + c] = 0;
    } else {
      int found = -1;
      for (int p = 0; p < n_planes; p++) if (plane_pos[seq * n_planes + p] == p0) found = p;
      if (found < 0) {
        throw std::runtime_error("cannot roll back the recurrent state of sequence " + std::to_string(seq) +
                                 " to position " + std::to_string(p0) + " (holds " + std::to_string(kv_len[seq]) + ")");
      }
      cur_plane[seq] = found;
      // planes past the new head describe a future that no longer exists
      for (int p = 0; p < n_planes; p++)
        if (plane_pos[seq * n_planes + p] > p0) plane_pos[seq * n_planes + p] = -1;
    }
  }
  kv_len[seq] = p0;
}

void Memory::commit_run(int seq, int32_t pos0, int n_rows, bool snap) {
  kv_len[seq] = pos0 + n_rows;
  if (!has_recurrent()) return;
  if (snap) {
    for (int i = 0; i < n_rows; i++) plane_pos[seq * n_planes + run_out_plane(seq, i, true)] = pos0 + i + 1;
    cur_plane[seq] = run_out_plane(seq, n_rows - 1, true);
  } else {
    for (int p = 0; p < n_planes; p++) plane_pos[seq * n_planes + p] = -1;
    plane_pos[seq * n_planes + cur_plane[seq]] = pos0 + n_rows;
  }
}

size_t Memory::bytes() const {
  size_t b = 0;
  for (auto& L : kv) b += L.k.size() + L.v.size();
  for (auto& L : rs) b += (L.conv.size() + L.ssm.size()) * 4;
  return b;
}

}  // namespace pyllm
