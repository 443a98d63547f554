// x86 kernels for the low-bit types: Q2_K, Q3_K, the IQ lattice types and MXFP4. Included by
// quants_avx2.cpp / quants_avx512.cpp after quants_simd.inc.h (same SIMD_NS, helpers, rules).
//
// Numerics: the integer lanes and the float steps are those of llama.cpp's x86 kernels
// (ggml-cpu/arch/x86/quants.c, AVX2 path, which its AVX-512 builds use too; and, where llama.cpp
// repacks the weight by default, arch/x86/repack.cpp's gemv), so results match upstream bit for
// bit: lane k of a 32-byte chunk's integer sum is the 4 products of bytes 4k..4k+3 times the
// chunk-half's scale (madd of maddubs, exact), then one fma per super-block (or block) with the
// same scale products, the same horizontal sum and the same final factor. Both levels run the
// same instructions here (maddubs/madd give the same integers as VNNI), so they agree bit for bit.
//
// Batch invariance: every kernel is a template over NR activation rows; per row the operations and
// their order do not depend on NR.
#pragma once
#include "ggml/quants_iq.h"

namespace pyllm {
namespace SIMD_NS {

// bit j of `bits` -> byte j = 0xFF (set) or 0x00
static inline __m256i bits_to_mask(uint32_t bits) {
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0);
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
  const __m256i bitm = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
  return _mm256_cmpeq_epi8(_mm256_and_si256(v, bitm), bitm);
}
// +-1 bytes for _mm256_sign_epi8 from sign bits
static inline __m256i signs_pm1(uint32_t bits) { return _mm256_or_si256(bits_to_mask(bits), _mm256_set1_epi8(1)); }
// two 16-element scales of a 32-byte chunk as int16 lanes (bytes 0..15 -> a, 16..31 -> b)
static inline __m256i sc16(int a, int b) { return _mm256_set_m128i(_mm_set1_epi16((short)b), _mm_set1_epi16((short)a)); }
// lane k = scale * sum of the 4 products u[4k..4k+3] * s[4k..4k+3] (u unsigned, no saturation in our ranges)
static inline __m256i dot_sc(__m256i u, __m256i s, __m256i sc) { return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), sc); }
static inline uint32_t u32_at(const void* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }
static inline uint32_t ks4(uint32_t a) {  // four 7-bit sign indices -> 32 sign bits
  return ksigns_iq2xs[a & 127] | (uint32_t)ksigns_iq2xs[(a >> 7) & 127] << 8 |
         (uint32_t)ksigns_iq2xs[(a >> 14) & 127] << 16 | (uint32_t)ksigns_iq2xs[(a >> 21) & 127] << 24;
}

// ---------------------------------------------------------------- IQ2 / IQ3 lattices . Q8_K
// decode(b, aq, sg, sc): per 32-element chunk c the grid magnitudes aq[c] (unsigned bytes), the
// sign multipliers sg[c] (+-1) and the int16 scales (2*ls + 1) of its two halves.

