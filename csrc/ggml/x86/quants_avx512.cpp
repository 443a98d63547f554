// AVX-512 (F/BW/VL/DQ + VNNI + BF16) kernels. Quantized dots use VNNI dpbusd on 256-bit vectors
// (one 32-byte block per op; same integers as the AVX2 path); float dots use 512-bit vectors.
// vec_dot_k (one weight row, k <= 8 activation rows) comes with every quantized kernel (both levels).
#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ggml/fp16.h"
#include "ggml/repack.h"
#include "ggml/x86/dec_layout.h"
#include "ggml/x86/x16_q4_K_scales.h"

// GCC 12's own avx512fintrin.h (_mm512_reduce_add_ps, masked cvtph) trips these on _mm*_undefined_*.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace pyllm {
namespace x86_avx512 {
static inline __m256i dot_u8s8(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
static inline __m256i madd16_acc(__m256i acc, __m256i a, __m256i b) { return _mm256_dpwssd_epi32(acc, a, b); }
}  // namespace x86_avx512
}  // namespace pyllm

#define SIMD_NS x86_avx512
#include "ggml/x86/quants_simd.inc.h"
#include "ggml/x86/quants_lowbit_simd.inc.h"

namespace pyllm {
namespace x86_avx512 {

static void vd_f32(int n, float* s, const void* vx, const void* vy) {
  const float* x = (const float*)vx; const float* y = (const float*)vy;
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), a1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
    a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i), a0);
  }
  *s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

static void vd_f16(int n, float* s, const void* vx, const void* vy) {
  const uint16_t* x = (const uint16_t*)vx; const uint16_t* y = (const uint16_t*)vy;
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(x + i))),
                         _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(y + i))), a0);
    a1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(x + i + 16))),
                         _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(y + i + 16))), a1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
    a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i)),
                         _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, y + i)), a0);
  }
  *s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

// dpbf16: pairs of bf16 products accumulated in fp32 (32 elements per instruction)
static void vd_bf16(int n, float* s, const void* vx, const void* vy) {
  const uint16_t* x = (const uint16_t*)vx; const uint16_t* y = (const uint16_t*)vy;
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_loadu_si512(x + i), (__m512bh)_mm512_loadu_si512(y + i));
    a1 = _mm512_dpbf16_ps(a1, (__m512bh)_mm512_loadu_si512(x + i + 32), (__m512bh)_mm512_loadu_si512(y + i + 32));
  }
  for (; i < n; i += 32) {
    const __mmask32 m = n - i >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << (n - i)) - 1);
    a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_maskz_loadu_epi16(m, x + i), (__m512bh)_mm512_maskz_loadu_epi16(m, y + i));
  }
  *s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

// ---- to_float (bit-exact with the scalar reference: plain mul, no FMA) ----
static void f16_to_float(const void* vx, float* y, int64_t n) {
  const uint16_t* x = (const uint16_t*)vx;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(x + i))));
  for (; i < n; i++) y[i] = fp16_to_fp32(x[i]);
}

static void q8_0_to_float(const void* vx, float* y, int64_t n) {
  const block_q8_0* x = (const block_q8_0*)vx;
  for (int64_t i = 0; i < n / 32; i++, y += 32) {
    const __m512 d = _mm512_set1_ps(h2f(x[i].d));
    const __m128i q0 = _mm_loadu_si128((const __m128i*)x[i].qs), q1 = _mm_loadu_si128((const __m128i*)(x[i].qs + 16));
    _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)), d));
    _mm512_storeu_ps(y + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)), d));
  }
}


// ---- Q4_K / Q5_K on 512-bit integer vectors ----
// Each zmm holds two consecutive 32-element sub-blocks (2c, 2c+1), which are 64 contiguous bytes of
// the Q8_K row, so a row costs 4 loads + 4 maddubs + 4 dpwssd per super-block instead of 8 + 8 + 8.
// The integer results equal the 256-bit kernels' exactly: the rp form reduces all lanes to one int32;
// the plain form folds the two halves (lane k + lane k+8 = the 256-bit lane k), so every float
// operation and its order are the ones in quants_simd.inc.h.
struct Q45Block {
  __m512i wq[4];   // sub-block pairs as unsigned bytes
  __m512i scv[4];  // int16 scale words: low half sc[2c], high half sc[2c+1]
  __m128i mins16;  // the 8 mins as int16
  __m256i mins16x2;  // each min twice (words 2j, 2j+1 = mn[j]): one madd with the 16 bsums gives the mins term
  float d, dmin;
};

