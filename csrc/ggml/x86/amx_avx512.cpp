// AMX-INT8 prefill for Q4_K weights (llama.cpp's repacked-Q4_K arithmetic, dot_q4_K_rp's): 16 weight rows
// x 32 tokens per call. Bits: per (row, token) and super-block the integers
//   isum = sum_sb scale_sb * (q4 . y8 over the 32 elements of sub-block sb)
//   imin = sum_sb min_sb * (bsum_2sb + bsum_2sb+1)
// are exact whatever computes them. TDPBUSD multiplies unsigned bytes by signed bytes, so the 6-bit
// scale is split, scale = 8 * hi + lo (hi, lo < 8): the weight bytes q * hi and q * lo (<= 105) give two
// K = 256 dot products with the token's bytes, isum = 8 * hi-dot + lo-dot; imin is 4 vpdpwssd of the
// (min_sb, min_sb+1) pairs with the tokens' (sum_sb, sum_sb+1) pairs. The float side is the rp kernels'
// per pair: acc = fma(isum, d * y.d, acc), accm = fma(imin, dmin * y.d, accm), acc - accm. So every pair
// equals vec_dot_rp (tests/test_matmul_batch.py compares them bit for bit).
//
// Layouts (decoded / packed once per matmul):
//   weight panel, 16 rows: [nb][2: q*hi, q*lo][4 chunks of 64][16 rows][64] u8, int32 min pairs
//     [nb][4][16 rows], float d [nb][16], float dmin [nb][16]
//   activation panel, 32 tokens as two halves of 16 (Q8_K rows): [nb][half][4 chunks][16 k4][16 tok][4]
//     int8 (TDPBUSD's B layout), int32 sub-block-sum pairs [nb][half][4][16 tok], float y.d [nb][32 tok]
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "ggml/fp16.h"
#include "ggml/quants.h"
#include "ggml/types.h"