struct L_iq2_xxs {
  typedef block_iq2_xxs B;
  static constexpr float kFactor = 0.125f;
  static inline void decode(const B& b, __m256i* aq, __m256i* sg, __m256i* sc) {
    for (int c = 0; c < 8; c++) {
      const uint32_t g = u32_at(b.qs + 4 * c), a = u32_at(b.qs + 4 * c + 2);
      aq[c] = _mm256_set_epi64x(iq2xxs_grid[g >> 24], iq2xxs_grid[(g >> 16) & 255], iq2xxs_grid[(g >> 8) & 255], iq2xxs_grid[g & 255]);
      sg[c] = signs_pm1(ks4(a));
      const int ls = 2 * (a >> 28) + 1;
      sc[c] = sc16(ls, ls);
    }
  }
};
struct L_iq2_xs {
  typedef block_iq2_xs B;
  static constexpr float kFactor = 0.125f;
  static inline void decode(const B& b, __m256i* aq, __m256i* sg, __m256i* sc) {
    for (int c = 0; c < 8; c++) {
      const uint16_t* q = b.qs + 4 * c;
      aq[c] = _mm256_set_epi64x(iq2xs_grid[q[3] & 511], iq2xs_grid[q[2] & 511], iq2xs_grid[q[1] & 511], iq2xs_grid[q[0] & 511]);
      sg[c] = signs_pm1(ksigns_iq2xs[q[0] >> 9] | (uint32_t)ksigns_iq2xs[q[1] >> 9] << 8 |
                        (uint32_t)ksigns_iq2xs[q[2] >> 9] << 16 | (uint32_t)ksigns_iq2xs[q[3] >> 9] << 24);
      sc[c] = sc16(2 * (b.scales[c] & 0xF) + 1, 2 * (b.scales[c] >> 4) + 1);
    }
  }
};
struct L_iq2_s {
  typedef block_iq2_s B;
  static constexpr float kFactor = 0.125f;
  static inline void decode(const B& b, __m256i* aq, __m256i* sg, __m256i* sc) {
    for (int c = 0; c < 8; c++) {
      const uint8_t* q = b.qs + 4 * c;
      const int h = b.qh[c];
      aq[c] = _mm256_set_epi64x(iq2s_grid[q[3] | ((h << 2) & 0x300)], iq2s_grid[q[2] | ((h << 4) & 0x300)],
                                iq2s_grid[q[1] | ((h << 6) & 0x300)], iq2s_grid[q[0] | ((h << 8) & 0x300)]);
      sg[c] = signs_pm1(u32_at(b.qs + QK_K / 8 + 4 * c));
      sc[c] = sc16(2 * (b.scales[c] & 0xF) + 1, 2 * (b.scales[c] >> 4) + 1);
    }
  }
};
struct L_iq3_xxs {
  typedef block_iq3_xxs B;
  static constexpr float kFactor = 0.25f;
  static inline void decode(const B& b, __m256i* aq, __m256i* sg, __m256i* sc) {
    for (int c = 0; c < 8; c++) {
      const uint8_t* q = b.qs + 8 * c;
      const uint32_t a = u32_at(b.qs + QK_K / 4 + 4 * c);
      aq[c] = _mm256_set_epi32(iq3xxs_grid[q[7]], iq3xxs_grid[q[6]], iq3xxs_grid[q[5]], iq3xxs_grid[q[4]],
                               iq3xxs_grid[q[3]], iq3xxs_grid[q[2]], iq3xxs_grid[q[1]], iq3xxs_grid[q[0]]);
      sg[c] = signs_pm1(ks4(a));
      const int ls = 2 * (a >> 28) + 1;
      sc[c] = sc16(ls, ls);
    }
  }
};
struct L_iq3_s {
  typedef block_iq3_s B;
  static constexpr float kFactor = 1.f;
  static inline void decode(const B& b, __m256i* aq, __m256i* sg, __m256i* sc) {
    for (int c = 0; c < 8; c++) {
      const uint8_t* q = b.qs + 8 * c;
      const int h = b.qh[c];
      int idx[8];
      for (int k = 0; k < 8; k++) idx[k] = q[k] | (((h >> k) & 1) << 8);
      aq[c] = _mm256_set_epi32(iq3s_grid[idx[7]], iq3s_grid[idx[6]], iq3s_grid[idx[5]], iq3s_grid[idx[4]],
                               iq3s_grid[idx[3]], iq3s_grid[idx[2]], iq3s_grid[idx[1]], iq3s_grid[idx[0]]);
      sg[c] = signs_pm1(u32_at(b.signs + 4 * c));
      const int ls = 2 * ((b.scales[c / 2] >> (4 * (c % 2))) & 0xF) + 1;
      sc[c] = sc16(ls, ls);
    }
  }
};