template <bool Q5>
static inline void load_q45_block(const void* vx, int i, Q45Block& o) {
  const uint8_t* scales; const uint8_t* qs; const uint8_t* qhp = nullptr; half hd, hdmin;
  if (Q5) {
    const block_q5_K& b = ((const block_q5_K*)vx)[i];
    scales = b.scales; qs = b.qs; qhp = b.qh; hd = b.d; hdmin = b.dmin;
  } else {
    const block_q4_K& b = ((const block_q4_K*)vx)[i];
    scales = b.scales; qs = b.qs; hd = b.d; hdmin = b.dmin;
  }
  const __m128i sm = q4k_scales_mins(scales);
  const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(sm));  // words 0..7 = scales
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i shift = _mm512_set_epi64(0x0004000400040004LL, 0x0004000400040004LL, 0x0004000400040004LL, 0x0004000400040004LL, 0, 0, 0, 0);
  const __m512i qh = Q5 ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)qhp)) : _mm512_setzero_si512();
  for (int c = 0; c < 4; c++) {
    const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(qs + 32 * c)));
    o.wq[c] = _mm512_and_si512(_mm512_srlv_epi16(q, shift), m4);  // low nibbles | high nibbles
    if (Q5) {
      const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * c))), _mm256_set1_epi8((char)(1 << (2 * c + 1))), 1);
      o.wq[c] = _mm512_or_si512(o.wq[c], _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(qh, bit), _mm512_set1_epi8(0x10)));
    }
    const __m512i idx = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * c)), _mm256_set1_epi16((short)(2 * c + 1)), 1);
    o.scv[c] = _mm512_permutexvar_epi16(idx, sc16);
  }
  o.mins16 = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
  o.mins16x2 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, _mm_set_epi8(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8)));
  o.d = h2f(hd); o.dmin = h2f(hdmin);
}

// sum over the super-block of sc[j] * (q . y) as 16 int32 lanes
static inline __m512i q45_isum(const Q45Block& b, const block_q8_K* y) {
  __m512i isum = _mm512_setzero_si512();
  for (int c = 0; c < 4; c++)
    isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(b.wq[c], _mm512_loadu_si512((const void*)(y->qs + 64 * c))), b.scv[c]);
  return isum;
}
// mn[2k]*(bs[4k]+bs[4k+1]) + mn[2k+1]*(bs[4k+2]+bs[4k+3]) as 4 int32 lanes
static inline __m128i q45_mins(const Q45Block& b, const block_q8_K* y) {
  const __m256i bs = _mm256_loadu_si256((const __m256i*)y->bsums);
  return _mm_madd_epi16(b.mins16, _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1)));
}
static inline __m256i fold512(__m512i v) { return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)); }

// Software prefetch (these row kernels, the decode rows kernels of gemv_avx512.inc.h and the tiles of
// gemm_avx512.inc.h): weight rows stream from memory at decode and verification, and without it the
// loads and the arithmetic hardly overlap. A kernel over nr rows prefetches, for block j of each, block j
// of the row nr further on (the next call's) while that group is short enough for those lines to stay
// in L1, else the same row kPfBytes ahead; a kernel over one row prefetches block i of the next row.
// Measured: Q4_K gemv over 377 MB, 12 -> 17 GMAC/s at -t 1 and 20 -> 32 at -t 2 (a 512-byte in-row
// distance); next-call rows instead took the 35B-A3B-shaped decode (experts' rows are 288-1152 bytes,
// shorter than any in-row distance) from 15-17 to 22-23 t/s at -t 1. Prefetches never fault, so the last
// group's may point past the matrix.
constexpr size_t kPfBytes = 1024, kPfGroupMax = 24576;
static inline size_t pf_distance(size_t bx, int nr) { return nr * bx <= kPfGroupMax ? nr * bx : kPfBytes; }
// Every cache line of the block of type B that starts at a (its last byte may sit one line further on).
template <class B>
static inline void prefetch_block(const char* a) {
  for (size_t o = 0; o < sizeof(B); o += 64) _mm_prefetch(a + o, _MM_HINT_T0);
  _mm_prefetch(a + sizeof(B) - 1, _MM_HINT_T0);
}
// Block i of the next weight row (rows of a matrix are contiguous: nb blocks on).
template <class B>
static inline void prefetch_next_row(const void* vx, int nb, int i) {
  prefetch_block<B>((const char*)((const B*)vx + nb + i));
}

template <bool Q5, int NR>
static void dot_q45_K_512(int n, float* s, const void* vx, const void* vy, size_t by) {
  Q45Acc<Q5> a[NR];  // the 256-bit kernel's float side on the same integers
  Q45Block b;
  for (int i = 0; i < n / QK_K; i++) {
    prefetch_next_row<typename std::conditional<Q5, block_q5_K, block_q4_K>::type>(vx, n / QK_K, i);
    load_q45_block<Q5>(vx, i, b);
    for (int r = 0; r < NR; r++) {
      const block_q8_K* y = (const block_q8_K*)row(vy, by, r) + i;
      a[r].add(fold512(q45_isum(b, y)), q45_mins(b, y), y->d, b.d, b.dmin);
    }
  }
  for (int r = 0; r < NR; r++) s[r] = a[r].total();
}

