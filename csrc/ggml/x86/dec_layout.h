// The decoded-row layout of the sign-magnitude types (IQ2 / IQ3 lattices, Q3_K) and of Q5_K (magnitudes
// 0..31, no negatives, plus its mins): dec_row writes it (dec_avx512.inc.h), dot_dec and the AMX tile
// packer (quants_amx.cpp) read it.
#pragma once
#include <cstdint>

#include "ggml/quants.h"

namespace pyllm {

// One super-block: weight e = sc[e / 16] * (bit e % 64 of neg[e / 64] ? -aw[e] : aw[e]), times d (and
// the type's constant factor), minus dmin * mins[e / 32] (Q5_K; zero for the others).
struct alignas(64) DecSB {
  uint8_t aw[QK_K];    // |weight| per element, chunk order
  uint64_t neg[4];     // bit j of neg[p]: element 64p + j is negative
  int16_t sc[16];      // scale of chunk c's half h at 2c + h
  float d, dmin;
  int16_t mins[8];     // per 32-element chunk
};
static_assert(sizeof(DecSB) == 384, "DecSB: 6 cache lines");

}  // namespace pyllm
