// Shared x86 kernel bodies, included by quants_avx2.cpp and quants_avx512.cpp. The including file
// defines `dot_u8s8(u, s)`: 8 int32 lanes, lane k = sum of the 4 products u[4k..4k+3] * s[4k..4k+3]
// (u unsigned bytes, s signed bytes; no saturation for our ranges), and `madd16_acc(acc, a, b)`:
// acc + madd_epi16(a, b). VNNI does them in one dpbusd / dpwssd, AVX2 with maddubs + madd; both give
// the same integers, so the two levels agree bit for bit on the quantized kernels. Per-sub-block
// scales are applied as int16 words through madd16_acc on maddubs pairs: lane k still holds the
// bytes 4k..4k+3 of its sub-block, so the integer lanes equal dot-then-multiply exactly.
//
// Batch invariance: every kernel is a template over NR (rows of activations sharing one weight row).
// Per row, the operations and their order do not depend on NR, so vec_dot (NR = 1) and vec_dot_k
// (NR = k <= 8) give identical bits. No branch depends on the data.
#pragma once
#include <immintrin.h>

#include <cstring>

#include "ggml/quants.h"

namespace pyllm {
namespace SIMD_NS {

static inline float h2f(half h) { return _cvtsh_ss(h); }
// h in all 8 lanes (exact): a broadcast and one conversion where set1(h2f(h)) takes an insert, a scalar
// conversion and a broadcast (a fifth of the Q5_0 batch kernel's samples on a Zen 2)
static inline __m256 h2f8(half h) { return _mm256_cvtph_ps(_mm_set1_epi16((short)h)); }

__attribute__((always_inline)) static inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

__attribute__((always_inline)) static inline int hsum8i(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// 16 packed nibbles -> 32 bytes: low nibbles (elements 0..15) then high nibbles (16..31).
// (a broadcast load, one variable shift of the upper half, one and: no lane-crossing insert)
static inline __m256i unpack_nibbles16(const uint8_t* p) {
  const __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)p));
  return _mm256_and_si256(_mm256_srlv_epi64(q, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0F));
}

// 32 bits -> 32 bytes, byte j = 0x10 when bit j is set.
static inline __m256i bits_to_0x10(uint32_t bits) {
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0);
  __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
  const __m256i bitm = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
  v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bitm), bitm);
  return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

// Q4_K/Q5_K packed scales -> bytes 0..7 = the 8 six-bit scales, bytes 8..15 = the 8 mins
// (get_scale_min_k4 for all j at once, on three 32-bit words).
static inline __m128i q4k_scales_mins(const uint8_t* q) {
  uint32_t u[3]; std::memcpy(u, q, 12);
  const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
  const uint32_t sc_lo = u[0] & k1, mn_lo = u[1] & k1;
  const uint32_t sc_hi = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);
  const uint32_t mn_hi = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);
  return _mm_set_epi32((int)mn_hi, (int)mn_lo, (int)sc_hi, (int)sc_lo);
}
// int16 lane pattern selecting word j of a 128-bit lane (for _mm256_shuffle_epi8 broadcasts)
static inline __m256i word_bcast_ctl(int j) { return _mm256_set1_epi16((short)(((2 * j + 1) << 8) | (2 * j))); }

static inline const uint8_t* row(const void* y, size_t by, int r) { return (const uint8_t*)y + r * by; }

// An integer running sum stays one chain in one register: GCC reassociates such sums into trees and, with
// the kernels' 16 decoded vectors live, spilled every product to the stack (Zen 2: a tenth of the K-quant
// batch kernels' time). Integer adds are exact, so this changes no result.
__attribute__((always_inline)) static inline void keep_chain(__m256i& v) { __asm__("" : "+x"(v)); }

