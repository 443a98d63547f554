// AMX prefill tiles on decoded rows (level amx = avx512 + these): the IQ2 / IQ3 lattices, Q3_K and Q5_K.
//
// Bits: dot_dec's (so vec_dot's) integer lane k of super-block i is
//   L_k = sum over chunks c < 8, t < 4 of v[32c + 4k + t] * y[32c + 4k + t],  v = sc * (+-aw)
// (dec_layout.h). |v| <= 31 * 62, so v = 128 * hi + lo with hi in [-15, 15], lo in [-64, 63], both int8;
// TDPBSSD sums int8 products exactly in int32, so a tile op over the 32 elements of lane k gives
// H_k = sum hi * y and O_k = sum lo * y, and L_k = 128 * H_k + O_k exactly. The float side is dot_dec's
// per (row, token): acc_k = fma(d * y.d, float(L_k), acc_k) super-block after super-block, then
// kFactor * hsum8(acc) in hsum8's order ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)), here 16 tokens per zmm.
// Q5_K (|v| <= 31 * 63, the same split) adds dot_q45_K's mins chain: per super-block the exact integer
// M = sum_c mins[c] * (y's sum over chunk c), summs = fma(-(y.d * dmin), float(M), summs), and the
// result is hsum8(acc) + summs.
//
// Tile (16 weight rows, dec_tile_bytes): per super-block, per half g (rows 8g..8g+7), per lane k one
// 16 x 32 int8 tile operand: rows 0..7 hi, 8..15 lo of the half's weight rows; then d[16], dmin[16],
// mins[16 rows][4 pairs] (int32 = the int16 mins of chunks 2q, 2q + 1). One tile op
// per (super-block, half, lane) gives H (C rows 0..7) and O (rows 8..15) for 8 rows x 16 tokens.
// Panel (16 Q8_K tokens, dec_panel_bytes): per super-block [lane k][chunk c][16 tokens][4 int8], then y.d[16],
// then [pair q][16 tokens] int32 = y's sums over chunks 2q, 2q + 1 as two int16 (the mins' partner).
// Two tile sets alternate (A, B, C in tmm0-2 and tmm3-5), so that one step's op overlaps the previous
// step's store and float work.
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "ggml/x86/amx_config.h"
#include "ggml/x86/dec_layout.h"

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace pyllm {
namespace {

constexpr int kR = kDecTileRows, kC = kDecTileCols;
constexpr size_t kOpA = 16 * 32;                                  // one tile operand: 16 rows x 32 int8
constexpr size_t kTileD = 2 * 8 * kOpA, kTileDmin = kTileD + kR * 4, kTileMins = kTileDmin + kR * 4;
constexpr size_t kTileSB = kTileMins + kR * 4 * 4;                 // per super-block
constexpr size_t kPanelYd = 8 * 8 * kC * 4, kPanelSums = kPanelYd + kC * 4;
constexpr size_t kPanelSB = kPanelSums + 4 * kC * 4;
static_assert(kR == 16 && kC == 16, "the tiles below are 16 x 16");

size_t tile_bytes(int64_t K) { return (size_t)(K / QK_K) * kTileSB; }
size_t panel_bytes(int64_t K) { return (size_t)(K / QK_K) * kPanelSB; }

// 64 dwords D[8c + k] (4 zmm) -> lane-major: out zmm j holds lanes 2j, 2j + 1, each D[8c + k] for c = 0..7
inline void to_lane_major(const __m512i z[4], __m512i o[4]) {
  alignas(64) static const int32_t kA[16] = {0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27};
  alignas(64) static const int32_t kB[16] = {4, 12, 20, 28, 5, 13, 21, 29, 6, 14, 22, 30, 7, 15, 23, 31};
  alignas(64) static const int32_t kLo[16] = {0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23};
  alignas(64) static const int32_t kHi[16] = {8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31};
  const __m512i ia = _mm512_load_si512(kA), ib = _mm512_load_si512(kB);
  const __m512i il = _mm512_load_si512(kLo), ih = _mm512_load_si512(kHi);
  const __m512i p0 = _mm512_permutex2var_epi32(z[0], ia, z[1]), p1 = _mm512_permutex2var_epi32(z[0], ib, z[1]);  // c < 4
  const __m512i q0 = _mm512_permutex2var_epi32(z[2], ia, z[3]), q1 = _mm512_permutex2var_epi32(z[2], ib, z[3]);  // c >= 4
  o[0] = _mm512_permutex2var_epi32(p0, il, q0);  // lanes 0, 1
  o[1] = _mm512_permutex2var_epi32(p0, ih, q0);  // lanes 2, 3
  o[2] = _mm512_permutex2var_epi32(p1, il, q1);  // lanes 4, 5
  o[3] = _mm512_permutex2var_epi32(p1, ih, q1);  // lanes 6, 7
}

void tile_pack(int64_t K, const void* dec, int r, void* tile) {
  const DecSB* x = (const DecSB*)dec;
  const __m512i zero = _mm512_setzero_si512(), c64 = _mm512_set1_epi16(64);
  for (int64_t i = 0; i < K / QK_K; i++) {
    uint8_t* t = (uint8_t*)tile + i * kTileSB;
    __m512i hz[4], lz[4];
    for (int p = 0; p < 4; p++) {  // chunks 2p, 2p + 1
      __m256i h2[2], l2[2];
      for (int h = 0; h < 2; h++) {
        const int c = 2 * p + h;
        const __m512i a = _mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i*)(x[i].aw + 32 * c)));
        const __m512i s = _mm512_mask_sub_epi16(a, (__mmask32)(x[i].neg[p] >> (32 * h)), zero, a);
        const __m512i sc = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(x[i].sc[2 * c])),
                                              _mm256_set1_epi16(x[i].sc[2 * c + 1]), 1);
        const __m512i v = _mm512_mullo_epi16(s, sc);
        const __m512i hi = _mm512_srai_epi16(_mm512_add_epi16(v, c64), 7);
        h2[h] = _mm512_cvtepi16_epi8(hi);
        l2[h] = _mm512_cvtepi16_epi8(_mm512_sub_epi16(v, _mm512_slli_epi16(hi, 7)));
      }
      hz[p] = _mm512_inserti64x4(_mm512_castsi256_si512(h2[0]), h2[1], 1);
      lz[p] = _mm512_inserti64x4(_mm512_castsi256_si512(l2[0]), l2[1], 1);
    }
    __m512i ho[4], lo[4];
    to_lane_major(hz, ho);
    to_lane_major(lz, lo);
    const int g = r / 8, rr = r % 8;
    for (int j = 0; j < 4; j++)
      for (int h = 0; h < 2; h++) {
        uint8_t* a = t + (g * 8 + 2 * j + h) * kOpA;  // lane k = 2j + h
        _mm256_storeu_si256((__m256i*)(a + rr * 32), h ? _mm512_extracti64x4_epi64(ho[j], 1) : _mm512_castsi512_si256(ho[j]));
        _mm256_storeu_si256((__m256i*)(a + (8 + rr) * 32), h ? _mm512_extracti64x4_epi64(lo[j], 1) : _mm512_castsi512_si256(lo[j]));
      }
    ((float*)(t + kTileD))[r] = x[i].d;
    ((float*)(t + kTileDmin))[r] = x[i].dmin;
    std::memcpy(t + kTileMins + r * 16, x[i].mins, 16);
  }
}

