// f16-cache attention for many queries at once, with exactly the per-(row, head) arithmetic of
// attention.cpp's fa_row_avx512 (ggml's one_chunk kernel without AVX512-FP16; see there):
//   s_j = ggml_vec_dot_f16(K_j, f16(q)) * scale, keys in cache order, online softmax with expf, an
//   f16 accumulator: acc = f16(f32(acc) * ms) on a new maximum, acc = f16(fma(f32(v_j), vs, f32(acc))),
//   S = fmaf(S, ms, vs), out = acc * (1 / S).
// What changes is only the schedule. A task takes the queries of one kv head (consecutive batch rows of
// one sequence x the heads that share it) and walks the keys in tiles: each tile's K and V rows are
// converted to f32 once (exact) and met by every query, instead of converted per (row, head, key). Per
// query and tile, the scores come first (16 keys' dots with one transposed reduction), then the expf's
// (independent calls, in flight together), then the V updates of the f16 accumulator (two heads of a
// row side by side). The key order, every
// operation and every rounding are the same, so a row's bits still depend on nothing but its own keys:
// decode, prefill, verification and any thread count agree, and agree with fa_row_avx512
// (tests/test_schedules.py runs both).
// AVX2 machines run the same schedule on 8-lane halves (`Wide` = false): each 16-lane accumulator of the
// AVX-512 kernel is a pair of ymm (lanes 0-7, 8-15), reduced by _mm512_reduce_add_ps's tree, as
// fa_row_avx2 does; the f16 accumulators take their conversions 8 at a time (element-wise: the same
// roundings). PYLLM_FA_TILES=avx2 runs that half on an AVX-512 machine too (the tests use it).
#include "cpu/attention_tiles.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ggml/fp16.h"
#include "ggml/vec_dot_ggml.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace pyllm {

#if defined(__x86_64__)
namespace {

constexpr int kKeyTile = 16;     // keys per tile: K and V tiles of 16 x 256 f32 (16 KiB each) stay in L1 together
                                 // (32 keys: 40% slower scores, from L2; 8: the 16-key reduction half empty)
constexpr int kMaxQueries = 64;  // queries per task: their f32 q and accumulators stay in L2

// Scores of nk <= 16 keys (rows of kt, ldk apart) against q: ggml_dot_f16_avx512 on values already
// converted to f32 (cvtph2ps is exact): per key the same 4 x 16-lane fma chains over blocks of 64 and
// the same vertical adds; then _mm512_reduce_add_ps's tree (lane i + i+8, + i+4, + i+2, + i+1) for 16
// keys at once, transposed: each add pairs exactly the partial sums that tree pairs (fp add commutes).
template <int DK>
__attribute__((target("avx512f,fma"))) static void scores16(const float* kt, int ldk, const float* qf, int nk, float* s) {
  constexpr int NQ = DK / 16;
  __m512 q[NQ];
  for (int v = 0; v < NQ; v++) q[v] = _mm512_loadu_ps(qf + 16 * v);
  __m512 x[16];
  for (int j = 0; j < 16; j++) {
    if (j >= nk) { x[j] = _mm512_setzero_ps(); continue; }
    const float* k = kt + (size_t)j * ldk;
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int i = 0; i < NQ; i += 4)
      for (int c = 0; c < 4; c++) acc[c] = _mm512_fmadd_ps(_mm512_loadu_ps(k + 16 * (i + c)), q[i + c], acc[c]);
    acc[0] = _mm512_add_ps(acc[0], acc[2]);
    acc[1] = _mm512_add_ps(acc[1], acc[3]);
    x[j] = _mm512_add_ps(acc[0], acc[1]);
  }
  // lane i + lane i+8: keys 2m, 2m+1 -> lanes 0-7, 8-15 of y[m]
  __m512 y[8];
  for (int m = 0; m < 8; m++)
    y[m] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * m], x[2 * m + 1], 0x44), _mm512_shuffle_f32x4(x[2 * m], x[2 * m + 1], 0xEE));
  // + i+4: keys 4m..4m+3 -> the four 128-bit quarters of z[m]
  __m512 z[4];
  for (int m = 0; m < 4; m++)
    z[m] = _mm512_add_ps(_mm512_shuffle_f32x4(y[2 * m], y[2 * m + 1], 0x88), _mm512_shuffle_f32x4(y[2 * m], y[2 * m + 1], 0xDD));
  // + i+2: quarter k of w[m] = (key 8m + k: lanes 0, 1), (key 8m + 4 + k: lanes 2, 3)
  __m512 w[2];
  for (int m = 0; m < 2; m++) {
    const __m512d a = _mm512_castps_pd(z[2 * m]), b = _mm512_castps_pd(z[2 * m + 1]);
    w[m] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  // + i+1: lane 4k + t = key 4t + k
  const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], 0x88), _mm512_shuffle_ps(w[0], w[1], 0xDD));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  alignas(64) float out[16];
  _mm512_store_ps(out, _mm512_permutexvar_ps(order, r));
  for (int j = 0; j < nk; j++) s[j] = out[j];
}