// Software prefetch of the weights, as the AVX-512 kernels do (quants_avx512.cpp's note): a row kernel
// brings block i of the next weight row (rows of a matrix are contiguous: nb blocks on) while it works on
// block i of its own; without it the loads and the arithmetic hardly overlap. These AVX2 row kernels
// serve the AVX-512 level only for IQ4_XS, which keeps no prefetch here.
// the lines of [a, a + bytes) into L1 (prefetches never fault: a may point past the matrix)
static inline void prefetch_lines(const char* a, size_t bytes) {
  for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(a + o, _MM_HINT_T0);
  _mm_prefetch(a + bytes - 1, _MM_HINT_T0);
}

// ---------------------------------------------------------------- 32-blocks with signed weights . Q8_0

struct W_q8_0 {
  typedef block_q8_0 B;
  static inline __m256i load(const B& b) { return _mm256_loadu_si256((const __m256i*)b.qs); }
};
struct W_q4_0 {
  typedef block_q4_0 B;
  static inline __m256i load(const B& b) { return _mm256_sub_epi8(unpack_nibbles16(b.qs), _mm256_set1_epi8(8)); }
};
struct W_q5_0 {
  typedef block_q5_0 B;
  static inline __m256i load(const B& b) {
    uint32_t qh; std::memcpy(&qh, b.qh, 4);
    return _mm256_sub_epi8(_mm256_or_si256(unpack_nibbles16(b.qs), bits_to_0x10(qh)), _mm256_set1_epi8(16));
  }
};
struct W_iq4_nl {
  typedef block_iq4_nl B;
  static inline __m256i load(const B& b) {
    const __m256i tbl = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i*)kvalues_iq4nl));
    return _mm256_shuffle_epi8(tbl, unpack_nibbles16(b.qs));
  }
};

template <class W, int NR>
static void dot_signed_q8_0(int n, float* s, const void* vx, const void* vy, size_t by) {
  const typename W::B* x = (const typename W::B*)vx;
  __m256 acc[NR];
  for (int r = 0; r < NR; r++) acc[r] = _mm256_setzero_ps();
  const int nb = n / 32;
  for (int i = 0; i < nb; i++) {
    _mm_prefetch((const char*)(x + nb + i), _MM_HINT_T0);
    const __m256i q = W::load(x[i]);
    const __m256i aq = _mm256_sign_epi8(q, q);
    const __m256 dx = _mm256_set1_ps(h2f(x[i].d));
    for (int r = 0; r < NR; r++) {
      const block_q8_0* y = (const block_q8_0*)row(vy, by, r) + i;
      const __m256i yq = _mm256_loadu_si256((const __m256i*)y->qs);
      const __m256i p = dot_u8s8(aq, _mm256_sign_epi8(yq, q));
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(dx, h2f8(y->d)), acc[r]);
    }
  }
  for (int r = 0; r < NR; r++) s[r] = hsum8(acc[r]);
}

// ---------------------------------------------------------------- 32-blocks with unsigned weights + min . Q8_1

struct W_q4_1 {
  typedef block_q4_1 B;
  static inline __m256i load(const B& b) { return unpack_nibbles16(b.qs); }
};
struct W_q5_1 {
  typedef block_q5_1 B;
  static inline __m256i load(const B& b) {
    uint32_t qh; std::memcpy(&qh, b.qh, 4);
    return _mm256_or_si256(unpack_nibbles16(b.qs), bits_to_0x10(qh));
  }
};