namespace pyllm {
namespace {

constexpr int R = kAmxRows, T = kAmxCols, H = 16;  // 16 rows x 32 tokens, B tiles of 16 tokens
static_assert(R == 16 && T == 2 * H, "the tile config below is written for 16 x (2 x 16)");
constexpr size_t kWq = 2 * 4 * R * 64;  // weight bytes of one super-block of 16 rows
constexpr size_t kAq = 4 * 16 * H * 4;  // activation bytes of one super-block of 16 tokens

size_t w_bytes(int64_t K) { return (size_t)(K / QK_K) * (kWq + 4 * R * 4 + 2 * R * 4); }
size_t a_bytes(int64_t K) { return (size_t)(K / QK_K) * (2 * kAq + 2 * 4 * H * 4 + T * 4); }

void dec_q4_K(int K, const void* vw, size_t ldw, void* out) {
  const int nb = K / QK_K;
  uint8_t* q = (uint8_t*)out;
  int32_t* mn = (int32_t*)(q + (size_t)nb * kWq);
  float* d = (float*)(mn + (size_t)nb * 4 * R);
  float* dm = d + (size_t)nb * R;
  for (int r = 0; r < R; r++) {
    const block_q4_K* x = (const block_q4_K*)((const uint8_t*)vw + r * ldw);
    for (int i = 0; i < nb; i++) {
      uint8_t* o = q + (size_t)i * kWq;
      uint8_t m[8];
      for (int sb = 0; sb < 8; sb++) {
        uint8_t sc;
        get_scale_min_k4(sb, x[i].scales, &sc, &m[sb]);
        const __m256i v = _mm256_loadu_si256((const __m256i*)(x[i].qs + 32 * (sb / 2)));
        const __m256i nib = _mm256_and_si256(sb % 2 ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(15));
        // element 32 sb + l is byte 32 (sb % 2) + l of chunk sb / 2
        const size_t at = ((size_t)(sb / 2) * R + r) * 64 + 32 * (sb % 2);
        _mm256_storeu_si256((__m256i*)(o + at), _mm256_mullo_epi16(nib, _mm256_set1_epi16(sc >> 3)));
        _mm256_storeu_si256((__m256i*)(o + 4 * R * 64 + at), _mm256_mullo_epi16(nib, _mm256_set1_epi16(sc & 7)));
      }
      for (int p = 0; p < 4; p++) mn[(i * 4 + p) * R + r] = (int32_t)m[2 * p] | (int32_t)m[2 * p + 1] << 16;
      d[i * R + r] = fp16_to_fp32(x[i].d);
      dm[i * R + r] = fp16_to_fp32(x[i].dmin);
    }
  }
}

// Each 64-byte row of a B tile is 4 bytes of each of 16 tokens: one masked gather (tokens past n: zeros).
__attribute__((target("avx512f,avx512bw"))) void pack_q8_K(const void* acts, size_t row_bytes, int n, int64_t K, void* panel) {
  const int nb = (int)(K / QK_K);
  int8_t* q = (int8_t*)panel;
  int32_t* ss = (int32_t*)(q + (size_t)nb * 2 * kAq);
  float* yd = (float*)(ss + (size_t)nb * 2 * 4 * H);
  const __m512i tok = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32((int)row_bytes));
  for (int hf = 0; hf < 2; hf++) {
    const int nt = std::max(0, std::min(H, n - hf * H));
    const __mmask16 m = (__mmask16)((1u << nt) - 1);
    const uint8_t* base = (const uint8_t*)acts + (size_t)hf * H * row_bytes;
    for (int i = 0; i < nb; i++) {
      const uint8_t* blk = base + (size_t)i * sizeof(block_q8_K);
      const uint8_t* qs = blk + offsetof(block_q8_K, qs);
      int8_t* o = q + ((size_t)i * 2 + hf) * kAq;
      for (int k4 = 0; k4 < 64; k4++)  // chunk k4 / 16, row k4 % 16 of its B tile
        _mm512_storeu_si512((void*)(o + (size_t)k4 * H * 4),
                           _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, tok, (const void*)(qs + 4 * k4), 1));
      int32_t* sp = ss + (size_t)(i * 2 + hf) * 4 * H;
      float* ydp = yd + (size_t)i * T + hf * H;
      for (int t = 0; t < H; t++) {
        if (t >= nt) {
          for (int p = 0; p < 4; p++) sp[p * H + t] = 0;
          ydp[t] = 0.0f;
          continue;
        }
        const block_q8_K* y = (const block_q8_K*)(blk + (size_t)t * row_bytes);
        for (int p = 0; p < 4; p++) {
          const int s0 = y->bsums[4 * p] + y->bsums[4 * p + 1], s1 = y->bsums[4 * p + 2] + y->bsums[4 * p + 3];
          sp[p * H + t] = (int32_t)((uint32_t)(uint16_t)s0 | (uint32_t)(uint16_t)s1 << 16);
        }
        ydp[t] = y->d;
      }
    }
  }
}

