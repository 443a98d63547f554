// Prefill on decoded weight rows (AVX-512), for the sign-magnitude types with 16-element int16 scales:
// the IQ2 / IQ3 lattices and Q3_K. Their decode (grid lookups, sign tables) costs more than several
// activation rows' dots, and vec_dot_k repeats it for every group of <= 8 tokens. matmul instead
// decodes a weight row once per batch into DecSB blocks (magnitudes, a 64-bit negative mask per 64
// elements, the 16 scales, d) and runs vec_dot_dec_k over all tokens.
//
// Bits: lane k of the 256-bit kernels' integer sum is sum over chunks c of sc(c, half) * (the 4
// products of bytes 4k..4k+3 of chunk c), with y's sign flipped where the weight is negative. Here a
// zmm holds chunks 2p and 2p+1 (64 contiguous bytes of y): y is negated under the mask, maddubs with
// the magnitudes, dpwssd with the scales; folding the halves gives the same 8 int32 lanes exactly
// (integers), and the float side (fma(d*y.d, lanes, acc), kFactor * hsum8) is dot_lattice's.
// Included by quants_avx512.cpp after quants_lowbit_simd.inc.h.
#pragma once
#include "ggml/x86/dec_layout.h"

namespace pyllm {
namespace x86_avx512 {

static size_t dec_row_bytes(int64_t K) { return (size_t)(K / QK_K) * sizeof(DecSB); }

// Q3_K in the lattice form: magnitudes |q| (q = low2 - 4 where the high bit is clear), the sign
// source q itself, signed 6-bit scales minus 32 (dot_q3_K's decode).
struct L_q3_K {
  typedef block_q3_K B;
  static constexpr float kFactor = 1.f;
  static inline void decode(const B& b, __m256i* aq, __m256i* sg, __m256i* sc) {
    __m256i q[8];
    q2_decode(b.qs, q);
    const __m256i hm = _mm256_loadu_si256((const __m256i*)b.hmask);
    for (int c = 0; c < 8; c++) {
      const __m256i bit = _mm256_set1_epi8((char)(1 << c));
      const __m256i clear = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), _mm256_setzero_si256());
      sg[c] = _mm256_sub_epi8(q[c], _mm256_and_si256(clear, _mm256_set1_epi8(4)));  // -4..3
      aq[c] = _mm256_sign_epi8(sg[c], sg[c]);
      sc[c] = sc16(q3k_scale(b.scales, 2 * c) - 32, q3k_scale(b.scales, 2 * c + 1) - 32);
    }
  }
};

template <class L>
static void dec_row(int n, const void* vx, void* out) {
  const typename L::B* x = (const typename L::B*)vx;
  DecSB* o = (DecSB*)out;
  for (int i = 0; i < n / QK_K; i++) {
    __m256i aq[8], sg[8], sc[8];
    L::decode(x[i], aq, sg, sc);
    for (int c = 0; c < 8; c++) {
      _mm256_store_si256((__m256i*)(o[i].aw + 32 * c), aq[c]);
      o[i].sc[2 * c] = (int16_t)_mm256_extract_epi16(sc[c], 0);
      o[i].sc[2 * c + 1] = (int16_t)_mm256_extract_epi16(sc[c], 8);
    }
    for (int p = 0; p < 4; p++)
      o[i].neg[p] = (uint64_t)(uint32_t)_mm256_movemask_epi8(sg[2 * p]) |
                    (uint64_t)(uint32_t)_mm256_movemask_epi8(sg[2 * p + 1]) << 32;
    o[i].d = h2f(x[i].d);
  }
}

template <class L, int NR>
static void dot_dec(int n, float* s, const void* vx, const void* vy, size_t by) {
  const DecSB* x = (const DecSB*)vx;
  // word w of pair p's scale vector: chunk 2p + w / 16, half (w % 16) / 8
  alignas(64) static const int16_t kIdx[4][32] = {
#define PYLLM_ROW(P) {4*P,4*P,4*P,4*P,4*P,4*P,4*P,4*P, 4*P+1,4*P+1,4*P+1,4*P+1,4*P+1,4*P+1,4*P+1,4*P+1, \
                      4*P+2,4*P+2,4*P+2,4*P+2,4*P+2,4*P+2,4*P+2,4*P+2, 4*P+3,4*P+3,4*P+3,4*P+3,4*P+3,4*P+3,4*P+3,4*P+3}
      PYLLM_ROW(0), PYLLM_ROW(1), PYLLM_ROW(2), PYLLM_ROW(3)
#undef PYLLM_ROW
  };
  __m256 acc[NR];
  for (int r = 0; r < NR; r++) acc[r] = _mm256_setzero_ps();
  const __m512i zero = _mm512_setzero_si512();
  for (int i = 0; i < n / QK_K; i++) {
    const DecSB& b = x[i];
    const __m512i scw = _mm512_castsi256_si512(_mm256_load_si256((const __m256i*)b.sc));
    __m512i aw[4], scv[4];
    __mmask64 m[4];
    for (int p = 0; p < 4; p++) {
      aw[p] = _mm512_load_si512((const void*)(b.aw + 64 * p));
      scv[p] = _mm512_permutexvar_epi16(_mm512_load_si512((const void*)kIdx[p]), scw);
      m[p] = _cvtu64_mask64(b.neg[p]);
    }
    for (int r = 0; r < NR; r++) {
      const block_q8_K* y = (const block_q8_K*)row(vy, by, r) + i;
      __m512i isum = _mm512_setzero_si512();
      for (int p = 0; p < 4; p++) {
        const __m512i yq = _mm512_loadu_si512((const void*)(y->qs + 64 * p));
        const __m512i ys = _mm512_mask_sub_epi8(yq, m[p], zero, yq);
        isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(aw[p], ys), scv[p]);
      }
      const __m256i is8 = _mm256_add_epi32(_mm512_castsi512_si256(isum), _mm512_extracti64x4_epi64(isum, 1));
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(b.d * y->d), _mm256_cvtepi32_ps(is8), acc[r]);
    }
  }
  for (int r = 0; r < NR; r++) s[r] = L::kFactor * hsum8(acc[r]);
}

template <class L> PYLLM_KERNEL_FAMILY(K_dec, (dot_dec<L, NR>(n, s, x, y, by)));

static void install_dec_kernels(type_traits* t) {
  auto put = [&](ggml_type id, dec_row_fn f, vec_dot_k_fn fk) {
    t[id].dec_row = f; t[id].dec_row_bytes = dec_row_bytes; t[id].vec_dot_dec_k = fk;
  };
  put(GGML_TYPE_IQ2_XXS, dec_row<L_iq2_xxs>, vdk<K_dec<L_iq2_xxs>>);
  put(GGML_TYPE_IQ2_XS, dec_row<L_iq2_xs>, vdk<K_dec<L_iq2_xs>>);
  put(GGML_TYPE_IQ2_S, dec_row<L_iq2_s>, vdk<K_dec<L_iq2_s>>);
  put(GGML_TYPE_IQ3_XXS, dec_row<L_iq3_xxs>, vdk<K_dec<L_iq3_xxs>>);
  put(GGML_TYPE_IQ3_S, dec_row<L_iq3_s>, vdk<K_dec<L_iq3_s>>);
  put(GGML_TYPE_Q3_K, dec_row<L_q3_K>, vdk<K_dec<L_q3_K>>);
}

}  // namespace x86_avx512
}  // namespace pyllm