// The same for a Dk without a register-held template (any multiple of 64): q from memory.
__attribute__((target("avx512f,fma"))) static void scores_any(const float* kt, int ldk, const float* qf, int Dk, int nk, float* s) {
  for (int j = 0; j < nk; j++) {
    const float* k = kt + (size_t)j * ldk;
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int i = 0; i < Dk; i += 64)
      for (int c = 0; c < 4; c++) acc[c] = _mm512_fmadd_ps(_mm512_loadu_ps(k + i + 16 * c), _mm512_loadu_ps(qf + i + 16 * c), acc[c]);
    acc[0] = _mm512_add_ps(acc[0], acc[2]);
    acc[1] = _mm512_add_ps(acc[1], acc[3]);
    s[j] = _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]));
  }
}

static void scores(const float* kt, int ldk, const float* qf, int Dk, int nk, float* s) {
  for (int j0 = 0; j0 < nk; j0 += 16) {
    const int m = std::min(16, nk - j0);
    const float* k = kt + (size_t)j0 * ldk;
    switch (Dk) {
      case 64: scores16<64>(k, ldk, qf, m, s + j0); break;
      case 128: scores16<128>(k, ldk, qf, m, s + j0); break;
      case 256: scores16<256>(k, ldk, qf, m, s + j0); break;
      default: scores_any(k, ldk, qf, Dk, m, s + j0); break;
    }
  }
}

// The same on AVX2, per key: the 4 accumulators as lo/hi halves, then ggml_dot_f16_avx2's reduction
// (vec_dot_ggml.h: the AVX-512 lanes and tree).
__attribute__((target("avx2,f16c,fma"))) static void scores_avx2(const float* kt, int ldk, const float* qf, int Dk, int nk, float* s) {
  for (int j = 0; j < nk; j++) {
    const float* k = kt + (size_t)j * ldk;
    __m256 lo[4], hi[4];
    for (int c = 0; c < 4; c++) lo[c] = hi[c] = _mm256_setzero_ps();
    for (int i = 0; i < Dk; i += 64)
#pragma GCC unroll 4
      for (int c = 0; c < 4; c++) {
        const int o = i + 16 * c;
        lo[c] = _mm256_fmadd_ps(_mm256_loadu_ps(k + o), _mm256_loadu_ps(qf + o), lo[c]);
        hi[c] = _mm256_fmadd_ps(_mm256_loadu_ps(k + o + 8), _mm256_loadu_ps(qf + o + 8), hi[c]);
      }
    s[j] = tree_reduce16_avx2(lo, hi);
  }
}

// q rounded to f16, held as f32 (n a multiple of 16)
__attribute__((target("avx512f,f16c"))) static void round_f16_row(const float* src, float* dst, int n) {
  for (int d = 0; d < n; d += 16)
    _mm512_storeu_ps(dst + d, _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(src + d), _MM_FROUND_TO_NEAREST_INT)));
}
__attribute__((target("avx2,f16c"))) static void round_f16_row_avx2(const float* src, float* dst, int n) {
  for (int d = 0; d < n; d += 8)
    _mm256_storeu_ps(dst + d, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(src + d), _MM_FROUND_TO_NEAREST_INT)));
}