// the repacked-Q4_K arithmetic (see dot_q4_K_rp): one int32 per super-block for sums and mins
template <int NR>
static void dot_q4_K_rp_512_rows(int n, float* s, const void* vx, const void* vy, size_t by) {
  __m128 acc[NR], accm[NR];  // scalars in lane 0 (kept in registers: no insert/extract per block)
  for (int r = 0; r < NR; r++) { acc[r] = _mm_setzero_ps(); accm[r] = _mm_setzero_ps(); }
  Q45Block b;
  for (int i = 0; i < n / QK_K; i++) {
    prefetch_next_row<block_q4_K>(vx, n / QK_K, i);
    load_q45_block<false>(vx, i, b);
    const __m128 d = _mm_set_ss(b.d), dmin = _mm_set_ss(b.dmin);
    for (int r = 0; r < NR; r++) {
      const block_q8_K* y = (const block_q8_K*)row(vy, by, r) + i;
      // both reductions in one pass: sums folded to 4 lanes, then [s01 s23 m01 m23] -> [s m . .]
      const __m256i f = fold512(q45_isum(b, y));
      const __m128i is4 = _mm_add_epi32(_mm256_castsi256_si128(f), _mm256_extracti128_si256(f, 1));
      const __m128i h = _mm_hadd_epi32(is4, q45_mins(b, y));
      const __m128 sm = _mm_cvtepi32_ps(_mm_hadd_epi32(h, h));  // rounds as (float)int does
      const __m128 yd = _mm_load_ss(&y->d);
      acc[r] = _mm_fmadd_ss(sm, _mm_mul_ss(d, yd), acc[r]);
      accm[r] = _mm_fmadd_ss(_mm_movehdup_ps(sm), _mm_mul_ss(dmin, yd), accm[r]);
    }
  }
  for (int r = 0; r < NR; r++) s[r] = _mm_cvtss_f32(_mm_sub_ss(acc[r], accm[r]));
}

// Groups of 4 / 8 rows: the per-block integer sums of all rows are reduced together (unpack/add
// trees, integers: exact in any order) and the float side runs with one row per lane. Each lane does
// the scalar kernel's operations on the same operands ((float)is, d*y.d, fma, acc - accm), so the
// bits equal dot_q4_K_rp_512_rows.
// 4 / 8 zmm of 16 int32 lanes (one row each) -> the rows' totals, one per int32 lane.
static inline __m128i rowsum4_512(const __m512i* z) {
  const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(z[0], z[1]), _mm512_unpackhi_epi32(z[0], z[1]));
  const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(z[2], z[3]), _mm512_unpackhi_epi32(z[2], z[3]));
  const __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));  // [r0..r3] per 128
  const __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(u), _mm512_extracti64x4_epi64(u, 1));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}
