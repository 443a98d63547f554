// The per-row scales of a Q4_K super-block in 16-row groups (ggml/repack.h), vectorised over the group's rows, and
// an activation's sub-block sums paired to match: shared by the group kernel (x16_avx512.inc.h) and the AMX group
// tiles (amx_x16.cpp). Static: each includer compiles its own copy under its own target flags.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "ggml/fp16.h"
#include "ggml/quants.h"
#include "ggml/repack.h"

namespace pyllm {

struct Q4KSb {  // one super-block's per-row scales: sc in bytes 0..3 of slo (sub-blocks 0..3) / shi (4..7)
  __m512 d, dm;
  __m512i slo, shi, mp[4];  // mp: (m0, m2), (m1, m3), (m4, m6), (m5, m7) as int16 pairs
};
static inline Q4KSb q4_K_x16_scales(const block_q4_Kx16& b) {
  Q4KSb s;
  s.d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)b.d));
  s.dm = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)b.dmin));
  const __m512i w0 = _mm512_loadu_si512(b.scales[0]), w1 = _mm512_loadu_si512(b.scales[1]),
                w2 = _mm512_loadu_si512(b.scales[2]);
  const __m512i c3f = _mm512_set1_epi32(0x3F3F3F3F), c0f = _mm512_set1_epi32(0x0F0F0F0F),
                c30 = _mm512_set1_epi32(0x30303030), c00ff = _mm512_set1_epi32(0x00FF00FF);
  s.slo = _mm512_and_si512(w0, c3f);
  s.shi = _mm512_or_si512(_mm512_and_si512(w2, c0f), _mm512_and_si512(_mm512_srli_epi32(w0, 2), c30));
  const __m512i mlo = _mm512_and_si512(w1, c3f);
  const __m512i mhi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), c0f), _mm512_and_si512(_mm512_srli_epi32(w1, 2), c30));
  s.mp[0] = _mm512_and_si512(mlo, c00ff); s.mp[1] = _mm512_and_si512(_mm512_srli_epi32(mlo, 8), c00ff);
  s.mp[2] = _mm512_and_si512(mhi, c00ff); s.mp[3] = _mm512_and_si512(_mm512_srli_epi32(mhi, 8), c00ff);
  return s;
}
// y's bsums of sub-blocks a and b as an int16 pair
static inline int32_t ybs_pair(const block_q8_K* y, int a, int b) {
  const int sa = y->bsums[2 * a] + y->bsums[2 * a + 1], sb = y->bsums[2 * b] + y->bsums[2 * b + 1];
  return (int32_t)((uint32_t)(uint16_t)sa | (uint32_t)(uint16_t)sb << 16);
}

}  // namespace pyllm