void panel_pack(const void* acts, size_t row_bytes, int n, int64_t K, void* panel) {
  for (int64_t i = 0; i < K / QK_K; i++) {
    uint8_t* p = (uint8_t*)panel + i * kPanelSB;
    int32_t* q = (int32_t*)p;
    float* yd = (float*)(p + kPanelYd);
    int16_t* sums = (int16_t*)(p + kPanelSums);  // [pair][token][2]
    for (int j = 0; j < kC; j++) {
      if (j >= n) {
        for (int k = 0; k < 8; k++)
          for (int c = 0; c < 8; c++) q[(k * 8 + c) * kC + j] = 0;
        yd[j] = 0.f;
        for (int c = 0; c < 8; c++) sums[((c / 2) * kC + j) * 2 + c % 2] = 0;
        continue;
      }
      const block_q8_K* y = (const block_q8_K*)((const uint8_t*)acts + j * row_bytes) + i;
      int32_t d[64];
      std::memcpy(d, y->qs, sizeof d);
      for (int k = 0; k < 8; k++)
        for (int c = 0; c < 8; c++) q[(k * 8 + c) * kC + j] = d[8 * c + k];
      yd[j] = y->d;
      for (int c = 0; c < 8; c++) sums[((c / 2) * kC + j) * 2 + c % 2] = (int16_t)(y->bsums[2 * c] + y->bsums[2 * c + 1]);
    }
  }
}