// upstream: accumf = fma(d*y.d, lanes, accumf) per super-block; result kFactor * hsum
template <class L, int NR>
static void dot_lattice(int n, float* s, const void* vx, const void* vy, size_t by) {
  const typename L::B* x = (const typename L::B*)vx;
  __m256 acc[NR];
  for (int r = 0; r < NR; r++) acc[r] = _mm256_setzero_ps();
  for (int i = 0; i < n / QK_K; i++) {
    __m256i aq[8], sg[8], sc[8];
    L::decode(x[i], aq, sg, sc);
    const float d = h2f(x[i].d);
    for (int r = 0; r < NR; r++) {
      const block_q8_K* y = (const block_q8_K*)row(vy, by, r) + i;
      __m256i isum = _mm256_setzero_si256();
      for (int c = 0; c < 8; c++) {
        const __m256i yq = _mm256_loadu_si256((const __m256i*)(y->qs + 32 * c));
        isum = _mm256_add_epi32(isum, dot_sc(aq[c], _mm256_sign_epi8(yq, sg[c]), sc[c]));
      }
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * y->d), _mm256_cvtepi32_ps(isum), acc[r]);
    }
  }
  for (int r = 0; r < NR; r++) s[r] = L::kFactor * hsum8(acc[r]);
}

// ---------------------------------------------------------------- IQ1_S / IQ1_M . Q8_K
// Signed grid g in {-1, 0, 1}: |g| . (y * sign g). The +-1/8 delta: IQ1_S through bsums (one sign per
// 32, a scalar fma per super-block as upstream), IQ1_M as a second lane vector (sign per 8).

template <int NR>
static void dot_iq1_s(int n, float* s, const void* vx, const void* vy, size_t by) {
  const block_iq1_s* x = (const block_iq1_s*)vx;
  __m256 acc[NR];
  float acc1[NR];
  for (int r = 0; r < NR; r++) { acc[r] = _mm256_setzero_ps(); acc1[r] = 0.f; }
  for (int i = 0; i < n / QK_K; i++) {
    __m256i g[8], ag[8], sc[8];
    int ls[8], dsg[8];
    for (int c = 0; c < 8; c++) {
      const uint8_t* q = x[i].qs + 4 * c;
      const int h = x[i].qh[c];
      g[c] = _mm256_set_epi64x(iq1s_grid[q[3] | ((h >> 1) & 0x700)], iq1s_grid[q[2] | ((h << 2) & 0x700)],
                               iq1s_grid[q[1] | ((h << 5) & 0x700)], iq1s_grid[q[0] | ((h << 8) & 0x700)]);
      ag[c] = _mm256_sign_epi8(g[c], g[c]);
      ls[c] = 2 * ((h >> 12) & 7) + 1;
      dsg[c] = h & 0x8000 ? -1 : 1;
      sc[c] = sc16(ls[c], ls[c]);
    }
    const float dx = h2f(x[i].d);
    for (int r = 0; r < NR; r++) {
      const block_q8_K* y = (const block_q8_K*)row(vy, by, r) + i;
      __m256i isum = _mm256_setzero_si256();
      int isum1 = 0;
      for (int c = 0; c < 8; c++) {
        const __m256i yq = _mm256_loadu_si256((const __m256i*)(y->qs + 32 * c));
        isum = _mm256_add_epi32(isum, dot_sc(ag[c], _mm256_sign_epi8(yq, g[c]), sc[c]));
        isum1 += (y->bsums[2 * c] + y->bsums[2 * c + 1]) * dsg[c] * ls[c];
      }
      const float d = y->d * dx;
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(isum), acc[r]);
      acc1[r] = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(d), _mm_set_ss((float)isum1), _mm_set_ss(acc1[r])));
    }
  }
  for (int r = 0; r < NR; r++) s[r] = hsum8(acc[r]) + IQ1S_DELTA * acc1[r];
}