template <class W, int NR>
static void dot_unsigned_q8_1(int n, float* s, const void* vx, const void* vy, size_t by) {
  const typename W::B* x = (const typename W::B*)vx;
  __m256 acc[NR], accm[NR];
  for (int r = 0; r < NR; r++) { acc[r] = _mm256_setzero_ps(); accm[r] = _mm256_setzero_ps(); }
  const int nb = n / 32;
  for (int i = 0; i < nb; i++) {
    _mm_prefetch((const char*)(x + nb + i), _MM_HINT_T0);
    const __m256i q = W::load(x[i]);
    const __m256 dx = _mm256_set1_ps(h2f(x[i].d));
    const __m256 mx = _mm256_set1_ps(h2f(x[i].m));
    for (int r = 0; r < NR; r++) {
      const block_q8_1* y = (const block_q8_1*)row(vy, by, r) + i;
      const __m256i p = dot_u8s8(q, _mm256_loadu_si256((const __m256i*)y->qs));
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(dx, h2f8(y->d)), acc[r]);
      // min term on lane 0 only: keeps it a vector op (no scalar contraction differences)
      accm[r] = _mm256_fmadd_ps(mx, _mm256_castps128_ps256(_mm_set_ss(h2f(y->s))), accm[r]);
    }
  }
  for (int r = 0; r < NR; r++) s[r] = hsum8(acc[r]) + _mm256_cvtss_f32(accm[r]);
}

// ---------------------------------------------------------------- K-quants . Q8_K

// Q4_K / Q5_K: per super-block, 4 chunks of 64 (two 32-sub-blocks: low and high nibbles).
// The float side follows ggml's x86 kernels exactly (ggml_vec_dot_q4_K_q8_K / q5_K_q8_K, AVX2):
// scales: 8 int32 lanes, acc = fma(y.d*d, sumi, acc); mins: 4 int32 lanes
// (mn[2k]*(bs[4k]+bs[4k+1]) + mn[2k+1]*(bs[4k+2]+bs[4k+3])) with dmin' = -y.d*dmin, accumulated
// as a 4-lane vector for Q4_K and as a scalar fma of their integer sum for Q5_K.
static inline int hsum4i(__m128i v) {
  v = _mm_add_epi32(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm_add_epi32(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(v);
}
// One row's float side (also the AVX-512 kernels', whose integers equal these): add() per super-block
// with its 8 scale lanes and 4 min lanes, total() at the end.
template <bool Q5>
struct Q45Acc {
  __m256 acc = _mm256_setzero_ps();
  __m128 accm = _mm_setzero_ps();
  float summs = 0.f;
  inline void add(__m256i isum, __m128i prod, float yd, float d, float dmin) {
    const float dm = -yd * dmin;
    if (Q5) summs = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(dm), _mm_cvtsi32_ss(_mm_setzero_ps(), hsum4i(prod)), _mm_set_ss(summs)));
    else accm = _mm_fmadd_ps(_mm_set1_ps(dm), _mm_cvtepi32_ps(prod), accm);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(yd * d), _mm256_cvtepi32_ps(isum), acc);
  }
  inline float total() const {
    if (Q5) return hsum8(acc) + summs;
    __m128 m = _mm_add_ps(accm, _mm_movehl_ps(accm, accm));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    return hsum8(acc) + _mm_cvtss_f32(m);
  }
};