// The f16 accumulators of G queries with the same keys (Dv elements each, acc16[g]) through the keys of
// one tile: on a new maximum the scale by ms[g][j] first (vs is then 1), then the fused multiply-add of V
// row j, each rounded to f16 and stored. The accumulators stay in L1 (vcvtph2ps from memory costs fewer
// port-0/5 uops than a register round trip); two queries side by side give the chains through
// cvt -> fma -> cvt of one key twice the independent work.
struct VCoef {
  float ms[kKeyTile], vs[kKeyTile];
  uint8_t newmax[kKeyTile];
};
template <int G>
__attribute__((target("avx512f,f16c,fma"))) static void v_pass(uint16_t* const* acc16, const float* vt, int Dv, int nk,
                                                              const VCoef* c) {
  for (int j = 0; j < nk; j++) {
    const float* vr = vt + (size_t)j * Dv;
    for (int g = 0; g < G; g++)
      if (c[g].newmax[j]) {
        const __m512 m = _mm512_set1_ps(c[g].ms[j]);
        for (int d = 0; d < Dv; d += 16) {
          __m256i* p = (__m256i*)(acc16[g] + d);
          _mm256_storeu_si256(p, _mm512_cvtps_ph(_mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(p)), m), _MM_FROUND_TO_NEAREST_INT));
        }
      }
    __m512 w[G];
    for (int g = 0; g < G; g++) w[g] = _mm512_set1_ps(c[g].vs[j]);
#pragma GCC unroll 8
    for (int d = 0; d < Dv; d += 16) {
      const __m512 v = _mm512_loadu_ps(vr + d);
      for (int g = 0; g < G; g++) {
        __m256i* p = (__m256i*)(acc16[g] + d);
        _mm256_storeu_si256(p, _mm512_cvtps_ph(_mm512_fmadd_ps(v, w[g], _mm512_cvtph_ps(_mm256_loadu_si256(p))), _MM_FROUND_TO_NEAREST_INT));
      }
    }
  }
}

__attribute__((target("avx512f,f16c"))) static void f16_to_f32_row(const uint16_t* src, float* dst, int n) {
  for (int i = 0; i < n; i += 16) _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(src + i))));
}

// v_pass on AVX2: fa_scale_f_avx2's multiply and fa_mad_f_avx2's fma, 8 elements at a time
template <int G>
__attribute__((target("avx2,f16c,fma"))) static void v_pass_avx2(uint16_t* const* acc16, const float* vt, int Dv, int nk,
                                                                const VCoef* c) {
  for (int j = 0; j < nk; j++) {
    const float* vr = vt + (size_t)j * Dv;
    for (int g = 0; g < G; g++)
      if (c[g].newmax[j]) {
        const __m256 m = _mm256_set1_ps(c[g].ms[j]);
        for (int d = 0; d < Dv; d += 8) {
          __m128i* p = (__m128i*)(acc16[g] + d);
          _mm_storeu_si128(p, _mm256_cvtps_ph(_mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(p)), m), _MM_FROUND_TO_NEAREST_INT));
        }
      }
    __m256 w[G];
    for (int g = 0; g < G; g++) w[g] = _mm256_set1_ps(c[g].vs[j]);
#pragma GCC unroll 8
    for (int d = 0; d < Dv; d += 8) {
      const __m256 v = _mm256_loadu_ps(vr + d);
      for (int g = 0; g < G; g++) {
        __m128i* p = (__m128i*)(acc16[g] + d);
        _mm_storeu_si128(p, _mm256_cvtps_ph(_mm256_fmadd_ps(v, w[g], _mm256_cvtph_ps(_mm_loadu_si128(p))), _MM_FROUND_TO_NEAREST_INT));
      }
    }
  }
}

__attribute__((target("avx2,f16c"))) static void f16_to_f32_row_avx2(const uint16_t* src, float* dst, int n) {
  for (int i = 0; i < n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(src + i))));
}

struct Query {
  int row, head, lo, hi;  // keys lo..hi (inclusive)
  float M, S;
};