static inline __m256i rowsum8_512(const __m512i* z) {
  __m512i t[4];
  for (int q = 0; q < 4; q++) t[q] = _mm512_add_epi32(_mm512_unpacklo_epi32(z[2 * q], z[2 * q + 1]), _mm512_unpackhi_epi32(z[2 * q], z[2 * q + 1]));
  const __m512i a = _mm512_add_epi32(_mm512_unpacklo_epi64(t[0], t[1]), _mm512_unpackhi_epi64(t[0], t[1]));  // rows 0..3
  const __m512i b = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2], t[3]), _mm512_unpackhi_epi64(t[2], t[3]));  // rows 4..7
  const __m512i w = _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm256_add_epi32(_mm512_castsi512_si256(_mm512_shuffle_i32x4(w, w, 0x08)), _mm512_castsi512_si256(_mm512_shuffle_i32x4(w, w, 0x0D)));
}
// the same for ymm of 8 int32 lanes
static inline __m128i rowsum4_256(const __m256i* g) {
  const __m256i t0 = _mm256_add_epi32(_mm256_unpacklo_epi32(g[0], g[1]), _mm256_unpackhi_epi32(g[0], g[1]));
  const __m256i t1 = _mm256_add_epi32(_mm256_unpacklo_epi32(g[2], g[3]), _mm256_unpackhi_epi32(g[2], g[3]));
  const __m256i u = _mm256_add_epi32(_mm256_unpacklo_epi64(t0, t1), _mm256_unpackhi_epi64(t0, t1));
  return _mm_add_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1));
}
static inline __m256i rowsum8_256(const __m256i* g) {
  __m256i t[4];
  for (int q = 0; q < 4; q++) t[q] = _mm256_add_epi32(_mm256_unpacklo_epi32(g[2 * q], g[2 * q + 1]), _mm256_unpackhi_epi32(g[2 * q], g[2 * q + 1]));
  const __m256i a = _mm256_add_epi32(_mm256_unpacklo_epi64(t[0], t[1]), _mm256_unpackhi_epi64(t[0], t[1]));
  const __m256i b = _mm256_add_epi32(_mm256_unpacklo_epi64(t[2], t[3]), _mm256_unpackhi_epi64(t[2], t[3]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

template <int NR>
static void dot_q4_K_rp_512_lanes(int n, float* s, const void* vx, const void* vy, size_t by) {
  static_assert(NR == 4 || NR == 8, "lanes form is for 4 or 8 rows");
  typedef typename std::conditional<NR == 8, __m256, __m128>::type V;
  V acc, accm;
  if constexpr (NR == 8) { acc = _mm256_setzero_ps(); accm = _mm256_setzero_ps(); }
  else { acc = _mm_setzero_ps(); accm = _mm_setzero_ps(); }
  Q45Block b;
  for (int i = 0; i < n / QK_K; i++) {
    prefetch_next_row<block_q4_K>(vx, n / QK_K, i);
    load_q45_block<false>(vx, i, b);
    __m512i z[NR];
    __m256i g[NR];
    float ydv[NR];
    for (int r = 0; r < NR; r++) {
      const block_q8_K* y = (const block_q8_K*)row(vy, by, r) + i;
      z[r] = q45_isum(b, y);
      g[r] = _mm256_madd_epi16(b.mins16x2, _mm256_loadu_si256((const __m256i*)y->bsums));
      ydv[r] = y->d;
    }
    if constexpr (NR == 8) {
      const __m256 yd = _mm256_loadu_ps(ydv);
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(rowsum8_512(z)), _mm256_mul_ps(_mm256_set1_ps(b.d), yd), acc);
      accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(rowsum8_256(g)), _mm256_mul_ps(_mm256_set1_ps(b.dmin), yd), accm);
    } else {
      const __m128 yd = _mm_loadu_ps(ydv);
      acc = _mm_fmadd_ps(_mm_cvtepi32_ps(rowsum4_512(z)), _mm_mul_ps(_mm_set1_ps(b.d), yd), acc);
      accm = _mm_fmadd_ps(_mm_cvtepi32_ps(rowsum4_256(g)), _mm_mul_ps(_mm_set1_ps(b.dmin), yd), accm);
    }
  }
  if constexpr (NR == 8) _mm256_storeu_ps(s, _mm256_sub_ps(acc, accm));
  else _mm_storeu_ps(s, _mm_sub_ps(acc, accm));
}
template <int NR>
static void dot_q4_K_rp_512(int n, float* s, const void* vx, const void* vy, size_t by) {
  if constexpr (NR == 4 || NR == 8) dot_q4_K_rp_512_lanes<NR>(n, s, vx, vy, by);
  else dot_q4_K_rp_512_rows<NR>(n, s, vx, vy, by);
}
// Repacked Q2_K (dot_q2_K_rp's arithmetic) for groups of 4 / 8 rows, as dot_q4_K_rp_512_lanes: zmm p
// holds chunks 2p, 2p+1 (2-bit fields of one 32-byte run of qs), their 16-element scales as int16
// words; the integer totals per row (sums, and mins . bsums) are exact in any order, and each float
// lane does the scalar fma(is, d*y.d, acc), fma(imin, dmin*y.d, accm), acc - accm. Other row counts
// run dot_q2_K_rp itself.
template <int NR>
static void dot_q2_K_rp_512(int n, float* s, const void* vx, const void* vy, size_t by) {
  if constexpr (NR != 4 && NR != 8) {
    dot_q2_K_rp<NR>(n, s, vx, vy, by);
  } else {
    typedef typename std::conditional<NR == 8, __m256, __m128>::type V;
    V acc, accm;
    if constexpr (NR == 8) { acc = _mm256_setzero_ps(); accm = _mm256_setzero_ps(); }
    else { acc = _mm_setzero_ps(); accm = _mm_setzero_ps(); }
    const block_q2_K* x = (const block_q2_K*)vx;
    const __m512i m3 = _mm512_set1_epi8(3);
    for (int i = 0; i < n / QK_K; i++) {
      const __m128i sc8 = _mm_loadu_si128((const __m128i*)x[i].scales);
      const __m512i scw = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(sc8, _mm_set1_epi8(0xF))));
      const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), _mm_set1_epi8(0xF)));
      __m512i wq[4], scv[4];
      for (int p = 0; p < 4; p++) {  // chunks c = 2p, 2p+1 = 4h + g: bits 2g of qs[32h + l]
        const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(x[i].qs + 32 * (p / 2))));
        const int g0 = 2 * (p % 2);
        const __m512i sh = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * g0)), _mm256_set1_epi16((short)(2 * g0 + 2)), 1);
        wq[p] = _mm512_and_si512(_mm512_srlv_epi16(q, sh), m3);
        const __m512i idx = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi16((short)(4 * p + 1)), _mm_set1_epi16((short)(4 * p)))),
            _mm256_set_m128i(_mm_set1_epi16((short)(4 * p + 3)), _mm_set1_epi16((short)(4 * p + 2))), 1);
        scv[p] = _mm512_permutexvar_epi16(idx, scw);
      }
      __m512i z[NR];
      __m256i g[NR];
      float ydv[NR];
      for (int r = 0; r < NR; r++) {
        const block_q8_K* y = (const block_q8_K*)row(vy, by, r) + i;
        z[r] = _mm512_setzero_si512();
        for (int p = 0; p < 4; p++)
          z[r] = _mm512_dpwssd_epi32(z[r], _mm512_maddubs_epi16(wq[p], _mm512_loadu_si512((const void*)(y->qs + 64 * p))), scv[p]);
        g[r] = _mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i*)y->bsums));
        ydv[r] = y->d;
      }
      const float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
      if constexpr (NR == 8) {
        const __m256 yd = _mm256_loadu_ps(ydv);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(rowsum8_512(z)), _mm256_mul_ps(_mm256_set1_ps(d), yd), acc);
        accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(rowsum8_256(g)), _mm256_mul_ps(_mm256_set1_ps(dmin), yd), accm);
      } else {
        const __m128 yd = _mm_loadu_ps(ydv);
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(rowsum4_512(z)), _mm_mul_ps(_mm_set1_ps(d), yd), acc);
        accm = _mm_fmadd_ps(_mm_cvtepi32_ps(rowsum4_256(g)), _mm_mul_ps(_mm_set1_ps(dmin), yd), accm);
      }
    }
    if constexpr (NR == 8) _mm256_storeu_ps(s, _mm256_sub_ps(acc, accm));
    else _mm_storeu_ps(s, _mm_sub_ps(acc, accm));
  }
}
PYLLM_KERNEL_FAMILY(K_q2_K_rp_512, (dot_q2_K_rp_512<NR>(n, s, x, y, by)));
// Repacked MXFP4 (dot_b32_rp's arithmetic) for groups of 4 / 8 rows: per block each row's integer
// (|w| dpbusd y signed by w: exact), the rows' totals through one reduction tree, and float lane r does
// dot_b32_rp's fma(isum, dx * y.d, acc) for row r, so the bits are dot_b32_rp's. Other row counts run it.
template <class W, int NR>
static void dot_b32_rp_512(int n, float* s, const void* vx, const void* vy, size_t by) {
  if constexpr (NR != 4 && NR != 8) {
    dot_b32_rp<W, NR>(n, s, vx, vy, by);
  } else {
    typedef typename std::conditional<NR == 8, __m256, __m128>::type V;
    const typename W::B* x = (const typename W::B*)vx;
    V acc;
    if constexpr (NR == 8) acc = _mm256_setzero_ps(); else acc = _mm_setzero_ps();
    const __m256i zero = _mm256_setzero_si256();
    for (int ib = 0; ib < n / 32; ib++) {
      prefetch_next_row<typename W::B>(vx, n / 32, ib);
      const __m256i q = W::load(x[ib]);
      const __m256i aq = _mm256_sign_epi8(q, q);
      const float e = W::scale(x[ib]);
      __m256i g[NR];
      alignas(32) float ydv[NR];
      for (int r = 0; r < NR; r++) {
        const block_q8_0* y = (const block_q8_0*)row(vy, by, r) + ib;
        g[r] = _mm256_dpbusd_epi32(zero, aq, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i*)y->qs), q));
        ydv[r] = h2f(y->d);
      }
      if constexpr (NR == 8)
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(rowsum8_256(g)), _mm256_mul_ps(_mm256_set1_ps(e), _mm256_load_ps(ydv)), acc);
      else
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(rowsum4_256(g)), _mm_mul_ps(_mm_set1_ps(e), _mm_load_ps(ydv)), acc);
    }
    if constexpr (NR == 8) _mm256_storeu_ps(s, acc); else _mm_storeu_ps(s, acc);
  }
}
template <class W> PYLLM_KERNEL_FAMILY(K_b32_rp_512, (dot_b32_rp_512<W, NR>(n, s, x, y, by)));
PYLLM_KERNEL_FAMILY(K_q4_K_512, (dot_q45_K_512<false, NR>(n, s, x, y, by)));
PYLLM_KERNEL_FAMILY(K_q5_K_512, (dot_q45_K_512<true, NR>(n, s, x, y, by)));
PYLLM_KERNEL_FAMILY(K_q4_K_rp_512, (dot_q4_K_rp_512<NR>(n, s, x, y, by)));