template <bool Q5, int NR>
static void dot_q45_K(int n, float* s, const void* vx, const void* vy, size_t by) {
  Q45Acc<Q5> a[NR];
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int i = 0; i < n / QK_K; i++) {
    const uint8_t* scales; const uint8_t* qs; const uint8_t* qhp = nullptr; half hd, hdmin;
    if (Q5) {
      const block_q5_K& b = ((const block_q5_K*)vx)[i];
      prefetch_lines((const char*)(&b + n / QK_K), sizeof(b));
      scales = b.scales; qs = b.qs; qhp = b.qh; hd = b.d; hdmin = b.dmin;
    } else {
      const block_q4_K& b = ((const block_q4_K*)vx)[i];
      prefetch_lines((const char*)(&b + n / QK_K), sizeof(b));
      scales = b.scales; qs = b.qs; hd = b.d; hdmin = b.dmin;
    }
    // scales as int16 words broadcast per sub-block: madd applies them exactly (the integer lanes are
    // the same as dot-then-multiply, so the float side is unchanged)
    const __m128i sm = q4k_scales_mins(scales);
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
    __m256i scv[8];
    for (int j = 0; j < 8; j++) scv[j] = _mm256_shuffle_epi8(sc16, word_bcast_ctl(j));
    __m256i wq[8];
    __m256i qh = Q5 ? _mm256_loadu_si256((const __m256i*)qhp) : _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
      const __m256i q = _mm256_loadu_si256((const __m256i*)(qs + 32 * c));
      wq[2 * c] = _mm256_and_si256(q, m4);
      wq[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      if (Q5) {
        for (int k = 0; k < 2; k++) {
          const __m256i bit = _mm256_set1_epi8((char)(1 << (2 * c + k)));
          const __m256i h = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit), _mm256_set1_epi8(0x10));
          wq[2 * c + k] = _mm256_or_si256(wq[2 * c + k], h);
        }
      }
    }
    const __m128i mins16 = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
    const float d = h2f(hd), dmin = h2f(hdmin);
    for (int r = 0; r < NR; r++) {
      const block_q8_K* y = (const block_q8_K*)row(vy, by, r) + i;
      __m256i isum = _mm256_setzero_si256();
      for (int j = 0; j < 8; j++) {
        isum = madd16_acc(isum, _mm256_maddubs_epi16(wq[j], _mm256_loadu_si256((const __m256i*)(y->qs + 32 * j))), scv[j]);
        keep_chain(isum);
      }
      const __m256i bs = _mm256_loadu_si256((const __m256i*)y->bsums);
      const __m128i q8s = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
      a[r].add(isum, _mm_madd_epi16(mins16, q8s), y->d, d, dmin);
    }
  }
  for (int r = 0; r < NR; r++) s[r] = a[r].total();
}