// set s (0, 1): tmm 3s = A (16 x 32), 3s + 1 = B (8 x 64: 8 groups of 4 elements x 16 tokens), 3s + 2 = C (16 x 16 int32)
inline void configure() {
  static const AmxTileConfig cfg = [] {
    AmxTileConfig c;
    for (int s : {0, 3}) {
      c.rows[s] = 16; c.colsb[s] = 32;
      c.rows[s + 1] = 8; c.colsb[s + 1] = 64;
      c.rows[s + 2] = 16; c.colsb[s + 2] = 64;
    }
    return c;
  }();
  amx_use_config(kAmxFamilyDec, cfg);
}

// GCC's tile intrinsics take literal register numbers (they are pasted into the asm), hence macros
#define PYLLM_TILE_ISSUE(A, B, C, a, b) \
  do {                                  \
    _tile_zero(C);                      \
    _tile_loadd(B, b, 64);              \
    _tile_loadd(A, a, 32);              \
    _tile_dpbssd(C, A, B);              \
  } while (0)

// the mins chain of super-block i for all 16 rows x 16 tokens (Q5_K)
inline void mins_step(const uint8_t* t, const uint8_t* p, float (*summs)[kC]) {
  const __m512 yd = _mm512_loadu_ps((const float*)(p + kPanelYd));
  const int32_t* mins = (const int32_t*)(t + kTileMins);
  const float* dmin = (const float*)(t + kTileDmin);
  __m512i sums[4];
  for (int q = 0; q < 4; q++) sums[q] = _mm512_loadu_si512((const void*)(p + kPanelSums + q * kC * 4));
  const __m512 sign = _mm512_set1_ps(-0.f);
  for (int r = 0; r < kR; r++) {
    __m512i M = _mm512_setzero_si512();
    for (int q = 0; q < 4; q++) M = _mm512_dpwssd_epi32(M, sums[q], _mm512_set1_epi32(mins[4 * r + q]));
    const __m512 dm = _mm512_xor_ps(_mm512_mul_ps(yd, _mm512_set1_ps(dmin[r])), sign);
    _mm512_store_ps(summs[r], _mm512_fmadd_ps(dm, _mm512_cvtepi32_ps(M), _mm512_load_ps(summs[r])));
  }
}

