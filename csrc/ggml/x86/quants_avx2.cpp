// AVX2 + FMA + F16C kernels (the shared quantized bodies are in quants_simd.inc.h).
#include <immintrin.h>

#include <cstring>
#include <type_traits>
#include <vector>

#include "ggml/fp16.h"
#include "ggml/repack.h"

namespace pyllm {
namespace x86_avx2 {
// lane k = sum of 4 u8*s8 products; maddubs saturates only beyond 2*255*128, out of our ranges
static inline __m256i dot_u8s8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
static inline __m256i madd16_acc(__m256i acc, __m256i a, __m256i b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }
}  // namespace x86_avx2
}  // namespace pyllm

#define SIMD_NS x86_avx2
#include "ggml/x86/quants_simd.inc.h"
#include "ggml/x86/quants_lowbit_simd.inc.h"

namespace pyllm {
namespace x86_avx2 {

#include "ggml/x86/gemm_avx2.inc.h"
#include "ggml/x86/x16_avx2.inc.h"
#include "ggml/x86/x16_b32_avx2.inc.h"

static void vd_f32(int n, float* s, const void* vx, const void* vy) {
  const float* x = (const float*)vx; const float* y = (const float*)vy;
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
  }
  float t = hsum8(_mm256_add_ps(a0, a1));
  for (; i < n; i++) t += x[i] * y[i];
  *s = t;
}

static void vd_f16(int n, float* s, const void* vx, const void* vy) {
  const uint16_t* x = (const uint16_t*)vx; const uint16_t* y = (const uint16_t*)vy;
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(x + i))),
                         _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(y + i))), a0);
    a1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(x + i + 8))),
                         _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(y + i + 8))), a1);
  }
  float t = hsum8(_mm256_add_ps(a0, a1));
  for (; i < n; i++) t += fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]);
  *s = t;
}

static inline __m256 bf16x8(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}
static void vd_bf16(int n, float* s, const void* vx, const void* vy) {
  const uint16_t* x = (const uint16_t*)vx; const uint16_t* y = (const uint16_t*)vy;
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(bf16x8(x + i), bf16x8(y + i), a0);
    a1 = _mm256_fmadd_ps(bf16x8(x + i + 8), bf16x8(y + i + 8), a1);
  }
  float t = hsum8(_mm256_add_ps(a0, a1));
  for (; i < n; i++) t += bf16_to_fp32(x[i]) * bf16_to_fp32(y[i]);
  *s = t;
}

// = ref quantize_row_q8_K, for the K-quants' activations (the reference was a fifth of a 12M model's
// prompt time on a Zen 2). The same bytes, as act_quant_avx512.inc.h explains: max and abs are exact,
// iscale * x is the same single multiply, cvtps_epi32 rounds to nearest even as nearest_int does, and
// the saturating packs only narrow values already in [-127, 127].
static void quantize_q8_K(const float* x, void* vy, int64_t n) {
  block_q8_K* y = (block_q8_K*)vy;
  const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < QK_K; k += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + k), absm));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    const float amax = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
    if (!amax) { std::memset(&y[i], 0, sizeof(block_q8_K)); continue; }
    float max = 0;  // the first element of largest magnitude, with its sign (the reference's strict >)
    for (int k = 0; k < QK_K; k += 8) {
      const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + k), absm), _mm256_set1_ps(amax), _CMP_EQ_OQ));
      if (hit) { max = x[k + __builtin_ctz(hit)]; break; }
    }
    const float iscale = -127.f / max;
    const __m256 s = _mm256_set1_ps(iscale);
    const __m256i c127 = _mm256_set1_epi32(127);
    for (int k = 0; k < 16; k++) {  // 16 values = one bsums group
      const __m256i q0 = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16 * k), s)), c127);
      const __m256i q1 = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16 * k + 8), s)), c127);
      const __m128i w0 = _mm_packs_epi32(_mm256_castsi256_si128(q0), _mm256_extracti128_si256(q0, 1));
      const __m128i w1 = _mm_packs_epi32(_mm256_castsi256_si128(q1), _mm256_extracti128_si256(q1, 1));
      _mm_storeu_si128((__m128i*)(y[i].qs + 16 * k), _mm_packs_epi16(w0, w1));
      y[i].bsums[k] = (int16_t)hsum8i(_mm256_add_epi32(q0, q1));
    }
    y[i].d = 1 / iscale;
  }
}

}  // namespace x86_avx2

void quants_override_avx2(type_traits* t) {
  using namespace x86_avx2;
  install_quant_kernels(t);
  // Q2_K, Q3_K, IQ1-3, MXFP4; Q2_K in the repacked order of llama.cpp's AVX-512 build here too, so an AVX2
  // machine gives the AVX-512 machines' bits (and llama.cpp's fixtures, made on one): with the plain order the
  // IQ1_M / Q2_K / IQ1_S files were 0.065-0.095 nats off them on a Zen 2
  install_lowbit_kernels(t, true);
  install_gemm_tiles(t);
  install_x16_kernels(t);
  install_x16_b32_kernels(t);
  t[GGML_TYPE_Q8_K].from_float = quantize_q8_K;
  t[GGML_TYPE_Q8_K].from_float_act = quantize_q8_K;
  // F32/F16 keep the table's ggml_vec_dot_f32/_f16 (vec_dot_ggml.h): same bits at every level
  t[GGML_TYPE_BF16].vec_dot = vd_bf16;
}

}  // namespace pyllm