// Q4_K as llama.cpp computes it when the weight is repacked (CPU_REPACK, block_q4_Kx8 with
// ggml_gemv/gemm_q4_K_8x8_q8_K; the default for MUL_MAT weights with a multiple of 8 rows on
// AVX2 machines): per super-block the integer sums are reduced to one int32 each, then
// acc = fma(isum, d*y.d, acc), accm = fma(imin, dmin*y.d, accm), result acc - accm. This is
// ggml's gemv (rows that are not in a complete group of 4 of the batch, i.e. every decode step);
// its gemm (groups of 4 prompt rows) does one fma per 64 elements instead, so upstream itself is
// not batch invariant here. We keep the gemv order for every row.
// One activation row's integers for a decoded super-block: isum's 8 lanes (sum over j of scale_j * (w_j . y_j))
// and the 4 lanes of mins . bsums; exact, so any later order of adding them gives the same totals.
static inline void q4k_rp_ints(const __m256i* wq, const __m256i* scv, __m128i mins16, const block_q8_K* y, __m256i& isum,
                               __m128i& imins) {
  isum = _mm256_setzero_si256();
  for (int j = 0; j < 8; j++)
    isum = madd16_acc(isum, _mm256_maddubs_epi16(wq[j], _mm256_loadu_si256((const __m256i*)(y->qs + 32 * j))), scv[j]);
  const __m256i bs = _mm256_loadu_si256((const __m256i*)y->bsums);
  imins = _mm_madd_epi16(mins16, _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1)));
}
static inline __m128i rowsum4_i32x8(const __m256i* z) {  // lane r = the sum of z[r]'s 8 lanes
  const __m256i c = _mm256_hadd_epi32(_mm256_hadd_epi32(z[0], z[1]), _mm256_hadd_epi32(z[2], z[3]));
  return _mm_add_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
}
static inline __m128i rowsum4_i32x4(const __m128i* g) {  // lane r = the sum of g[r]'s 4 lanes
  return _mm_hadd_epi32(_mm_hadd_epi32(g[0], g[1]), _mm_hadd_epi32(g[2], g[3]));
}
// Activation rows in groups of 4 share one reduction tree and do their fmas as the 4 lanes of one vector
// (lane q: row q's scalar fma, the same bits); the rows after the last group go one by one.
template <int NR>
static void dot_q4_K_rp(int n, float* s, const void* vx, const void* vy, size_t by) {
  constexpr int NG = NR / 4, N1 = NR - 4 * NG;
  __m128 acc4[NG + 1], accm4[NG + 1];
  float acc[N1 + 1], accm[N1 + 1];
  for (int g = 0; g <= NG; g++) { acc4[g] = _mm_setzero_ps(); accm4[g] = _mm_setzero_ps(); }
  for (int r = 0; r <= N1; r++) { acc[r] = 0.f; accm[r] = 0.f; }
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int i = 0; i < n / QK_K; i++) {
    const block_q4_K& b = ((const block_q4_K*)vx)[i];
    prefetch_lines((const char*)(&b + n / QK_K), sizeof(b));
    const __m128i sm = q4k_scales_mins(b.scales);
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
    __m256i scv[8];
    for (int j = 0; j < 8; j++) scv[j] = _mm256_shuffle_epi8(sc16, word_bcast_ctl(j));
    __m256i wq[8];
    for (int c = 0; c < 4; c++) {
      const __m256i q = _mm256_loadu_si256((const __m256i*)(b.qs + 32 * c));
      wq[2 * c] = _mm256_and_si256(q, m4);
      wq[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    }
    const __m128i mins16 = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
    const float d = h2f(b.d), dmin = h2f(b.dmin);
    for (int g = 0; g < NG; g++) {
      // sub-block outer, the 4 rows inner: one weight vector meets 4 rows while it is in a register (rows
      // inner, q4k_rp_ints per row, held 16 decoded vectors and spilled every product); integer sums: exact
      const block_q8_K* y[4];
      __m256i z[4];
      __m128i mn[4];
      alignas(16) float yd[4];
      for (int q = 0; q < 4; q++) {
        y[q] = (const block_q8_K*)row(vy, by, 4 * g + q) + i;
        z[q] = _mm256_setzero_si256();
        const __m256i bs = _mm256_loadu_si256((const __m256i*)y[q]->bsums);
        mn[q] = _mm_madd_epi16(mins16, _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1)));
        yd[q] = y[q]->d;
      }
#pragma GCC unroll 8
      for (int j = 0; j < 8; j++)
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
          z[q] = madd16_acc(z[q], _mm256_maddubs_epi16(wq[j], _mm256_loadu_si256((const __m256i*)(y[q]->qs + 32 * j))), scv[j]);
          keep_chain(z[q]);
        }
      const __m128 ydv = _mm_load_ps(yd);
      acc4[g] = _mm_fmadd_ps(_mm_cvtepi32_ps(rowsum4_i32x8(z)), _mm_mul_ps(_mm_set1_ps(d), ydv), acc4[g]);
      accm4[g] = _mm_fmadd_ps(_mm_cvtepi32_ps(rowsum4_i32x4(mn)), _mm_mul_ps(_mm_set1_ps(dmin), ydv), accm4[g]);
    }
    for (int r = 0; r < N1; r++) {
      const block_q8_K* y = (const block_q8_K*)row(vy, by, 4 * NG + r) + i;
      __m256i isum;
      __m128i pr;
      q4k_rp_ints(wq, scv, mins16, y, isum, pr);
      const int imin = hsum4i(pr);
      const int is = hsum8i(isum);
      acc[r] = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss((float)is), _mm_set_ss(d * y->d), _mm_set_ss(acc[r])));
      accm[r] = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss((float)imin), _mm_set_ss(dmin * y->d), _mm_set_ss(accm[r])));
    }
  }
  for (int g = 0; g < NG; g++) _mm_storeu_ps(s + 4 * g, _mm_sub_ps(acc4[g], accm4[g]));
  for (int r = 0; r < N1; r++) s[4 * NG + r] = acc[r] - accm[r];
}

