// AMX tiles on Q4_K weights in 16-row groups (ggml/repack.h), for verification batches and short prompts: the
// group's 16 rows against up to 32 tokens. The group layout is TDPBSSD's B operand as it stands (word v of the
// 16 rows, one 64-byte vector: row k4 of a B tile, one column per weight row), so each super-block is decoded
// straight from the group, once for all the tokens, into two planes of bytes q * scale-part (scale = 8 hi + lo,
// q * hi, q * lo <= 105, signed bytes), and the tokens are the A operand (their Q8_K bytes, 64 per tile row).
// Bits: per (row, token) and super-block the integers
//   isum = 8 * (q * hi) . y + (q * lo) . y = sum_j scale_j * (q . y over sub-block j),  imin = sum_j min_j * ysum_j
// are dot_q4_K_rp's (exact, so their order is free; imin by dpwssd on the group kernel's (min, min) pairs), and the
// float side is the group kernel's per lane: acc = fma(isum, d * y.d, acc), accm = fma(imin, dmin * y.d, accm),
// super-block after super-block, then acc - accm. So every pair equals x16_tile's (and vec_dot_rp's) bits.
//
// Layouts:
//   B tiles of a super-block (decoded per group, double-buffered in L1): [plane 2][chunk 4][k4 16][row 16][4] u8,
//     chunk c = elements 64c..64c+63, k4 < 8 the low nibbles of words 8c + k4 (sub-block 2c), k4 >= 8 the high
//     nibbles of words 8c + k4 - 8 (sub-block 2c + 1), which is Q4_K's element order: A's bytes are y's in order
//   activation panel, 32 tokens (packed once per matmul): qs [nb][chunk 4][32 tok][64] int8 (A tiles of 16 tokens,
//     1 KiB each, contiguous), min pairs [nb][4][32] int32 (sub-blocks (0,2) (1,3) (4,6) (5,7)), float y.d [nb][32]
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>

#include "ggml/quants.h"
#include "ggml/types.h"
#include "ggml/x86/amx_config.h"
#include "ggml/x86/x16_q4_K_scales.h"

namespace pyllm {
namespace {

constexpr int R = kGroupRows, H = 16, T = kAmxCols;  // 16 weight rows x up to 32 tokens: two A tiles of 16
static_assert(T == 2 * H, "two token tiles per panel");
constexpr size_t kBTile = 16 * 64;    // one B tile: 16 k4 rows x 64 bytes
constexpr size_t kSbW = 2 * 4 * kBTile;  // a super-block's B tiles, [plane][chunk]
constexpr int kPairA[4] = {0, 1, 4, 5}, kPairB[4] = {2, 3, 6, 7};  // q4_K_x16_scales' min pairs

size_t panel_bytes(int64_t K) { return (size_t)(K / QK_K) * (T * QK_K + 4 * T * 4 + T * 4); }

void pack(const void* acts, size_t row_bytes, int n, int64_t K, void* panel) {
  const int nb = (int)(K / QK_K);
  int8_t* q = (int8_t*)panel;
  int32_t* pr = (int32_t*)(q + (size_t)nb * T * QK_K);
  float* yd = (float*)(pr + (size_t)nb * 4 * T);
  for (int i = 0; i < nb; i++)
    for (int t = 0; t < T; t++) {
      int8_t* o = q + ((size_t)i * 4 * T + t) * 64;  // chunk c at o + c * T * 64
      if (t >= n) {  // padding tokens: zeros (the tiles do not read them: their rows are configured away)
        for (int c = 0; c < 4; c++) std::memset(o + c * T * 64, 0, 64);
        for (int p = 0; p < 4; p++) pr[(i * 4 + p) * T + t] = 0;
        yd[i * T + t] = 0.0f;
        continue;
      }
      const block_q8_K* y = (const block_q8_K*)((const uint8_t*)acts + (size_t)t * row_bytes) + i;
      for (int c = 0; c < 4; c++) std::memcpy(o + c * T * 64, y->qs + 64 * c, 64);
      for (int p = 0; p < 4; p++) pr[(i * 4 + p) * T + t] = ybs_pair(y, kPairA[p], kPairB[p]);
      yd[i * T + t] = y->d;
    }
}

// super-block b's B tiles into w
inline void dec_sb(const block_q4_Kx16& b, const Q4KSb& s, uint8_t* w) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), mb = _mm512_set1_epi32(0xFF), m7 = _mm512_set1_epi16(7);
  for (int c = 0; c < 4; c++) {
    __m512i hi[2], lo[2];  // sub-blocks 2c, 2c + 1: scale >> 3 and scale & 7 in both 16-bit halves of each row's lane
    for (int h = 0; h < 2; h++) {
      const int sb = 2 * c + h;
      const __m512i x = _mm512_and_si512(_mm512_srli_epi32(sb < 4 ? s.slo : s.shi, 8 * (sb % 4)), mb);
      const __m512i sc = _mm512_or_si512(x, _mm512_slli_epi32(x, 16));
      hi[h] = _mm512_srli_epi16(sc, 3);
      lo[h] = _mm512_and_si512(sc, m7);
    }
    uint8_t* p0 = w + (size_t)c * kBTile;
    uint8_t* p1 = w + (size_t)(4 + c) * kBTile;
    for (int j = 0; j < 8; j++) {
      const __m512i v = _mm512_loadu_si512(b.qs[8 * c + j]);
      const __m512i ql = _mm512_and_si512(v, m4), qh = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
      _mm512_store_si512((__m512i*)(p0 + j * 64), _mm512_mullo_epi16(ql, hi[0]));
      _mm512_store_si512((__m512i*)(p1 + j * 64), _mm512_mullo_epi16(ql, lo[0]));
      _mm512_store_si512((__m512i*)(p0 + (8 + j) * 64), _mm512_mullo_epi16(qh, hi[1]));
      _mm512_store_si512((__m512i*)(p1 + (8 + j) * 64), _mm512_mullo_epi16(qh, lo[1]));
    }
  }
}

