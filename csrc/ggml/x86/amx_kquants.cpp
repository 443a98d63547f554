// AMX-INT8 prefill for the K-quants whose llama.cpp-repacked arithmetic (dot_q4_K_rp, dot_q2_K_rp) keeps one
// integer per super-block: Q4_K and Q2_K, 16 weight rows x 32 tokens per call. Bits: per (row, token) and
// super-block the integers
//   isum = sum_j scale_j * (q . y8 over sub-block j),  imin = sum_j min_j * (y8 sum over sub-block j)
// are exact whatever computes them. TDPBUSD multiplies unsigned bytes by signed bytes over K = 64 per tile
// row, so the weights enter as planes of bytes q * scale-part (< 256): Q2_K one plane q * scale (<= 45);
// Q4_K two, scale = 8 hi + lo, q * hi and q * lo (<= 105), isum = 8 * hi-dot + lo-dot. imin is vpdpwssd of
// the rows' min pairs with the tokens' pair sums (Q4_K: its 32-element sub-block sums, Q2_K: the bsums).
// The float side is the rp kernels' per pair: acc = fma(isum, d * y.d, acc), accm = fma(imin, dmin * y.d,
// accm), acc - accm. So every pair equals vec_dot_rp (tests/test_matmul_batch.py compares them bit for bit).
//
// Layouts (decoded / packed once per matmul):
//   weight panel, 16 rows: [nb][NP planes][4 chunks of 64][16 rows][64] u8, int32 min pairs [nb][NM][16 rows],
//     float d [nb][16], float dmin [nb][16]
//   activation panel, 32 tokens as two halves of 16 (Q8_K rows): [nb][half][4 chunks][16 k4][16 tok][4] int8
//     (TDPBUSD's B layout), int32 pairs [nb][half][4 + 8][16 tok] (4 of 32-element sums, 8 of bsums),
//     float y.d [nb][32 tok]
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "ggml/fp16.h"
#include "ggml/quants.h"
#include "ggml/types.h"
#include "ggml/x86/amx_config.h"