template <int NR>
static void dot_iq1_m(int n, float* s, const void* vx, const void* vy, size_t by) {
  const block_iq1_m* x = (const block_iq1_m*)vx;
  __m256 acc1[NR], acc2[NR];
  for (int r = 0; r < NR; r++) { acc1[r] = _mm256_setzero_ps(); acc2[r] = _mm256_setzero_ps(); }
  const __m256i one = _mm256_set1_epi8(1);
  for (int i = 0; i < n / QK_K; i++) {
    __m256i g[8], ag[8], dl[8], sc[8];
    for (int c = 0; c < 8; c++) {
      const uint8_t* q = x[i].qs + 4 * c;
      const uint8_t* h = x[i].qh + 2 * c;
      g[c] = _mm256_set_epi64x(iq1s_grid[q[3] | (((uint16_t)h[1] << 4) & 0x700)], iq1s_grid[q[2] | (((uint16_t)h[1] << 8) & 0x700)],
                               iq1s_grid[q[1] | (((uint16_t)h[0] << 4) & 0x700)], iq1s_grid[q[0] | (((uint16_t)h[0] << 8) & 0x700)]);
      ag[c] = _mm256_sign_epi8(g[c], g[c]);
      const long long m = -1LL, p = 0x0101010101010101LL;
      dl[c] = _mm256_set_epi64x(h[1] & 0x80 ? m : p, h[1] & 0x08 ? m : p, h[0] & 0x80 ? m : p, h[0] & 0x08 ? m : p);
      sc[c] = sc16(2 * iq1m_scale(x[i], 2 * c) + 1, 2 * iq1m_scale(x[i], 2 * c + 1) + 1);
    }
    const float dx = h2f(iq1m_d(x[i]));
    for (int r = 0; r < NR; r++) {
      const block_q8_K* y = (const block_q8_K*)row(vy, by, r) + i;
      __m256i s1 = _mm256_setzero_si256(), s2 = _mm256_setzero_si256();
      for (int c = 0; c < 8; c++) {
        const __m256i yq = _mm256_loadu_si256((const __m256i*)(y->qs + 32 * c));
        s1 = _mm256_add_epi32(s1, dot_sc(ag[c], _mm256_sign_epi8(yq, g[c]), sc[c]));
        s2 = _mm256_add_epi32(s2, dot_sc(one, _mm256_sign_epi8(yq, dl[c]), sc[c]));
      }
      const __m256 d = _mm256_set1_ps(y->d * dx);
      acc1[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s1), acc1[r]);
      acc2[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s2), acc2[r]);
    }
  }
  for (int r = 0; r < NR; r++) s[r] = hsum8(acc1[r]) + IQ1M_DELTA * hsum8(acc2[r]);
}

// ---------------------------------------------------------------- Q2_K / Q3_K . Q8_K
// Element e: chunk c = e/32 = 4h + g takes bits 2g of qs[32h + l]; scale index e/16.

static inline void q2_decode(const uint8_t* qs, __m256i* q) {
  const __m256i m3 = _mm256_set1_epi8(3);
  for (int h = 0; h < 2; h++) {
    const __m256i b = _mm256_loadu_si256((const __m256i*)(qs + 32 * h));
    for (int g = 0; g < 4; g++) q[4 * h + g] = _mm256_and_si256(_mm256_srli_epi16(b, 2 * g), m3);
  }
}

// Q2_K, ggml_vec_dot_q2_K_q8_K: acc = fma(-y.d*dmin, madd(mins, bsums), acc), then fma(y.d*d, lanes, acc).
template <int NR>
static void dot_q2_K(int n, float* s, const void* vx, const void* vy, size_t by) {
  const block_q2_K* x = (const block_q2_K*)vx;
  __m256 acc[NR];
  for (int r = 0; r < NR; r++) acc[r] = _mm256_setzero_ps();
  for (int i = 0; i < n / QK_K; i++) {
    __m256i q[8], sc[8];
    q2_decode(x[i].qs, q);
    for (int c = 0; c < 8; c++) sc[c] = sc16(x[i].scales[2 * c] & 0xF, x[i].scales[2 * c + 1] & 0xF);
    const __m128i ms = _mm_loadu_si128((const __m128i*)x[i].scales);
    const __m256i mins = _mm256_cvtepi8_epi16(_mm_and_si128(_mm_srli_epi16(ms, 4), _mm_set1_epi8(0xF)));
    const float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
    for (int r = 0; r < NR; r++) {
      const block_q8_K* y = (const block_q8_K*)row(vy, by, r) + i;
      const __m256i prod = _mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i*)y->bsums));
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(-y->d * dmin), _mm256_cvtepi32_ps(prod), acc[r]);
      __m256i isum = _mm256_setzero_si256();
      for (int c = 0; c < 8; c++)
        isum = _mm256_add_epi32(isum, dot_sc(q[c], _mm256_loadu_si256((const __m256i*)(y->qs + 32 * c)), sc[c]));
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(y->d * d), _mm256_cvtepi32_ps(isum), acc[r]);
    }
  }
  for (int r = 0; r < NR; r++) s[r] = hsum8(acc[r]);
}

