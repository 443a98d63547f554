#include "speculative/rs_checkpoint.h"

#include <algorithm>

namespace pyllm {

int verify_planes(const Model& model, const SpecParams& spec, int n_draft_max) {
  const int want = n_draft_max + 1;
  const int floor = std::min(want, (spec.mtp() || spec.has("draft-simple")) ? spec.n_max + 1 : 2);
  int cap = want;
  // one sequence's recurrent state, one plane (KV of a 1-position context is negligible)
  const std::unique_ptr<Memory> probe = model.create_memory(1, 1, 1);
  size_t plane = 0;
  for (const RSLayer& L : probe->rs) plane += (size_t)(L.conv_size + L.ssm_size) * sizeof(float);
  if (plane > 0) cap = (int)std::min<size_t>((size_t)want, std::max<size_t>(1, kPlaneBudget / plane));
  if (spec.max_planes > 0) cap = std::min(cap, spec.max_planes);
  return std::max(floor, cap);
}

void RsCheckpoint::save(const Memory& mem, int seq) {
  buf_.clear();
  const int c = mem.cur_plane[seq];
  for (const RSLayer& L : mem.rs) {
    if (!L.conv_size) continue;
    const float* cv = L.conv.data() + ((int64_t)seq * mem.n_planes + c) * L.conv_size;
    const float* ss = L.ssm.data() + ((int64_t)seq * mem.n_planes + c) * L.ssm_size;
    buf_.insert(buf_.end(), cv, cv + L.conv_size);
    buf_.insert(buf_.end(), ss, ss + L.ssm_size);
  }
}

void RsCheckpoint::restore(Memory& mem, int seq, int32_t pos) const {
  const int c = mem.cur_plane[seq];
  size_t off = 0;
  for (size_t il = 0; il < mem.rs.size(); il++) {
    const RSLayer& L = mem.rs[il];
    if (!L.conv_size) continue;
    std::copy_n(buf_.begin() + off, L.conv_size, mem.conv_ptr((int)il, seq, c)); off += L.conv_size;
    std::copy_n(buf_.begin() + off, L.ssm_size, mem.ssm_ptr((int)il, seq, c)); off += L.ssm_size;
  }
  // only this plane is valid now, at pos; the KV beyond pos is dropped
  for (int p = 0; p < mem.n_planes; p++) mem.plane_pos[seq * mem.n_planes + p] = -1;
  mem.plane_pos[seq * mem.n_planes + c] = pos;
  mem.kv_len[seq] = pos;
}

}  // namespace pyllm