// Decode of repacked Q4_K, NR <= kMaxWeightRows weight rows against one activation row (vec_dot_rp_rows, the
// AVX-512 level overrides it): per row the super-block's integers are dot_q4_K_rp's (exact in any order), the 4
// rows' totals come out of one hadd tree, and float lane r does row r's fma(is, d * y.d, acc),
// fma(imin, dmin * y.d, accm), acc - accm, so each row's bits are vec_dot_rp's; y's loads and bsums are shared
// by the rows and 4 chains are in flight (one call per row spent a fifth of its time in reductions).
// Each row's block i prefetches block i of the row NR further on (the next call's): on a Zen 2 the weight
// loads were a quarter of the kernel's samples without it, and 27B-shaped Q4_K tg32 went 4.9 -> 6.9-7.4 t/s
// at -t 1 and 8.1-9.3 -> 10.6-11.5 at -t 2.
template <int NR>
static void gemv_q4_K_rp_256(int n, float* s, const void* vx, size_t bx, const void* vy) {
  const block_q8_K* y = (const block_q8_K*)vy;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m128 acc = _mm_setzero_ps(), accm = _mm_setzero_ps();
  for (int i = 0; i < n / QK_K; i++) {
    const __m256i bs = _mm256_loadu_si256((const __m256i*)y[i].bsums);
    const __m128i q8s = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    __m256i z[4];
    __m128i g[4];
    alignas(16) float d[4] = {0.f, 0.f, 0.f, 0.f}, dmin[4] = {0.f, 0.f, 0.f, 0.f};
    for (int r = 0; r < 4; r++) {
      if (r >= NR) { z[r] = _mm256_setzero_si256(); g[r] = _mm_setzero_si128(); continue; }
      const block_q4_K& b = ((const block_q4_K*)((const uint8_t*)vx + r * bx))[i];
      prefetch_lines((const char*)&b + NR * bx, sizeof(block_q4_K));
      const __m128i sm = q4k_scales_mins(b.scales);
      const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
      __m256i isum = _mm256_setzero_si256();
      for (int c = 0; c < 4; c++) {
        const __m256i q = _mm256_loadu_si256((const __m256i*)(b.qs + 32 * c));
        const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        isum = madd16_acc(isum, _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i*)(y[i].qs + 64 * c))),
                          _mm256_shuffle_epi8(sc16, word_bcast_ctl(2 * c)));
        isum = madd16_acc(isum, _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i*)(y[i].qs + 64 * c + 32))),
                          _mm256_shuffle_epi8(sc16, word_bcast_ctl(2 * c + 1)));
      }
      z[r] = isum;
      g[r] = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_srli_si128(sm, 8)), q8s);
      d[r] = h2f(b.d); dmin[r] = h2f(b.dmin);
    }
    const __m128 yd = _mm_set1_ps(y[i].d);
    acc = _mm_fmadd_ps(_mm_cvtepi32_ps(rowsum4_i32x8(z)), _mm_mul_ps(_mm_load_ps(d), yd), acc);
    accm = _mm_fmadd_ps(_mm_cvtepi32_ps(rowsum4_i32x4(g)), _mm_mul_ps(_mm_load_ps(dmin), yd), accm);
  }
  alignas(16) float o[4];
  _mm_store_ps(o, _mm_sub_ps(acc, accm));
  for (int r = 0; r < NR; r++) s[r] = o[r];
}
static void rows_q4_K_rp_256(int n, float* s, const void* vx, size_t bx, const void* vy, int nr) {
  switch (nr) {
    case 1: gemv_q4_K_rp_256<1>(n, s, vx, bx, vy); break;
    case 2: gemv_q4_K_rp_256<2>(n, s, vx, bx, vy); break;
    case 3: gemv_q4_K_rp_256<3>(n, s, vx, bx, vy); break;
    case 4: gemv_q4_K_rp_256<4>(n, s, vx, bx, vy); break;
    default: __builtin_trap();  // callers pass at most kMaxWeightRows
  }
}