// Q2_K as llama.cpp's AVX-512 builds compute it for repacked weights (block_q2_Kx8,
// ggml_gemv_q2_K_8x8_q8_K; default for matrices with a multiple of 8 rows): per super-block one
// int32 for the scaled sum and one for the mins, acc = fma(isum, d*y.d, acc) and
// accm = fma(imin, dmin*y.d, accm), result acc - accm. (Its gemm, used for prompt rows in complete
// groups of 4, rounds differently; like dot_q4_K_rp we keep the gemv order for every row.)
template <int NR>
static void dot_q2_K_rp(int n, float* s, const void* vx, const void* vy, size_t by) {
  const block_q2_K* x = (const block_q2_K*)vx;
  float acc[NR], accm[NR];
  for (int r = 0; r < NR; r++) { acc[r] = 0.f; accm[r] = 0.f; }
  for (int i = 0; i < n / QK_K; i++) {
    __m256i q[8], sc[8];
    q2_decode(x[i].qs, q);
    for (int c = 0; c < 8; c++) sc[c] = sc16(x[i].scales[2 * c] & 0xF, x[i].scales[2 * c + 1] & 0xF);
    const __m128i ms = _mm_loadu_si128((const __m128i*)x[i].scales);
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(ms, 4), _mm_set1_epi8(0xF)));
    const float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
    for (int r = 0; r < NR; r++) {
      const block_q8_K* y = (const block_q8_K*)row(vy, by, r) + i;
      const int imin = hsum8i(_mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i*)y->bsums)));
      __m256i isum = _mm256_setzero_si256();
      for (int c = 0; c < 8; c++)
        isum = _mm256_add_epi32(isum, dot_sc(q[c], _mm256_loadu_si256((const __m256i*)(y->qs + 32 * c)), sc[c]));
      const int is = hsum8i(isum);
      acc[r] = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss((float)is), _mm_set_ss(d * y->d), _mm_set_ss(acc[r])));
      accm[r] = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss((float)imin), _mm_set_ss(dmin * y->d), _mm_set_ss(accm[r])));
    }
  }
  for (int r = 0; r < NR; r++) s[r] = acc[r] - accm[r];
}

// Q3_K, ggml_vec_dot_q3_K_q8_K: q = low2 - 4*(high bit clear), signed 6-bit scales; fma(y.d*d, lanes, acc).
template <int NR>
static void dot_q3_K(int n, float* s, const void* vx, const void* vy, size_t by) {
  const block_q3_K* x = (const block_q3_K*)vx;
  __m256 acc[NR];
  for (int r = 0; r < NR; r++) acc[r] = _mm256_setzero_ps();
  for (int i = 0; i < n / QK_K; i++) {
    __m256i q[8], aq[8], sc[8];
    q2_decode(x[i].qs, q);
    const __m256i hm = _mm256_loadu_si256((const __m256i*)x[i].hmask);
    for (int c = 0; c < 8; c++) {
      const __m256i bit = _mm256_set1_epi8((char)(1 << c));
      const __m256i clear = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), _mm256_setzero_si256());
      q[c] = _mm256_sub_epi8(q[c], _mm256_and_si256(clear, _mm256_set1_epi8(4)));  // -4..3
      aq[c] = _mm256_sign_epi8(q[c], q[c]);
      sc[c] = sc16(q3k_scale(x[i].scales, 2 * c) - 32, q3k_scale(x[i].scales, 2 * c + 1) - 32);
    }
    const float d = h2f(x[i].d);
    for (int r = 0; r < NR; r++) {
      const block_q8_K* y = (const block_q8_K*)row(vy, by, r) + i;
      __m256i isum = _mm256_setzero_si256();
      for (int c = 0; c < 8; c++) {
        const __m256i yq = _mm256_loadu_si256((const __m256i*)(y->qs + 32 * c));
        isum = _mm256_add_epi32(isum, dot_sc(aq[c], _mm256_sign_epi8(yq, q[c]), sc[c]));
      }
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(y->d * d), _mm256_cvtepi32_ps(isum), acc[r]);
    }
  }
  for (int r = 0; r < NR; r++) s[r] = hsum8(acc[r]);
}