// ---- 32-element block types on 512-bit integer lanes: two blocks per zmm ----
// dpbusd on a block pair, then the two 8-lane halves go through the same per-block fma chain as
// dot_signed_q8_0 / dot_unsigned_q8_1 (block i, then block i+1), so the bits are theirs.
static inline __m512i pair512(__m256i a, __m256i b) { return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1); }

template <class W, int NR>
static void dot_signed_q8_0_512(int n, float* s, const void* vx, const void* vy, size_t by) {
  const typename W::B* x = (const typename W::B*)vx;
  const int nb = n / 32;
  __m256 acc[NR];
  for (int r = 0; r < NR; r++) acc[r] = _mm256_setzero_ps();
  int i = 0;
  for (; i + 2 <= nb; i += 2) {
    const __m512i q = pair512(W::load(x[i]), W::load(x[i + 1]));
    const __mmask64 neg = _mm512_movepi8_mask(q);
    const __m512i aq = _mm512_abs_epi8(q);
    const float dx0 = h2f(x[i].d), dx1 = h2f(x[i + 1].d);
    for (int r = 0; r < NR; r++) {
      const block_q8_0* y = (const block_q8_0*)row(vy, by, r) + i;
      const __m512i yq = pair512(_mm256_loadu_si256((const __m256i*)y[0].qs), _mm256_loadu_si256((const __m256i*)y[1].qs));
      const __m512i sy = _mm512_mask_sub_epi8(yq, neg, _mm512_setzero_si512(), yq);  // y * sign(q); |q| * 0 covers q == 0
      const __m512 pf = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), aq, sy));
      acc[r] = _mm256_fmadd_ps(_mm512_castps512_ps256(pf), _mm256_set1_ps(dx0 * h2f(y[0].d)), acc[r]);
      acc[r] = _mm256_fmadd_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(pf), 1)), _mm256_set1_ps(dx1 * h2f(y[1].d)), acc[r]);
    }
  }
  for (; i < nb; i++) {  // odd block count: the 256-bit body
    const __m256i q = W::load(x[i]);
    const __m256i aq = _mm256_sign_epi8(q, q);
    const float dx = h2f(x[i].d);
    for (int r = 0; r < NR; r++) {
      const block_q8_0* y = (const block_q8_0*)row(vy, by, r) + i;
      const __m256i p = dot_u8s8(aq, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i*)y->qs), q));
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dx * h2f(y->d)), acc[r]);
    }
  }
  for (int r = 0; r < NR; r++) s[r] = hsum8(acc[r]);
}

