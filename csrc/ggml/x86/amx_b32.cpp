// AMX-INT8 prefill for the 32-element-block types whose llama.cpp-repacked arithmetic (dot_b32_rp) keeps one
// integer per block: MXFP4 (signed weight bytes, the doubled E2M1 table) against Q8_0 activations, 16 weight
// rows x 32 tokens per call. Bits: per (row, token) and block the integer isum = w . y over the 32 elements is exact
// whatever computes it; one TDPBSSD (signed x signed bytes, K = 32) gives it for 16 rows x 16 tokens. The
// float side is dot_b32_rp's per pair: acc = fma(isum, dx * y.d, acc), block after block, so every pair
// equals vec_dot_rp (tests/test_matmul_batch.py compares them bit for bit).
//
// Layouts (decoded / packed once per matmul):
//   weight panel, 16 rows: [nb][16 rows][32] int8, then float dx [nb][16]
//   activation panel, 32 tokens as two halves of 16 (Q8_0 rows): [nb][half][8 k4][16 tok][4] int8
//     (TDPBSSD's B layout), then float y.d [nb][32 tok]
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "ggml/fp16.h"
#include "ggml/quants.h"
#include "ggml/quants_iq.h"
#include "ggml/types.h"
#include "ggml/x86/amx_config.h"

namespace pyllm {
namespace {

constexpr int R = kAmxRows, T = kAmxCols, H = 16;  // 16 rows x 32 tokens, B tiles of 16 tokens
static_assert(R == 16 && T == 2 * H, "the tile config below is written for 16 x (2 x 16)");
constexpr size_t kWq = R * 32;    // weight bytes of one block of 16 rows
constexpr size_t kAq = 8 * H * 4;  // activation bytes of one block of 16 tokens

size_t w_bytes(int64_t K) { return (size_t)(K / 32) * (kWq + R * 4); }
size_t a_bytes(int64_t K) { return (size_t)(K / 32) * (2 * kAq + T * 4); }

// the 32 signed weight bytes of a block of 16 nibble bytes (low nibbles are elements 0..15) through a 16-entry table
static inline __m256i nibbles_through(const uint8_t* qs, const int8_t* table) {
  const __m128i raw = _mm_loadu_si128((const __m128i*)qs);
  const __m256i nib = _mm256_and_si256(_mm256_setr_m128i(raw, _mm_srli_epi16(raw, 4)), _mm256_set1_epi8(15));
  return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)table)), nib);
}

struct MXFP4 {  // the doubled E2M1 table, E8M0 scales (halved)
  typedef block_mxfp4 B;
  static __m256i load(const B& b) { return nibbles_through(b.qs, kvalues_mxfp4); }
  static float scale(const B& b) { return e8m0_to_fp32_half(b.e); }
};

struct IQ4NL {  // grouped IQ4_NL (ggml/repack.h; matmul gives these tiles the group's rows in GGUF layout)
  typedef block_iq4_nl B;
  static __m256i load(const B& b) { return nibbles_through(b.qs, kvalues_iq4nl); }
  static float scale(const B& b) { return fp16_to_fp32(b.d); }
};

template <class Q>
void dec_rows(int K, const void* vw, size_t ldw, void* out) {
  const int nb = K / 32;
  int8_t* q = (int8_t*)out;
  float* dx = (float*)(q + (size_t)nb * kWq);
  for (int r = 0; r < R; r++) {
    const typename Q::B* x = (const typename Q::B*)((const uint8_t*)vw + r * ldw);
    for (int b = 0; b < nb; b++) {
      _mm256_storeu_si256((__m256i*)(q + (size_t)b * kWq + r * 32), Q::load(x[b]));
      dx[b * R + r] = Q::scale(x[b]);
    }
  }
}

void pack_q8_0(const void* acts, size_t row_bytes, int n, int64_t K, void* panel) {
  const int nb = (int)(K / 32);
  int8_t* q = (int8_t*)panel;
  float* yd = (float*)(q + (size_t)nb * 2 * kAq);
  const __m512i tok = amx_token_offsets(row_bytes);
  for (int hf = 0; hf < 2; hf++) {
    const int nt = std::max(0, std::min(H, n - hf * H));
    const __mmask16 m = (__mmask16)((1u << nt) - 1);
    const uint8_t* base = (const uint8_t*)acts + (size_t)hf * H * row_bytes;
    for (int b = 0; b < nb; b++) {
      const uint8_t* blk = base + (size_t)b * sizeof(block_q8_0);
      int8_t* o = q + ((size_t)b * 2 + hf) * kAq;
      amx_gather_b(blk + offsetof(block_q8_0, qs), tok, m, 8, o);
      for (int t = 0; t < H; t++) {
        float v = 0.f;
        if (t < nt) {
          uint16_t h;
          std::memcpy(&h, blk + (size_t)t * row_bytes + offsetof(block_q8_0, d), 2);
          v = fp16_to_fp32(h);
        }
        yd[(size_t)b * T + hf * H + t] = v;
      }
    }
  }
}