struct alignas(64) TileCfg {
  uint8_t palette = 1, start = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// tiles 0-3: C (hi, lo) x (token half 0, 1), 16 x 16 int32; 4-5: A (hi, lo), 16 rows x 64 bytes; 6-7: B
// Once per thread: the configuration stays loaded (LDTILECFG/TILERELEASE per call cost more than a small
// tile's work); nothing else in the process configures tiles.
__attribute__((target("amx-tile,amx-int8"))) void tile_config() {
  thread_local bool done = false;
  if (done) return;
  done = true;
  TileCfg c;
  for (int i = 0; i < 8; i++) { c.rows[i] = 16; c.colsb[i] = 64; }
  _tile_loadconfig(&c);
}

__attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512vnni,fma"))) void tile_q4_K(
    int K, const void* wpanel, const void* apanel, float* C, size_t ldc, int nc) {
  const int nb = K / QK_K;
  const uint8_t* wq = (const uint8_t*)wpanel;
  const int32_t* mn = (const int32_t*)(wq + (size_t)nb * kWq);
  const float* d = (const float*)(mn + (size_t)nb * 4 * R);
  const float* dm = d + (size_t)nb * R;
  const int8_t* aq = (const int8_t*)apanel;
  const int32_t* ss = (const int32_t*)(aq + (size_t)nb * 2 * kAq);
  const float* yd = (const float*)(ss + (size_t)nb * 2 * 4 * H);
  const int nh = nc > H ? 2 : 1;  // token halves in use
  tile_config();
  alignas(64) float acc[2][R][H], accm[2][R][H];
  std::memset(acc, 0, sizeof acc);
  std::memset(accm, 0, sizeof accm);
  alignas(64) int32_t cb[4][R * H];
  // the dots of super-block i into C tiles 0-3 (stored by the caller of the next step)
  auto issue = [&](int i) {
    const uint8_t* w = wq + (size_t)i * kWq;
    const int8_t* a = aq + (size_t)i * 2 * kAq;
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    for (int c = 0; c < 4; c++) {
      _tile_loadd(4, w + (size_t)c * R * 64, 64);
      _tile_loadd(5, w + (size_t)(4 + c) * R * 64, 64);
      _tile_loadd(6, a + (size_t)c * 16 * H * 4, 64);
      _tile_dpbusd(0, 4, 6); _tile_dpbusd(1, 5, 6);
      if (nh == 2) {
        _tile_loadd(7, a + kAq + (size_t)c * 16 * H * 4, 64);
        _tile_dpbusd(2, 4, 7); _tile_dpbusd(3, 5, 7);
      }
    }
  };
  issue(0);
  for (int i = 0; i < nb; i++) {
    _tile_stored(0, cb[0], 64);
    _tile_stored(1, cb[1], 64);
    if (nh == 2) { _tile_stored(2, cb[2], 64); _tile_stored(3, cb[3], 64); }
    if (i + 1 < nb) issue(i + 1);  // the tile unit works on the next super-block during the vector part below
    const int32_t* mi = mn + (size_t)i * 4 * R;
    for (int hf = 0; hf < nh; hf++) {
      const __m512 y = _mm512_loadu_ps(yd + i * T + hf * H);
      const int32_t* s4 = ss + (size_t)(i * 2 + hf) * 4 * H;
      const __m512i sv0 = _mm512_loadu_si512(s4), sv1 = _mm512_loadu_si512(s4 + H), sv2 = _mm512_loadu_si512(s4 + 2 * H),
                    sv3 = _mm512_loadu_si512(s4 + 3 * H);
      for (int r = 0; r < R; r++) {
        const __m512i isum = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(cb[2 * hf] + r * H), 3),
                                              _mm512_load_si512(cb[2 * hf + 1] + r * H));
        __m512i imin = _mm512_dpwssd_epi32(_mm512_setzero_si512(), sv0, _mm512_set1_epi32(mi[r]));
        imin = _mm512_dpwssd_epi32(imin, sv1, _mm512_set1_epi32(mi[R + r]));
        imin = _mm512_dpwssd_epi32(imin, sv2, _mm512_set1_epi32(mi[2 * R + r]));
        imin = _mm512_dpwssd_epi32(imin, sv3, _mm512_set1_epi32(mi[3 * R + r]));
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

// CPUID: AMX-TILE and AMX-INT8; XCR0: the OS saves tile state; then ask Linux for it (per process)
bool amx_ready() {
  if (const char* e = std::getenv("PYLLM_AMX"); e && *e == '0') return false;
  unsigned a, b, c, dx;
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(dx) : "a"(7), "c"(0));
  if (!(dx & (1u << 24)) || !(dx & (1u << 25))) return false;
  unsigned lo, hi;
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(dx) : "a"(1), "c"(0));
  if (!(c & (1u << 27))) return false;  // OSXSAVE
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  (void)hi;
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  return true;
#else
  return (lo & (3u << 17)) == (3u << 17);
#endif
}

}  // namespace

bool amx_available() {
  static const bool ok = amx_ready();
  return ok;
}

void quants_override_amx(type_traits* t) {
  if (!amx_available()) return;
  t[GGML_TYPE_Q4_K].amx_dec = dec_q4_K;
  t[GGML_TYPE_Q4_K].amx_w_bytes = w_bytes;
  t[GGML_TYPE_Q4_K].amx_tile = tile_q4_K;
  t[GGML_TYPE_Q8_K].amx_pack = pack_q8_K;
  t[GGML_TYPE_Q8_K].amx_a_bytes = a_bytes;
}

}  // namespace pyllm