// Q6_K: unsigned 6-bit q (0..63) . y, minus 32 * sum(y) through bsums.
template <int NR>
static void dot_q6_K(int n, float* s, const void* vx, const void* vy, size_t by) {
  const block_q6_K* x = (const block_q6_K*)vx;
  __m256 acc[NR];
  for (int r = 0; r < NR; r++) acc[r] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
  for (int i = 0; i < n / QK_K; i++) {
    prefetch_lines((const char*)(x + n / QK_K + i), sizeof(block_q6_K));
    __m256i wq[8], scv[8];
    for (int h = 0; h < 2; h++) {
      const __m256i l0 = _mm256_loadu_si256((const __m256i*)(x[i].ql + 64 * h));
      const __m256i l1 = _mm256_loadu_si256((const __m256i*)(x[i].ql + 64 * h + 32));
      const __m256i hb = _mm256_loadu_si256((const __m256i*)(x[i].qh + 32 * h));
      const __m256i lo[4] = {_mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
                             _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4)};
      for (int g = 0; g < 4; g++) {
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * g), m3);
        wq[4 * h + g] = _mm256_or_si256(lo[g], _mm256_slli_epi16(hi, 4));
        const int sb = 2 * (4 * h + g);  // two 16-scales per group of 32
        scv[4 * h + g] = _mm256_set_m128i(_mm_set1_epi16(x[i].scales[sb + 1]), _mm_set1_epi16(x[i].scales[sb]));
      }
    }
    // 32 * sum_j sc[j] * bsums[j] (weights stored +32)
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)x[i].scales));
    const float d = h2f(x[i].d);
    for (int r = 0; r < NR; r++) {
      const block_q8_K* y = (const block_q8_K*)row(vy, by, r) + i;
      __m256i isum = _mm256_setzero_si256();
      for (int k = 0; k < 8; k++) {
        isum = madd16_acc(isum, _mm256_maddubs_epi16(wq[k], _mm256_loadu_si256((const __m256i*)(y->qs + 32 * k))), scv[k]);
        keep_chain(isum);
      }
      const __m256i off = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i*)y->bsums));
      isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(off, 5));
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(y->d * d), acc[r]);
    }
  }
  for (int r = 0; r < NR; r++) s[r] = hsum8(acc[r]);
}

// IQ4_XS: grid lookup to signed bytes, 6-bit signed scale per 32.
template <int NR>
static void dot_iq4_xs(int n, float* s, const void* vx, const void* vy, size_t by) {
  const block_iq4_xs* x = (const block_iq4_xs*)vx;
  const __m256i tbl = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i*)kvalues_iq4nl));
  __m256 acc[NR];
  for (int r = 0; r < NR; r++) acc[r] = _mm256_setzero_ps();
  for (int i = 0; i < n / QK_K; i++) {
    __m256i wq[8], aq[8], scv[8];
    for (int ib = 0; ib < 8; ib++) {
      wq[ib] = _mm256_shuffle_epi8(tbl, unpack_nibbles16(x[i].qs + 16 * ib));
      aq[ib] = _mm256_sign_epi8(wq[ib], wq[ib]);
      scv[ib] = _mm256_set1_epi16((short)(iq4xs_scale(x[i], ib) - 32));
    }
    const float d = h2f(x[i].d);
    for (int r = 0; r < NR; r++) {
      const block_q8_K* y = (const block_q8_K*)row(vy, by, r) + i;
      __m256i isum = _mm256_setzero_si256();
      for (int ib = 0; ib < 8; ib++) {
        const __m256i yq = _mm256_loadu_si256((const __m256i*)(y->qs + 32 * ib));
        isum = madd16_acc(isum, _mm256_maddubs_epi16(aq[ib], _mm256_sign_epi8(yq, wq[ib])), scv[ib]);
        keep_chain(isum);
      }
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(y->d * d), acc[r]);
    }
  }
  for (int r = 0; r < NR; r++) s[r] = hsum8(acc[r]);
}

// ---------------------------------------------------------------- wrappers

