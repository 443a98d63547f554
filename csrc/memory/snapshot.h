// Copies of one sequence's memory, for the prompt cache (csrc/engine/seq_state.h):
//  - KVSnap: the KV rows [0, n) of every attention layer (positions below the length are never
//    rewritten, so cutting KV back is free; a copy is only needed when the sequence is reused for
//    another prompt and the rows should come back later);
//  - RSSnap: the recurrent (Gated DeltaNet conv + ssm) state after `pos` positions: the part that
//    cannot be cut back, and what a context checkpoint holds.
// Layers are indexed as in Memory; a layer of the other kind has empty vectors.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "memory/memory.h"

namespace pyllm {

struct KVSnap {
  int32_t n = 0;
  std::vector<std::vector<uint8_t>> k, v;  // per layer [n][k_row|v_row] (the layer's cache types)
  size_t bytes() const;
};

struct RSSnap {
  int32_t pos = -1;  // -1: none
  std::vector<std::vector<float>> conv, ssm;  // per layer
  size_t bytes() const;
};

// KV rows [0, n) of seq (n <= its length).
KVSnap save_kv(const Memory& mem, int seq, int32_t n);
// Writes the rows back and sets seq's length to snap.n; the recurrent state is not touched.
void load_kv(Memory& mem, int seq, const KVSnap& snap);
// The recurrent state of seq at its current length (the current plane); pos = the length.
RSSnap save_rs(const Memory& mem, int seq);
// Puts a recurrent state back: seq holds snap.pos positions afterwards (its KV rows below snap.pos
// must be the ones the state was computed with); other planes become stale.
void load_rs(Memory& mem, int seq, const RSSnap& snap);
// Throws std::invalid_argument naming the first layer whose shape differs from mem's.
void check_shape(const Memory& mem, const KVSnap* kv, const RSSnap* rs, const char* what);

}  // namespace pyllm