namespace pyllm {
namespace {

constexpr int R = kAmxRows, T = kAmxCols, H = 16;  // 16 rows x 32 tokens, B tiles of 16 tokens
static_assert(R == 16 && T == 2 * H, "the tile config below is written for 16 x (2 x 16)");
constexpr size_t kPlane = 4 * R * 64;     // one weight plane of a super-block of 16 rows
constexpr size_t kAq = 4 * 16 * H * 4;    // activation bytes of one super-block of 16 tokens
constexpr int kPairs = 4 + 8;             // activation pair sums per token and super-block

template <int NP, int NM>
size_t w_bytes(int64_t K) { return (size_t)(K / QK_K) * (NP * kPlane + NM * R * 4 + 2 * R * 4); }
size_t a_bytes(int64_t K) { return (size_t)(K / QK_K) * (2 * kAq + 2 * kPairs * H * 4 + T * 4); }

inline int32_t pair16(int a, int b) { return (int32_t)((uint32_t)(uint16_t)a | (uint32_t)(uint16_t)b << 16); }

// element e of the super-block goes to byte e % 64 of chunk e / 64 of each plane
struct Q4K {
  static constexpr int NP = 2, NM = 4;  // planes q * (scale >> 3), q * (scale & 7); mins per 32-element sub-block
  static void dec(const block_q4_K& x, uint8_t* o, int r, int32_t* mn) {
    uint8_t m[8];
    for (int sb = 0; sb < 8; sb++) {
      uint8_t sc;
      get_scale_min_k4(sb, x.scales, &sc, &m[sb]);
      const __m256i v = _mm256_loadu_si256((const __m256i*)(x.qs + 32 * (sb / 2)));
      const __m256i nib = _mm256_and_si256(sb % 2 ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(15));
      const size_t at = ((size_t)(sb / 2) * R + r) * 64 + 32 * (sb % 2);
      _mm256_storeu_si256((__m256i*)(o + at), _mm256_mullo_epi16(nib, _mm256_set1_epi16(sc >> 3)));
      _mm256_storeu_si256((__m256i*)(o + kPlane + at), _mm256_mullo_epi16(nib, _mm256_set1_epi16(sc & 7)));
    }
    for (int p = 0; p < NM; p++) mn[p * R + r] = pair16(m[2 * p], m[2 * p + 1]);
  }
  typedef block_q4_K B;
};
struct Q2K {
  static constexpr int NP = 1, NM = 8;  // plane q * scale; mins per 16-element sub-block
  static void dec(const block_q2_K& x, uint8_t* o, int r, int32_t* mn) {
    for (int c = 0; c < 8; c++) {  // 32 elements: bits 2 (c % 4) of qs[32 (c / 4) + l]
      const __m256i b = _mm256_loadu_si256((const __m256i*)(x.qs + 32 * (c / 4)));
      const __m256i q = _mm256_and_si256(_mm256_srli_epi16(b, 2 * (c % 4)), _mm256_set1_epi8(3));
      const __m256i sc = _mm256_setr_m128i(_mm_set1_epi16(x.scales[2 * c] & 0xF), _mm_set1_epi16(x.scales[2 * c + 1] & 0xF));
      const size_t at = ((size_t)(c / 2) * R + r) * 64 + 32 * (c % 2);
      _mm256_storeu_si256((__m256i*)(o + at), _mm256_mullo_epi16(q, sc));  // q * scale <= 45: no carry between bytes
    }
    for (int p = 0; p < NM; p++) mn[p * R + r] = pair16(x.scales[2 * p] >> 4, x.scales[2 * p + 1] >> 4);
  }
  typedef block_q2_K B;
};

template <class Q>
void dec_rows(int K, const void* vw, size_t ldw, void* out) {
  constexpr int NP = Q::NP, NM = Q::NM;
  const int nb = K / QK_K;
  uint8_t* q = (uint8_t*)out;
  int32_t* mn = (int32_t*)(q + (size_t)nb * NP * kPlane);
  float* d = (float*)(mn + (size_t)nb * NM * R);
  float* dm = d + (size_t)nb * R;
  for (int r = 0; r < R; r++) {
    const typename Q::B* x = (const typename Q::B*)((const uint8_t*)vw + r * ldw);
    for (int i = 0; i < nb; i++) {
      Q::dec(x[i], q + (size_t)i * NP * kPlane, r, mn + (size_t)i * NM * R);
      d[i * R + r] = fp16_to_fp32(x[i].d);
      dm[i * R + r] = fp16_to_fp32(x[i].dmin);
    }
  }
}

void pack_q8_K(const void* acts, size_t row_bytes, int n, int64_t K, void* panel) {
  const int nb = (int)(K / QK_K);
  int8_t* q = (int8_t*)panel;
  int32_t* ss = (int32_t*)(q + (size_t)nb * 2 * kAq);
  float* yd = (float*)(ss + (size_t)nb * 2 * kPairs * H);
  const __m512i tok = amx_token_offsets(row_bytes);
  for (int hf = 0; hf < 2; hf++) {
    const int nt = std::max(0, std::min(H, n - hf * H));
    const __mmask16 m = (__mmask16)((1u << nt) - 1);
    const uint8_t* base = (const uint8_t*)acts + (size_t)hf * H * row_bytes;
    for (int i = 0; i < nb; i++) {
      const uint8_t* blk = base + (size_t)i * sizeof(block_q8_K);
      const uint8_t* qs = blk + offsetof(block_q8_K, qs);
      int8_t* o = q + ((size_t)i * 2 + hf) * kAq;
      amx_gather_b(qs, tok, m, 64, o);  // row k4: chunk k4 / 16 of the super-block, row k4 % 16 of its B tile
      int32_t* sp = ss + (size_t)(i * 2 + hf) * kPairs * H;
      float* ydp = yd + (size_t)i * T + hf * H;
      for (int t = 0; t < H; t++) {
        if (t >= nt) {
          for (int p = 0; p < kPairs; p++) sp[p * H + t] = 0;
          ydp[t] = 0.0f;
          continue;
        }
        const block_q8_K* y = (const block_q8_K*)(blk + (size_t)t * row_bytes);
        for (int p = 0; p < 4; p++)  // (32-element sums of sub-blocks 2p, 2p+1)
          sp[p * H + t] = pair16(y->bsums[4 * p] + y->bsums[4 * p + 1], y->bsums[4 * p + 2] + y->bsums[4 * p + 3]);
        for (int p = 0; p < 8; p++) sp[(4 + p) * H + t] = pair16(y->bsums[2 * p], y->bsums[2 * p + 1]);
        ydp[t] = y->d;
      }
    }
  }
}

// tiles 0-3: C (plane 0, 1) x (token half 0, 1), 16 x 16 int32; 4-5: A of planes 0, 1, 16 rows x 64 bytes; 6-7: B
void tile_config() {
  static const AmxTileConfig cfg = [] {
    AmxTileConfig c;
    for (int i = 0; i < 8; i++) { c.rows[i] = 16; c.colsb[i] = 64; }
    return c;
  }();
  amx_use_config(kAmxFamilyKQuants, cfg);
}

template <class Q>
void tile_rows(int K, const void* wpanel, const void* apanel, float* C, size_t ldc, int nc) {
  constexpr int NP = Q::NP, NM = Q::NM, P0 = NM == 4 ? 0 : 4;  // which activation pairs the mins use
  const int nb = K / QK_K;
  const uint8_t* wq = (const uint8_t*)wpanel;
  const int32_t* mn = (const int32_t*)(wq + (size_t)nb * NP * kPlane);
  const float* d = (const float*)(mn + (size_t)nb * NM * R);
  const float* dm = d + (size_t)nb * R;
  const int8_t* aq = (const int8_t*)apanel;
  const int32_t* ss = (const int32_t*)(aq + (size_t)nb * 2 * kAq);
  const float* yd = (const float*)(ss + (size_t)nb * 2 * kPairs * H);
  const int nh = nc > H ? 2 : 1;  // token halves in use
  tile_config();
  alignas(64) float acc[2][R][H], accm[2][R][H];
  std::memset(acc, 0, sizeof acc);
  std::memset(accm, 0, sizeof accm);
  alignas(64) int32_t cb[2][2][R * H];  // [half][plane]
  // the dots of super-block i: C tile 2 * half + plane, A tiles 4 + plane, B tiles 6 + half
  auto issue = [&](int i) {
    const uint8_t* w = wq + (size_t)i * NP * kPlane;
    const int8_t* a = aq + (size_t)i * 2 * kAq;
    _tile_zero(0); _tile_zero(2);
    if (NP == 2) { _tile_zero(1); _tile_zero(3); }
    for (int c = 0; c < 4; c++) {
      _tile_loadd(4, w + (size_t)c * R * 64, 64);
      if (NP == 2) _tile_loadd(5, w + kPlane + (size_t)c * R * 64, 64);
      _tile_loadd(6, a + (size_t)c * 16 * H * 4, 64);
      _tile_dpbusd(0, 4, 6);
      if (NP == 2) _tile_dpbusd(1, 5, 6);
      if (nh == 2) {
        _tile_loadd(7, a + kAq + (size_t)c * 16 * H * 4, 64);
        _tile_dpbusd(2, 4, 7);
        if (NP == 2) _tile_dpbusd(3, 5, 7);
      }
    }
  };
  issue(0);
  for (int i = 0; i < nb; i++) {
    _tile_stored(0, cb[0][0], 64);
    if (NP == 2) _tile_stored(1, cb[0][1], 64);
    if (nh == 2) {
      _tile_stored(2, cb[1][0], 64);
      if (NP == 2) _tile_stored(3, cb[1][1], 64);
    }
    if (i + 1 < nb) issue(i + 1);  // the tile unit works on the next super-block during the vector part below
    const int32_t* mi = mn + (size_t)i * NM * R;
    for (int hf = 0; hf < nh; hf++) {
      const __m512 y = _mm512_loadu_ps(yd + i * T + hf * H);
      const int32_t* sp = ss + ((size_t)(i * 2 + hf) * kPairs + P0) * H;
      __m512i sv[NM];
      for (int p = 0; p < NM; p++) sv[p] = _mm512_loadu_si512(sp + p * H);
      for (int r = 0; r < R; r++) {
        __m512i isum = _mm512_load_si512(cb[hf][0] + r * H);
        if (NP == 2) isum = _mm512_add_epi32(_mm512_slli_epi32(isum, 3), _mm512_load_si512(cb[hf][1] + r * H));
        __m512i imin = _mm512_setzero_si512();
        for (int p = 0; p < NM; p++) imin = _mm512_dpwssd_epi32(imin, sv[p], _mm512_set1_epi32(mi[p * R + r]));
        _mm512_store_ps(acc[hf][r], _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(_mm512_set1_ps(d[i * R + r]), y),
                                                    _mm512_load_ps(acc[hf][r])));
        _mm512_store_ps(accm[hf][r], _mm512_fmadd_ps(_mm512_cvtepi32_ps(imin), _mm512_mul_ps(_mm512_set1_ps(dm[i * R + r]), y),
                                                     _mm512_load_ps(accm[hf][r])));
      }
    }
  }
  for (int j = 0; j < nc; j++)
    for (int r = 0; r < R; r++) C[j * ldc + r] = acc[j / H][r][j % H] - accm[j / H][r][j % H];
}

}  // namespace

void install_amx_kquants(type_traits* t) {
  t[GGML_TYPE_Q4_K].amx_dec = dec_rows<Q4K>;
  t[GGML_TYPE_Q4_K].amx_w_bytes = w_bytes<Q4K::NP, Q4K::NM>;
  t[GGML_TYPE_Q4_K].amx_tile = tile_rows<Q4K>;
  // Q2_K's rp arithmetic is what matmul uses at the avx512 level (llama.cpp repacks Q2_K in AVX-512 builds)
  t[GGML_TYPE_Q2_K].amx_dec = dec_rows<Q2K>;
  t[GGML_TYPE_Q2_K].amx_w_bytes = w_bytes<Q2K::NP, Q2K::NM>;
  t[GGML_TYPE_Q2_K].amx_tile = tile_rows<Q2K>;
  t[GGML_TYPE_Q8_K].amx_pack = pack_q8_K;
  t[GGML_TYPE_Q8_K].amx_a_bytes = a_bytes;
}

}  // namespace pyllm