// K is a kernel family: K::template run<NR>(n, s, x, y, by). vd1 is its vec_dot (NR = 1), vdk its
// vec_dot_k (k rows through the NR = k instance: one decode of the weight row, per-row order kept).
template <class K> static void vd1(int n, float* s, const void* x, const void* y) { K::template run<1>(n, s, x, y, 0); }
template <class K> static void vdk(int n, float* s, const void* x, const void* y, size_t by, int k) {
  switch (k) {
    case 1: K::template run<1>(n, s, x, y, by); break;
    case 2: K::template run<2>(n, s, x, y, by); break;
    case 3: K::template run<3>(n, s, x, y, by); break;
    case 4: K::template run<4>(n, s, x, y, by); break;
    case 5: K::template run<5>(n, s, x, y, by); break;
    case 6: K::template run<6>(n, s, x, y, by); break;
    case 7: K::template run<7>(n, s, x, y, by); break;
    case 8: K::template run<8>(n, s, x, y, by); break;
    default: __builtin_trap();  // callers split batches into groups of at most kMaxRowsK
  }
}
#define PYLLM_KERNEL_FAMILY(NAME, CALL) \
  struct NAME { template <int NR> static void run(int n, float* s, const void* x, const void* y, size_t by) { CALL; } }
template <class W> PYLLM_KERNEL_FAMILY(K_signed, (dot_signed_q8_0<W, NR>(n, s, x, y, by)));
template <class W> PYLLM_KERNEL_FAMILY(K_unsigned, (dot_unsigned_q8_1<W, NR>(n, s, x, y, by)));
template <bool Q5> PYLLM_KERNEL_FAMILY(K_q45_K, (dot_q45_K<Q5, NR>(n, s, x, y, by)));
PYLLM_KERNEL_FAMILY(K_q6_K, (dot_q6_K<NR>(n, s, x, y, by)));
PYLLM_KERNEL_FAMILY(K_q4_K_rp, (dot_q4_K_rp<NR>(n, s, x, y, by)));
PYLLM_KERNEL_FAMILY(K_iq4_xs, (dot_iq4_xs<NR>(n, s, x, y, by)));

// Installs the quantized kernels shared by both levels.
static void install_quant_kernels(type_traits* t) {
  auto put = [&](ggml_type id, vec_dot_fn f, vec_dot_k_fn fk) { t[id].vec_dot = f; t[id].vec_dot_k = fk; };
#define PYLLM_PUT(ID, ...) put(ID, vd1<__VA_ARGS__>, vdk<__VA_ARGS__>)
  PYLLM_PUT(GGML_TYPE_Q8_0, K_signed<W_q8_0>);
  PYLLM_PUT(GGML_TYPE_Q4_0, K_signed<W_q4_0>);
  PYLLM_PUT(GGML_TYPE_Q5_0, K_signed<W_q5_0>);
  PYLLM_PUT(GGML_TYPE_IQ4_NL, K_signed<W_iq4_nl>);
  PYLLM_PUT(GGML_TYPE_Q4_1, K_unsigned<W_q4_1>);
  PYLLM_PUT(GGML_TYPE_Q5_1, K_unsigned<W_q5_1>);
  PYLLM_PUT(GGML_TYPE_Q4_K, K_q45_K<false>);
  PYLLM_PUT(GGML_TYPE_Q5_K, K_q45_K<true>);
  PYLLM_PUT(GGML_TYPE_Q6_K, K_q6_K);
  PYLLM_PUT(GGML_TYPE_IQ4_XS, K_iq4_xs);
#undef PYLLM_PUT
  t[GGML_TYPE_Q4_K].vec_dot_rp = vd1<K_q4_K_rp>;
  t[GGML_TYPE_Q4_K].vec_dot_rp_k = vdk<K_q4_K_rp>;
  t[GGML_TYPE_Q4_K].vec_dot_rp_rows = rows_q4_K_rp_256;
}

}  // namespace SIMD_NS
}  // namespace pyllm