template <class W, int NR>
static void dot_unsigned_q8_1_512(int n, float* s, const void* vx, const void* vy, size_t by) {
  const typename W::B* x = (const typename W::B*)vx;
  const int nb = n / 32;
  __m256 acc[NR], accm[NR];
  for (int r = 0; r < NR; r++) { acc[r] = _mm256_setzero_ps(); accm[r] = _mm256_setzero_ps(); }
  auto min_term = [](__m256 accm, float m, const block_q8_1* y) {  // lane 0 only, as dot_unsigned_q8_1
    return _mm256_fmadd_ps(_mm256_set1_ps(m), _mm256_castps128_ps256(_mm_set_ss(h2f(y->s))), accm);
  };
  int i = 0;
  for (; i + 2 <= nb; i += 2) {
    const __m512i q = pair512(W::load(x[i]), W::load(x[i + 1]));
    const float dx0 = h2f(x[i].d), dx1 = h2f(x[i + 1].d), m0 = h2f(x[i].m), m1 = h2f(x[i + 1].m);
    for (int r = 0; r < NR; r++) {
      const block_q8_1* y = (const block_q8_1*)row(vy, by, r) + i;
      const __m512i yq = pair512(_mm256_loadu_si256((const __m256i*)y[0].qs), _mm256_loadu_si256((const __m256i*)y[1].qs));
      const __m512 pf = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), q, yq));
      acc[r] = _mm256_fmadd_ps(_mm512_castps512_ps256(pf), _mm256_set1_ps(dx0 * h2f(y[0].d)), acc[r]);
      accm[r] = min_term(accm[r], m0, &y[0]);
      acc[r] = _mm256_fmadd_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(pf), 1)), _mm256_set1_ps(dx1 * h2f(y[1].d)), acc[r]);
      accm[r] = min_term(accm[r], m1, &y[1]);
    }
  }
  for (; i < nb; i++) {
    const __m256i q = W::load(x[i]);
    const float dx = h2f(x[i].d), m = h2f(x[i].m);
    for (int r = 0; r < NR; r++) {
      const block_q8_1* y = (const block_q8_1*)row(vy, by, r) + i;
      const __m256i p = dot_u8s8(q, _mm256_loadu_si256((const __m256i*)y->qs));
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dx * h2f(y->d)), acc[r]);
      accm[r] = min_term(accm[r], m, y);
    }
  }
  for (int r = 0; r < NR; r++) s[r] = hsum8(acc[r]) + _mm256_cvtss_f32(accm[r]);
}
template <class W> PYLLM_KERNEL_FAMILY(K_signed_512, (dot_signed_q8_0_512<W, NR>(n, s, x, y, by)));
template <class W> PYLLM_KERNEL_FAMILY(K_unsigned_512, (dot_unsigned_q8_1_512<W, NR>(n, s, x, y, by)));