// tiles 0-1: C of token halves 0, 1 (16 x 16 int32); 2: A (16 rows x 32 bytes); 3-4: B of halves 0, 1 (8 x 64)
void tile_config() {
  static const AmxTileConfig cfg = [] {
    AmxTileConfig c;
    for (int i : {0, 1}) { c.rows[i] = 16; c.colsb[i] = 64; }
    c.rows[2] = 16; c.colsb[2] = 32;
    for (int i : {3, 4}) { c.rows[i] = 8; c.colsb[i] = 64; }
    return c;
  }();
  amx_use_config(kAmxFamilyB32, cfg);
}

void tile_rows(int K, const void* wpanel, const void* apanel, float* C, size_t ldc, int nc) {
  const int nb = K / 32;
  const int8_t* wq = (const int8_t*)wpanel;
  const float* dx = (const float*)(wq + (size_t)nb * kWq);
  const int8_t* aq = (const int8_t*)apanel;
  const float* yd = (const float*)(aq + (size_t)nb * 2 * kAq);
  const int nh = nc > H ? 2 : 1;  // token halves in use
  tile_config();
  alignas(64) float acc[2][R][H];
  std::memset(acc, 0, sizeof acc);
  alignas(64) int32_t cb[2][R * H];
  auto issue = [&](int b) {
    const int8_t* a = aq + (size_t)b * 2 * kAq;
    _tile_zero(0);
    _tile_loadd(2, wq + (size_t)b * kWq, 32);
    _tile_loadd(3, a, 64);
    _tile_dpbssd(0, 2, 3);
    if (nh == 2) {
      _tile_zero(1);
      _tile_loadd(4, a + kAq, 64);
      _tile_dpbssd(1, 2, 4);
    }
  };
  issue(0);
  for (int b = 0; b < nb; b++) {
    _tile_stored(0, cb[0], 64);
    if (nh == 2) _tile_stored(1, cb[1], 64);
    if (b + 1 < nb) issue(b + 1);  // the tile unit works on the next block during the vector part below
    for (int hf = 0; hf < nh; hf++) {
      const __m512 y = _mm512_loadu_ps(yd + (size_t)b * T + hf * H);
      for (int r = 0; r < R; r++)
        _mm512_store_ps(acc[hf][r], _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cb[hf] + r * H)),
                                                    _mm512_mul_ps(_mm512_set1_ps(dx[b * R + r]), y),
                                                    _mm512_load_ps(acc[hf][r])));
    }
  }
  for (int j = 0; j < nc; j++)
    for (int r = 0; r < R; r++) C[j * ldc + r] = acc[j / H][r][j % H];
}

}  // namespace

// From 2 tokens: the rp row kernels keep a horizontal sum per block and row, and the padded tile beats them
// (bench_matmul, K = 5120, -t 1, MXFP4: B = 4 15.0 -> 18.3 GMAC/s, B = 8 17.6 -> 36.1).
void install_amx_b32(type_traits* t) {
  t[GGML_TYPE_MXFP4].amx_min_rows = 2;
  t[GGML_TYPE_MXFP4].amx_dec = dec_rows<MXFP4>;
  t[GGML_TYPE_MXFP4].amx_w_bytes = w_bytes;
  t[GGML_TYPE_MXFP4].amx_tile = tile_rows;
  // grouped IQ4_NL only (matmul's use_amx: ungrouped IQ4_NL keeps vec_dot's bits, whose lanes these tiles lack)
  t[GGML_TYPE_IQ4_NL].amx_dec = dec_rows<IQ4NL>;
  t[GGML_TYPE_IQ4_NL].amx_w_bytes = w_bytes;
  t[GGML_TYPE_IQ4_NL].amx_tile = tile_rows;
  t[GGML_TYPE_Q8_0].amx_pack = pack_q8_0;
  t[GGML_TYPE_Q8_0].amx_a_bytes = a_bytes;
}

}  // namespace pyllm