template <int F8, bool Mins>  // the type's factor * 8; Q5_K's mins chain
void dec_tile(int64_t K, const void* tile, const void* panel, float* C, size_t ldc, int nc) {
  configure();
  alignas(64) float acc[kR][8][kC];
  alignas(64) float summs[kR][kC];
  alignas(64) int32_t cb[16][kC];
  std::memset(summs, 0, sizeof summs);
  const int64_t nb = K / QK_K;
  if (Mins)
    for (int64_t i = 0; i < nb; i++) mins_step((const uint8_t*)tile + i * kTileSB, (const uint8_t*)panel + i * kPanelSB, summs);
  // Per (half g, lane k) the super-blocks run innermost, so the 8 rows' accumulators of that lane stay in
  // registers (each is one fma chain over the super-blocks, in their order). The tile unit keeps its
  // operations in order: super-block i + 1's op is issued (tile set (i + 1) % 2) before i's result is
  // stored, and runs while the store waits and the float work goes on.
  for (int g = 0; g < 2; g++)
    for (int k = 0; k < 8; k++) {
      const int step = 8 * g + k;
      auto issue = [&](int64_t i) {
        const uint8_t* a = (const uint8_t*)tile + i * kTileSB + step * kOpA;
        const uint8_t* y = (const uint8_t*)panel + i * kPanelSB + k * (8 * kC * 4);
        if (i & 1) PYLLM_TILE_ISSUE(3, 4, 5, a, y);
        else PYLLM_TILE_ISSUE(0, 1, 2, a, y);
      };
      __m512 a8[8];
      for (int rr = 0; rr < 8; rr++) a8[rr] = _mm512_setzero_ps();
      issue(0);
      for (int64_t i = 0; i < nb; i++) {
        if (i + 1 < nb) issue(i + 1);
        if (i & 1) _tile_stored(5, &cb[0][0], 64);
        else _tile_stored(2, &cb[0][0], 64);
        const __m512 yd = _mm512_loadu_ps((const float*)((const uint8_t*)panel + i * kPanelSB + kPanelYd));
        const float* d = (const float*)((const uint8_t*)tile + i * kTileSB + kTileD) + 8 * g;
        for (int rr = 0; rr < 8; rr++) {
          const __m512i L = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(cb[rr]), 7), _mm512_load_si512(cb[8 + rr]));
          a8[rr] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(d[rr]), yd), _mm512_cvtepi32_ps(L), a8[rr]);
        }
      }
      for (int rr = 0; rr < 8; rr++) _mm512_store_ps(acc[8 * g + rr][k], a8[rr]);
    }
  alignas(64) float out[kR][kC];
  const __m512 f = _mm512_set1_ps(F8 / 8.f);
  for (int r = 0; r < kR; r++) {
    const __m512 a04 = _mm512_add_ps(_mm512_load_ps(acc[r][0]), _mm512_load_ps(acc[r][4]));
    const __m512 a15 = _mm512_add_ps(_mm512_load_ps(acc[r][1]), _mm512_load_ps(acc[r][5]));
    const __m512 a26 = _mm512_add_ps(_mm512_load_ps(acc[r][2]), _mm512_load_ps(acc[r][6]));
    const __m512 a37 = _mm512_add_ps(_mm512_load_ps(acc[r][3]), _mm512_load_ps(acc[r][7]));
    const __m512 h = _mm512_mul_ps(f, _mm512_add_ps(_mm512_add_ps(a04, a26), _mm512_add_ps(a15, a37)));
    _mm512_store_ps(out[r], Mins ? _mm512_add_ps(h, _mm512_load_ps(summs[r])) : h);
  }
  for (int j = 0; j < nc; j++)
    for (int r = 0; r < kR; r++) C[j * ldc + r] = out[r][j];
}

}  // namespace

void amx_new_epoch() { amx_epoch().fetch_add(1, std::memory_order_relaxed); }

bool amx_usable() {
  static const bool ok = [] {
    if (const char* e = std::getenv("PYLLM_AMX"); e && *e == '0') return false;  // the amx level off (tests, users)
    __builtin_cpu_init();
    unsigned a, b, c, d;
    __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    const bool cpu = (d >> 24 & 1) && (d >> 25 & 1);  // AMX-TILE, AMX-INT8
    constexpr long kReqXcompPerm = 0x1023, kXtiledata = 18;
    return cpu && syscall(SYS_arch_prctl, kReqXcompPerm, kXtiledata) == 0;
  }();
  return ok;
}

void quants_override_amx(type_traits* t) {
  auto put = [&](ggml_type id, dec_tile_fn f) {
    t[id].dec_tile_pack = tile_pack; t[id].dec_tile_bytes = tile_bytes; t[id].dec_tile = f;
  };
  put(GGML_TYPE_IQ2_XXS, dec_tile<1, false>);
  put(GGML_TYPE_IQ2_XS, dec_tile<1, false>);
  put(GGML_TYPE_IQ2_S, dec_tile<1, false>);
  put(GGML_TYPE_IQ3_XXS, dec_tile<2, false>);
  put(GGML_TYPE_IQ3_S, dec_tile<8, false>);
  put(GGML_TYPE_Q3_K, dec_tile<8, false>);
  put(GGML_TYPE_Q5_K, dec_tile<8, true>);
  t[GGML_TYPE_Q8_K].dec_panel_pack = panel_pack;
  t[GGML_TYPE_Q8_K].dec_panel_bytes = panel_bytes;
  install_amx_kquants(t);
  install_amx_b32(t);
  install_amx_x16(t);
}

}  // namespace pyllm