// tiles 0-3: C (plane 0, 1) x (token tile 0, 1), tokens x 16 rows int32; 4, 7: A of token tiles 0, 1; 5, 6: B.
// The token tiles have the tokens' rows only (nc <= 16: nc; else 16 and nc - 16): rows past them would be
// loaded and multiplied for nothing (measured, K = 5120, 8 tokens: 132 -> 159 GMAC/s; the A loads of 16 rows
// were the kernel's hottest spot).
void tile_config(int nc) {
  static const auto cfgs = [] {
    std::array<AmxTileConfig, T + 1> all;
    for (int n = 1; n <= T; n++) {
      AmxTileConfig& c = all[n];
      for (int i = 0; i < 8; i++) { c.rows[i] = 16; c.colsb[i] = 64; }
      const int r0 = std::min(n, H), r1 = n > H ? n - H : 1;  // n <= 16: tiles 2, 3, 7 unused
      c.rows[0] = c.rows[1] = c.rows[4] = (uint8_t)r0;
      c.rows[2] = c.rows[3] = c.rows[7] = (uint8_t)r1;
    }
    return all;
  }();
  amx_use_config(kAmxFamilyX16 + nc, cfgs[nc]);
}

void x16_amx_q4_K(int K, const void* vg, const void* panel, float* C, size_t ldc, int nc) {
  const int nb = K / QK_K;
  const block_q4_Kx16* g = (const block_q4_Kx16*)vg;
  const int8_t* aq = (const int8_t*)panel;
  const int32_t* pr = (const int32_t*)(aq + (size_t)nb * T * QK_K);
  const float* yd = (const float*)(pr + (size_t)nb * 4 * T);
  const bool two = nc > H;
  tile_config(nc);
  alignas(64) uint8_t wb[2][kSbW];
  alignas(64) int32_t cb[2][2][H * R];  // [token tile][plane]
  alignas(64) float acc[T][R], accm[T][R];
  Q4KSb s[2];
  for (int t = 0; t < nc; t++) {
    _mm512_store_ps(acc[t], _mm512_setzero_ps());
    _mm512_store_ps(accm[t], _mm512_setzero_ps());
  }
  // token tile t's planes in C tiles 2t, 2t + 1, summed over the 4 chunks (splitting the chains over more C
  // tiles cost their stores: 159 vs 176 GMAC/s at 8 tokens)
  auto issue = [&](int i) {  // super-block i's dots on the tile unit
    const uint8_t* w = wb[i & 1];
    const int8_t* a = aq + (size_t)i * 4 * T * 64;
    _tile_zero(0); _tile_zero(1);
    if (two) { _tile_zero(2); _tile_zero(3); }
    for (int c = 0; c < 4; c++) {
      _tile_loadd(4, a + (size_t)c * T * 64, 64);
      _tile_loadd(5, w + (size_t)c * kBTile, 64);
      _tile_loadd(6, w + (size_t)(4 + c) * kBTile, 64);
      if (two) {
        _tile_dpbssd(0, 4, 5);
        _tile_dpbssd(1, 4, 6);
        _tile_loadd(7, a + ((size_t)c * T + H) * 64, 64);
        _tile_dpbssd(2, 7, 5);
        _tile_dpbssd(3, 7, 6);
      } else {
        _tile_dpbssd(0, 4, 5);
        _tile_dpbssd(1, 4, 6);
      }
    }
  };
  s[0] = q4_K_x16_scales(g[0]);
  dec_sb(g[0], s[0], wb[0]);
  issue(0);
  if (nb > 1) {
    s[1] = q4_K_x16_scales(g[1]);
    dec_sb(g[1], s[1], wb[1]);
  }
  for (int i = 0; i < nb; i++) {
    _tile_stored(0, cb[0][0], 64);
    _tile_stored(1, cb[0][1], 64);
    if (two) { _tile_stored(2, cb[1][0], 64); _tile_stored(3, cb[1][1], 64); }
    if (i + 1 < nb) issue(i + 1);  // decoded one iteration ago: its stores have drained
    const Q4KSb& S = s[i & 1];
    const int32_t* pi = pr + (size_t)i * 4 * T;
    for (int t = 0; t < nc; t++) {
      const int32_t* c0 = cb[t / H][0] + (t % H) * R;
      const int32_t* c1 = cb[t / H][1] + (t % H) * R;
      const __m512i is = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(c0), 3), _mm512_load_si512(c1));
      __m512i im = _mm512_dpwssd_epi32(_mm512_setzero_si512(), S.mp[0], _mm512_set1_epi32(pi[t]));
      im = _mm512_dpwssd_epi32(im, S.mp[1], _mm512_set1_epi32(pi[T + t]));
      im = _mm512_dpwssd_epi32(im, S.mp[2], _mm512_set1_epi32(pi[2 * T + t]));
      im = _mm512_dpwssd_epi32(im, S.mp[3], _mm512_set1_epi32(pi[3 * T + t]));
      const __m512 y = _mm512_set1_ps(yd[i * T + t]);
      _mm512_store_ps(acc[t], _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(S.d, y), _mm512_load_ps(acc[t])));
      _mm512_store_ps(accm[t], _mm512_fmadd_ps(_mm512_cvtepi32_ps(im), _mm512_mul_ps(S.dm, y), _mm512_load_ps(accm[t])));
    }
    // The decode below reads super-block i + 2; bring i + 3 into L2 now. Without it the stream's misses stall
    // the decode's stores, which the next tile loads wait for, so memory time and compute time added up
    // (27B-shaped Q4_K -t 2: pp8 95.5 -> 102-105 t/s, pp5 63 -> 68, pp16 160 -> 170; into L1, or 4 / 6 ahead,
    // gained less or lost). Past the group's end: the next group's first super-blocks, read next.
    const char* pf = (const char*)(g + i + 3);
    for (size_t l = 0; l < sizeof(block_q4_Kx16) / 64; l++) _mm_prefetch(pf + 64 * l, _MM_HINT_T1);
    if (i + 2 < nb) {  // two ahead, into the buffer super-block i's dots have finished reading
      s[i & 1] = q4_K_x16_scales(g[i + 2]);
      dec_sb(g[i + 2], s[i & 1], wb[i & 1]);
    }
  }
  for (int t = 0; t < nc; t++) _mm512_storeu_ps(C + t * ldc, _mm512_sub_ps(_mm512_load_ps(acc[t]), _mm512_load_ps(accm[t])));
}

}  // namespace

void install_amx_x16(type_traits* t) {
  t[GGML_TYPE_Q4_K].x16_amx = x16_amx_q4_K;
  t[GGML_TYPE_Q8_K].x16_amx_pack = pack;
  t[GGML_TYPE_Q8_K].x16_amx_panel_bytes = panel_bytes;
}

}  // namespace pyllm