struct Scratch {
  std::vector<float> kt, vt, qf;
  std::vector<uint16_t> acc;  // [query][Dv] f16 accumulators
};

// One query's scores over nk keys of a tile, its running maximum and sum, and the coefficients of its V
// updates: which expf each key needs follows from the running maximum, the calls are then independent.
// Wide: the AVX-512 kernels, else the AVX2 ones (the code around them needs only AVX2's fma)
template <bool Wide>
__attribute__((target("avx2,f16c,fma"))) static void softmax_step(const float* kt, const float* qf, int Dk, int nk, float kq_scale, Query& Q, VCoef& c) {
  float s[kKeyTile];
  if (Wide) scores(kt, Dk, qf, Dk, nk, s); else scores_avx2(kt, Dk, qf, Dk, nk, s);
  float M = Q.M;
  for (int j = 0; j < nk; j++) {
    s[j] *= kq_scale;
    c.newmax[j] = s[j] > M;
    if (c.newmax[j]) { c.ms[j] = M - s[j]; c.vs[j] = 1.0f; M = s[j]; }
    else { c.ms[j] = 1.0f; c.vs[j] = s[j] - M; }
  }
  for (int j = 0; j < nk; j++) {
    if (c.newmax[j]) c.ms[j] = std::exp(c.ms[j]);
    else c.vs[j] = std::exp(c.vs[j]);
  }
  float S = Q.S;
  for (int j = 0; j < nk; j++) S = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(S), _mm_set_ss(c.ms[j]), _mm_set_ss(c.vs[j])));
  Q.M = M;
  Q.S = S;
}

template <bool Wide>
__attribute__((target("avx2,f16c,fma"))) static void run_task(const FaTiles& a, const FaTask& t, Scratch& sc) {
  const int Dk = a.Dk, Dv = a.Dv;
  const int nh = t.h1 - t.h0;
  const int nq = (t.r1 - t.r0) * nh;
  Query qs[kMaxQueries];
  sc.qf.resize((size_t)nq * Dk);
  sc.acc.assign((size_t)nq * Dv, 0);
  sc.kt.resize((size_t)kKeyTile * Dk);
  sc.vt.resize((size_t)kKeyTile * Dv);
  const int seq = a.seq[t.r0], kvh = t.h0 / (a.H / a.Hkv);
  const int64_t kstride = (int64_t)a.Hkv * Dk, vstride = (int64_t)a.Hkv * Dv;  // cache rows: all kv heads of a position
  const uint16_t* kc = (const uint16_t*)a.mem->k_ptr(a.il, seq, 0) + (int64_t)kvh * Dk;
  const uint16_t* vc = (const uint16_t*)a.mem->v_ptr(a.il, seq, 0) + (int64_t)kvh * Dv;
  int jmin = INT_MAX, jmax = -1;
  for (int r = t.r0, i = 0; r < t.r1; r++)
    for (int h = t.h0; h < t.h1; h++, i++) {
      const int pos = a.pos[r];
      qs[i] = {r, h, a.n_swa > 0 ? std::max(0, pos - a.n_swa + 1) : 0, pos, -INFINITY, 0.0f};
      // q rounded to f16, as the rows kernel's q16, held as f32
      const float* qh = a.q + (int64_t)r * a.H * Dk + (int64_t)h * Dk;
      float* qf = sc.qf.data() + (size_t)i * Dk;
      if (Wide) round_f16_row(qh, qf, Dk); else round_f16_row_avx2(qh, qf, Dk);
      jmin = std::min(jmin, qs[i].lo);
      jmax = std::max(jmax, qs[i].hi);
    }
  VCoef coef[2];
  for (int t0 = jmin; t0 <= jmax; t0 += kKeyTile) {
    const int nt = std::min(kKeyTile, jmax + 1 - t0);
    for (int j = 0; j < nt; j++) {
      auto row = Wide ? f16_to_f32_row : f16_to_f32_row_avx2;
      row(kc + (int64_t)(t0 + j) * kstride, sc.kt.data() + (size_t)j * Dk, Dk);
      row(vc + (int64_t)(t0 + j) * vstride, sc.vt.data() + (size_t)j * Dv, Dv);
    }
    for (int i = 0; i < nq;) {
      const int j0 = std::max(qs[i].lo, t0), j1 = std::min(qs[i].hi + 1, t0 + nt);
      // the next query (another head of the row) usually has the same keys: their V passes go together
      const int G = i + 1 < nq && std::max(qs[i + 1].lo, t0) == j0 && std::min(qs[i + 1].hi + 1, t0 + nt) == j1 ? 2 : 1;
      if (j0 >= j1) { i += G; continue; }
      const int nk = j1 - j0;
      uint16_t* acc[2];
      for (int g = 0; g < G; g++) {
        softmax_step<Wide>(sc.kt.data() + (size_t)(j0 - t0) * Dk, sc.qf.data() + (size_t)(i + g) * Dk, Dk, nk, a.kq_scale, qs[i + g], coef[g]);
        acc[g] = sc.acc.data() + (size_t)(i + g) * Dv;
      }
      const float* vt = sc.vt.data() + (size_t)(j0 - t0) * Dv;
      if (Wide) { if (G == 2) v_pass<2>(acc, vt, Dv, nk, coef); else v_pass<1>(acc, vt, Dv, nk, coef); }
      else if (G == 2) v_pass_avx2<2>(acc, vt, Dv, nk, coef); else v_pass_avx2<1>(acc, vt, Dv, nk, coef);
      i += G;
    }
  }
  for (int i = 0; i < nq; i++) {
    const float S_inv = qs[i].S == 0.0f ? 0.0f : 1.0f / qs[i].S;
    const uint16_t* acc = sc.acc.data() + (size_t)i * Dv;
    float* o = a.out + (int64_t)qs[i].row * a.H * Dv + (int64_t)qs[i].head * Dv;
    for (int d = 0; d < Dv; d++) o[d] = fp16_to_fp32(acc[d]) * S_inv;
  }
}

}  // namespace

