// Drafts longer than the target's recurrent planes (ngram drafts reach 64 tokens; a plane per row
// of a 27B-sized model's recurrent state costs ~150 MB per sequence). The Context keeps
// verify_planes() planes: a verification of [last, d1..dn] with n < planes rolls back by a plane
// switch as always; a longer one first saves the sequence's state (RsCheckpoint::save), and when
// the accepted prefix's plane was overwritten by later rows, restores it and replays the kept rows
// (llama.cpp's checkpoint + replay). Rows are batch invariant, so the replayed state is the same
// bits the verification computed.
#pragma once
#include <cstdint>
#include <vector>

#include "memory/memory.h"
#include "model/model.h"
#include "speculative/spec_params.h"

namespace pyllm {

// The recurrent planes for drafts up to n_draft_max: all of them (n_draft_max + 1) while one
// sequence's planes fit kPlaneBudget bytes, else as many as fit, never fewer than a draft model's
// n_max + 1 (MTP, draft-simple: their drafts never need a replay) or 2. spec.max_planes > 0 caps it
// (tests).
int verify_planes(const Model& model, const SpecParams& spec, int n_draft_max);
constexpr size_t kPlaneBudget = size_t(1) << 30;

class RsCheckpoint {
 public:
  // the recurrent state seq holds now (its current plane of every layer)
  void save(const Memory& mem, int seq);
  // it becomes seq's state at position pos, the KV cut there: the rows from pos are to be replayed
  void restore(Memory& mem, int seq, int32_t pos) const;

 private:
  std::vector<float> buf_;
};

}  // namespace pyllm