// ---- Q6_K on 512-bit integer lanes: pairs of 32-element chunks (64 contiguous bytes of y) ----
// Folding the two halves gives the 256-bit kernel's 8 integer lanes exactly, so the float side
// (one fma per super-block on those 8 lanes) is dot_q6_K's.
template <int NR>
static void dot_q6_K_512(int n, float* s, const void* vx, const void* vy, size_t by) {
  const block_q6_K* x = (const block_q6_K*)vx;
  __m256 acc[NR];
  for (int r = 0; r < NR; r++) acc[r] = _mm256_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(3);
  for (int i = 0; i < n / QK_K; i++) {
    prefetch_next_row<block_q6_K>(vx, n / QK_K, i);
    __m512i wq[4], scv[4];
    const __m256i sc16y = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)x[i].scales));
    const __m512i sc16 = _mm512_castsi256_si512(sc16y);
    for (int h = 0; h < 2; h++) {
      const __m512i l = _mm512_loadu_si512((const void*)(x[i].ql + 64 * h));  // chunks (0,1) low nibbles, (2,3) high
      const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(x[i].qh + 32 * h)));
      for (int g2 = 0; g2 < 2; g2++) {  // chunk pair (2*g2, 2*g2 + 1) of this half
        const __m512i lo = g2 ? _mm512_and_si512(_mm512_srli_epi16(l, 4), m4) : _mm512_and_si512(l, m4);
        const long long s0 = 4 * g2, s1 = 4 * g2 + 2;  // high-bit shifts of the two chunks
        const __m512i shv = _mm512_set_epi64(s1 * 0x0001000100010001LL, s1 * 0x0001000100010001LL, s1 * 0x0001000100010001LL, s1 * 0x0001000100010001LL,
                                             s0 * 0x0001000100010001LL, s0 * 0x0001000100010001LL, s0 * 0x0001000100010001LL, s0 * 0x0001000100010001LL);
        const __m512i hi = _mm512_and_si512(_mm512_srlv_epi16(hb, shv), m3);
        const int p = 2 * h + g2;  // chunks 2p, 2p+1 = 64 elements = scale groups 4p..4p+3
        wq[p] = _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
        const __m512i idx = _mm512_set_epi64(
            (4 * p + 3) * 0x0001000100010001LL, (4 * p + 3) * 0x0001000100010001LL, (4 * p + 2) * 0x0001000100010001LL, (4 * p + 2) * 0x0001000100010001LL,
            (4 * p + 1) * 0x0001000100010001LL, (4 * p + 1) * 0x0001000100010001LL, (4 * p) * 0x0001000100010001LL, (4 * p) * 0x0001000100010001LL);
        scv[p] = _mm512_permutexvar_epi16(idx, sc16);
      }
    }
    const float d = h2f(x[i].d);
    for (int r = 0; r < NR; r++) {
      const block_q8_K* y = (const block_q8_K*)row(vy, by, r) + i;
      __m512i isum = _mm512_setzero_si512();
      for (int p = 0; p < 4; p++)
        isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(wq[p], _mm512_loadu_si512((const void*)(y->qs + 64 * p))), scv[p]);
      const __m256i off = _mm256_madd_epi16(sc16y, _mm256_loadu_si256((const __m256i*)y->bsums));
      const __m256i is8 = _mm256_sub_epi32(fold512(isum), _mm256_slli_epi32(off, 5));
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is8), _mm256_set1_ps(y->d * d), acc[r]);
    }
  }
  for (int r = 0; r < NR; r++) s[r] = hsum8(acc[r]);
}
PYLLM_KERNEL_FAMILY(K_q6_K_512, (dot_q6_K_512<NR>(n, s, x, y, by)));

#include "ggml/x86/dec_avx512.inc.h"
#include "ggml/x86/gemm_avx512.inc.h"
#include "ggml/x86/act_quant_avx512.inc.h"
#include "ggml/x86/gemv_avx512.inc.h"
#include "ggml/x86/x16_avx512.inc.h"

}  // namespace x86_avx512