// ---------------------------------------------------------------- MXFP4 . Q8_0

static inline __m256i mxfp4_load(const block_mxfp4& b) {
  const __m256i tbl = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i*)kvalues_mxfp4));
  return _mm256_shuffle_epi8(tbl, unpack_nibbles16(b.qs));
}

// ggml_vec_dot_mxfp4_q8_0: even blocks into acc1, odd into acc2 (fma(y.d*e, lanes, .)), hsum of
// their sum, then an odd last block as a scalar fma of its integer sum.
template <int NR>
static void dot_mxfp4(int n, float* s, const void* vx, const void* vy, size_t by) {
  const block_mxfp4* x = (const block_mxfp4*)vx;
  const int nb = n / QK_MXFP4;
  __m256 acc[2][NR];
  for (int r = 0; r < NR; r++) { acc[0][r] = _mm256_setzero_ps(); acc[1][r] = _mm256_setzero_ps(); }
  int ib = 0;
  for (; ib + 1 < nb; ib += 2)
    for (int k = 0; k < 2; k++) {
      const __m256i q = mxfp4_load(x[ib + k]);
      const __m256i aq = _mm256_sign_epi8(q, q);
      const float e = e8m0_to_fp32_half(x[ib + k].e);
      for (int r = 0; r < NR; r++) {
        const block_q8_0* y = (const block_q8_0*)row(vy, by, r) + ib + k;
        const __m256i p = dot_sc(aq, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i*)y->qs), q), _mm256_set1_epi16(1));
        acc[k][r] = _mm256_fmadd_ps(_mm256_set1_ps(h2f(y->d) * e), _mm256_cvtepi32_ps(p), acc[k][r]);
      }
    }
  for (int r = 0; r < NR; r++) {
    float sumf = hsum8(_mm256_add_ps(acc[0][r], acc[1][r]));
    if (ib < nb) {
      const block_q8_0* y = (const block_q8_0*)row(vy, by, r) + ib;
      int sumi = 0;
      for (int j = 0; j < 16; j++)
        sumi += y->qs[j] * kvalues_mxfp4[x[ib].qs[j] & 0xF] + y->qs[j + 16] * kvalues_mxfp4[x[ib].qs[j] >> 4];
      const float d = h2f(y->d) * e8m0_to_fp32_half(x[ib].e);
      sumf = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(d), _mm_set_ss((float)sumi), _mm_set_ss(sumf)));
    }
    s[r] = sumf;
  }
}

// MXFP4 as llama.cpp's x86 builds compute it (they repack it from AVX2 on: block_mxfp4x8,
// gemv_q4_b32_8x8_q8_0_lut_avx): per block one integer, acc = fma(isum, dx * y.d, acc), no vector
// reduction. W::load gives the signed weight bytes, W::scale dx. (llama.cpp repacks IQ4_NL the same way;
// we keep vec_dot's arithmetic for it: without an interleaved weight layout this form's horizontal sum
// per block and row cut the decode rows kernel from 27 to 8-10 GMAC/s in cache, measured.)
struct W_mxfp4 {
  typedef block_mxfp4 B;
  static inline __m256i load(const B& b) { return mxfp4_load(b); }
  static inline float scale(const B& b) { return e8m0_to_fp32_half(b.e); }
};
template <class W, int NR>
static void dot_b32_rp(int n, float* s, const void* vx, const void* vy, size_t by) {
  const typename W::B* x = (const typename W::B*)vx;
  float acc[NR];
  for (int r = 0; r < NR; r++) acc[r] = 0.f;
  for (int ib = 0; ib < n / 32; ib++) {
    const __m256i q = W::load(x[ib]);
    const __m256i aq = _mm256_sign_epi8(q, q);
    const float e = W::scale(x[ib]);
    for (int r = 0; r < NR; r++) {
      const block_q8_0* y = (const block_q8_0*)row(vy, by, r) + ib;
      const int is = hsum8i(dot_sc(aq, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i*)y->qs), q), _mm256_set1_epi16(1)));
      acc[r] = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss((float)is), _mm_set_ss(e * h2f(y->d)), _mm_set_ss(acc[r])));
    }
  }
  for (int r = 0; r < NR; r++) s[r] = acc[r];
}