// the AVX-512 kernels where the CPU has them, unless PYLLM_FA_TILES=avx2
static const bool kWide = __builtin_cpu_supports("avx512f") && !(std::getenv("PYLLM_FA_TILES") && !std::strcmp(std::getenv("PYLLM_FA_TILES"), "avx2"));

bool fa_tiles_supported(int Dk, int Dv, float softcap) {
  static const bool cpu = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma");
  return cpu && Dk % 64 == 0 && Dv % 16 == 0 && softcap == 0.0f;
}

std::vector<FaTask> fa_tiles_plan(const int* seq, int n, int H, int Hkv, int n_threads) {
  // row blocks: consecutive rows of one sequence
  std::vector<std::pair<int, int>> blocks;
  const int ratio = H / Hkv;
  const int rb = std::max(1, kMaxQueries / ratio);
  for (int r = 0; r < n;) {
    int e = r + 1;
    while (e < n && e - r < rb && seq[e] == seq[r]) e++;
    blocks.push_back({r, e});
    r = e;
  }
  // few row blocks (decoding): split each kv head's heads so every thread gets work
  const int64_t units = (int64_t)blocks.size() * Hkv;
  const int splits = (int)std::min<int64_t>(ratio, std::max<int64_t>(1, (2 * n_threads + units - 1) / units));
  const int g = std::min(kMaxQueries, (ratio + splits - 1) / splits);
  std::vector<FaTask> tasks;
  for (const auto& b : blocks)
    for (int kvh = 0; kvh < Hkv; kvh++)
      for (int h0 = kvh * ratio; h0 < (kvh + 1) * ratio; h0 += g)
        tasks.push_back({b.first, b.second, h0, std::min((kvh + 1) * ratio, h0 + g)});
  return tasks;
}

void fa_tiles_run(const FaTiles& a, const FaTask& t) {
  thread_local Scratch sc;
  if (kWide) run_task<true>(a, t, sc); else run_task<false>(a, t, sc);
}
#else
bool fa_tiles_supported(int, int, float) { return false; }
std::vector<FaTask> fa_tiles_plan(const int*, int, int, int, int) { return {}; }
void fa_tiles_run(const FaTiles&, const FaTask&) {}
#endif

}  // namespace pyllm