void quants_override_avx512(type_traits* t) {
  using namespace x86_avx512;
  install_quant_kernels(t);
  install_lowbit_kernels(t, true);  // Q2_K, Q3_K, IQ1-3, MXFP4
  t[GGML_TYPE_Q4_K].vec_dot = vd1<K_q4_K_512>; t[GGML_TYPE_Q4_K].vec_dot_k = vdk<K_q4_K_512>;
  t[GGML_TYPE_Q5_K].vec_dot = vd1<K_q5_K_512>; t[GGML_TYPE_Q5_K].vec_dot_k = vdk<K_q5_K_512>;
  auto put = [&](ggml_type id, vec_dot_fn f, vec_dot_k_fn fk) { t[id].vec_dot = f; t[id].vec_dot_k = fk; };
  put(GGML_TYPE_Q8_0, vd1<K_signed_512<W_q8_0>>, vdk<K_signed_512<W_q8_0>>);
  put(GGML_TYPE_Q4_0, vd1<K_signed_512<W_q4_0>>, vdk<K_signed_512<W_q4_0>>);
  put(GGML_TYPE_Q5_0, vd1<K_signed_512<W_q5_0>>, vdk<K_signed_512<W_q5_0>>);
  put(GGML_TYPE_IQ4_NL, vd1<K_signed_512<W_iq4_nl>>, vdk<K_signed_512<W_iq4_nl>>);
  put(GGML_TYPE_Q4_1, vd1<K_unsigned_512<W_q4_1>>, vdk<K_unsigned_512<W_q4_1>>);
  put(GGML_TYPE_Q5_1, vd1<K_unsigned_512<W_q5_1>>, vdk<K_unsigned_512<W_q5_1>>);
  t[GGML_TYPE_Q6_K].vec_dot = vd1<K_q6_K_512>; t[GGML_TYPE_Q6_K].vec_dot_k = vdk<K_q6_K_512>;
  t[GGML_TYPE_Q4_K].vec_dot_rp = vd1<K_q4_K_rp_512>; t[GGML_TYPE_Q4_K].vec_dot_rp_k = vdk<K_q4_K_rp_512>;
  const bool l1 = x16_prefetch_l1();
  auto x16 = [&](ggml_type id, x16_tile_fn none, x16_tile_fn t0, x16_tile_fn t1) {
    t[id].x16_tile_pf[kX16PfNone] = t[id].x16_tile_pf[kX16PfStreams] = none;
    t[id].x16_tile_pf[kX16PfL1] = t0; t[id].x16_tile_pf[kX16PfL2] = t1;
    t[id].x16_tile = l1 ? t0 : t1;
    t[id].x16_simd = true;
  };
  x16(GGML_TYPE_Q4_K, x16_q4_K_512<-1>, x16_q4_K_512<_MM_HINT_T0>, x16_q4_K_512<_MM_HINT_T1>);
  t[GGML_TYPE_Q4_K].x16_streams = x16_q4_K_512_streams; t[GGML_TYPE_Q4_K].x16_streams_k = 4;
  t[GGML_TYPE_Q8_0].x16_streams = x16_q8_0_512_streams; t[GGML_TYPE_Q8_0].x16_streams_k = 1;
  x16(GGML_TYPE_IQ4_NL, x16_iq4_nl_512<-1>, x16_iq4_nl_512<_MM_HINT_T0>, x16_iq4_nl_512<_MM_HINT_T1>);
  x16(GGML_TYPE_Q8_0, x16_q8_0_512<-1>, x16_q8_0_512<_MM_HINT_T0>, x16_q8_0_512<_MM_HINT_T1>);
  // Q4_0 / Q4_1 keep the AVX2 group kernel (the same bits) for a grouped matmul, but a model's load leaves them in
  // GGUF rows here: this level's row kernels (gemv_rows_256, its tiles, AMX dec tiles) were not measured against it
  t[GGML_TYPE_Q4_0].x16_simd = t[GGML_TYPE_Q4_1].x16_simd = false;
  // F32/F16 keep the table's ggml_vec_dot_f32/_f16 (vec_dot_ggml.h): same bits at every level
  t[GGML_TYPE_BF16].vec_dot = vd_bf16;
  t[GGML_TYPE_F16].to_float = f16_to_float;
  t[GGML_TYPE_Q8_0].to_float = q8_0_to_float;
  install_gemm_tiles(t);
  install_act_quantizers(t);
  install_gemv_rows(t);
  install_dec_kernels(t);
  t[GGML_TYPE_Q2_K].vec_dot_rp_k = vdk<K_q2_K_rp_512>;  // after install_lowbit_kernels set the 256-bit one
  t[GGML_TYPE_MXFP4].vec_dot_rp_k = vdk<K_b32_rp_512<W_mxfp4>>;
}

}  // namespace pyllm