// ---------------------------------------------------------------- install

// Kernel families (quants_simd.inc.h): vd1 = vec_dot (NR = 1), vdk = vec_dot_k (switch over NR = 1..8).
template <class L> PYLLM_KERNEL_FAMILY(K_lattice, (dot_lattice<L, NR>(n, s, x, y, by)));
PYLLM_KERNEL_FAMILY(K_iq1_s, (dot_iq1_s<NR>(n, s, x, y, by)));
PYLLM_KERNEL_FAMILY(K_iq1_m, (dot_iq1_m<NR>(n, s, x, y, by)));
PYLLM_KERNEL_FAMILY(K_q2_K, (dot_q2_K<NR>(n, s, x, y, by)));
PYLLM_KERNEL_FAMILY(K_q2_K_rp, (dot_q2_K_rp<NR>(n, s, x, y, by)));
PYLLM_KERNEL_FAMILY(K_q3_K, (dot_q3_K<NR>(n, s, x, y, by)));
PYLLM_KERNEL_FAMILY(K_mxfp4, (dot_mxfp4<NR>(n, s, x, y, by)));
template <class W> PYLLM_KERNEL_FAMILY(K_b32_rp, (dot_b32_rp<W, NR>(n, s, x, y, by)));

// `q2k_repack`: Q2_K in the order of llama.cpp's repacked kernels (its AVX-512 builds repack Q2_K, MXFP4 from AVX2 on).
static void install_lowbit_kernels(type_traits* t, bool q2k_repack) {
  auto put = [&](ggml_type id, vec_dot_fn f, vec_dot_k_fn fk) { t[id].vec_dot = f; t[id].vec_dot_k = fk; };
#define PYLLM_PUT(ID, ...) put(ID, vd1<__VA_ARGS__>, vdk<__VA_ARGS__>)
  PYLLM_PUT(GGML_TYPE_IQ2_XXS, K_lattice<L_iq2_xxs>);
  PYLLM_PUT(GGML_TYPE_IQ2_XS, K_lattice<L_iq2_xs>);
  PYLLM_PUT(GGML_TYPE_IQ2_S, K_lattice<L_iq2_s>);
  PYLLM_PUT(GGML_TYPE_IQ3_XXS, K_lattice<L_iq3_xxs>);
  PYLLM_PUT(GGML_TYPE_IQ3_S, K_lattice<L_iq3_s>);
  PYLLM_PUT(GGML_TYPE_IQ1_S, K_iq1_s);
  PYLLM_PUT(GGML_TYPE_IQ1_M, K_iq1_m);
  PYLLM_PUT(GGML_TYPE_Q2_K, K_q2_K);
  PYLLM_PUT(GGML_TYPE_Q3_K, K_q3_K);
  PYLLM_PUT(GGML_TYPE_MXFP4, K_mxfp4);
#undef PYLLM_PUT
  t[GGML_TYPE_MXFP4].vec_dot_rp = vd1<K_b32_rp<W_mxfp4>>;
  t[GGML_TYPE_MXFP4].vec_dot_rp_k = vdk<K_b32_rp<W_mxfp4>>;
  t[GGML_TYPE_Q2_K].vec_dot_rp = q2k_repack ? vd1<K_q2_K_rp> : nullptr;
  t[GGML_TYPE_Q2_K].vec_dot_rp_k = q2k_repack ? vdk<K_q2_K_rp> : nullptr;
}

}  // namespace SIMD_NS
}  // namespace pyllm
