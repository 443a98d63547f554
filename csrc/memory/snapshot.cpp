#include "memory/snapshot.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace pyllm {

size_t KVSnap::bytes() const {
  size_t b = 0;
  for (size_t i = 0; i < k.size(); i++) b += k[i].size() + v[i].size();
  return b;
}

size_t RSSnap::bytes() const {
  size_t b = 0;
  for (size_t i = 0; i < conv.size(); i++) b += (conv[i].size() + ssm[i].size()) * sizeof(float);
  return b;
}

KVSnap save_kv(const Memory& mem, int seq, int32_t n) {
  if (n < 0 || n > mem.kv_len[seq]) throw std::out_of_range("save_kv: " + std::to_string(n) + " rows, sequence holds " + std::to_string(mem.kv_len[seq]));
  KVSnap s;
  s.n = n;
  s.k.resize(mem.kv.size()); s.v.resize(mem.kv.size());
  for (size_t il = 0; il < mem.kv.size(); il++) {
    const KVLayer& L = mem.kv[il];
    if (!L.n_embd_k) continue;
    const size_t o = (size_t)seq * mem.n_ctx_seq;
    s.k[il].assign(L.k.begin() + o * L.k_row, L.k.begin() + (o + n) * L.k_row);
    s.v[il].assign(L.v.begin() + o * L.v_row, L.v.begin() + (o + n) * L.v_row);
  }
  return s;
}

void load_kv(Memory& mem, int seq, const KVSnap& s) {
  check_shape(mem, &s, nullptr, "KV");
  for (size_t il = 0; il < mem.kv.size(); il++) {
    KVLayer& L = mem.kv[il];
    if (!L.n_embd_k) continue;
    std::copy(s.k[il].begin(), s.k[il].end(), mem.k_ptr((int)il, seq, 0));
    std::copy(s.v[il].begin(), s.v[il].end(), mem.v_ptr((int)il, seq, 0));
  }
  mem.kv_len[seq] = s.n;
}

RSSnap save_rs(const Memory& mem, int seq) {
  RSSnap s;
  s.pos = mem.kv_len[seq];
  s.conv.resize(mem.rs.size()); s.ssm.resize(mem.rs.size());
  Memory& m = const_cast<Memory&>(mem);  // the pointer helpers are non-const; nothing is written
  const int c = mem.cur_plane[seq];
  for (size_t il = 0; il < mem.rs.size(); il++) {
    const RSLayer& L = mem.rs[il];
    if (!L.conv_size) continue;
    const float* cp = m.conv_ptr((int)il, seq, c);
    const float* sp = m.ssm_ptr((int)il, seq, c);
    s.conv[il].assign(cp, cp + L.conv_size);
    s.ssm[il].assign(sp, sp + L.ssm_size);
  }
  return s;
}

void load_rs(Memory& mem, int seq, const RSSnap& s) {
  check_shape(mem, nullptr, &s, "recurrent");
  if (s.pos < 0 || s.pos >= mem.n_ctx_seq) throw std::invalid_argument("load_rs: position " + std::to_string(s.pos) + " outside the context");
  const int c = mem.cur_plane[seq];
  for (size_t il = 0; il < mem.rs.size(); il++) {
    const RSLayer& L = mem.rs[il];
    if (!L.conv_size) continue;
    std::copy(s.conv[il].begin(), s.conv[il].end(), mem.conv_ptr((int)il, seq, c));
    std::copy(s.ssm[il].begin(), s.ssm[il].end(), mem.ssm_ptr((int)il, seq, c));
  }
  for (int p = 0; p < mem.n_planes; p++) mem.plane_pos[seq * mem.n_planes + p] = -1;
  mem.plane_pos[seq * mem.n_planes + c] = s.pos;
  mem.kv_len[seq] = s.pos;
}

void check_shape(const Memory& mem, const KVSnap* kv, const RSSnap* rs, const char* what) {
  auto bad = [&](size_t il, const std::string& why) {
    throw std::invalid_argument(std::string(what) + " state does not fit this context: layer " + std::to_string(il) + " " + why);
  };
  if (kv) {
    if (kv->k.size() != mem.kv.size() || kv->v.size() != mem.kv.size())
      throw std::invalid_argument(std::string(what) + " state has " + std::to_string(kv->k.size()) + " layers, the model " + std::to_string(mem.kv.size()));
    if (kv->n < 0 || kv->n >= mem.n_ctx_seq)
      throw std::invalid_argument(std::string(what) + " state holds " + std::to_string(kv->n) + " positions, the context per slot is " + std::to_string(mem.n_ctx_seq));
    for (size_t il = 0; il < mem.kv.size(); il++) {
      const KVLayer& L = mem.kv[il];
      if (kv->k[il].size() != (size_t)kv->n * L.k_row || kv->v[il].size() != (size_t)kv->n * L.v_row)
        bad(il, "has KV rows of another size (another model, or other -ctk / -ctv cache types)");
    }
  }
  if (rs) {
    if (rs->conv.size() != mem.rs.size() || rs->ssm.size() != mem.rs.size())
      throw std::invalid_argument(std::string(what) + " state has " + std::to_string(rs->conv.size()) + " layers, the model " + std::to_string(mem.rs.size()));
    for (size_t il = 0; il < mem.rs.size(); il++) {
      const RSLayer& L = mem.rs[il];
      if (rs->conv[il].size() != (size_t)L.conv_size || rs->ssm[il].size() != (size_t)L.ssm_size) bad(il, "has a recurrent state of another size");
    }
  }
}

}  // namespace pyllm
