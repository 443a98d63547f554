// AVX2 + FMA + F16C kernels (the shared quantized bodies are in quants_simd.inc.h).
#include <immintrin.h>

#include <type_traits>

#include "ggml/fp16.h"

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

}  // namespace x86_avx2

void quants_override_avx2(type_traits* t) {
  using namespace x86_avx2;
  install_quant_kernels(t);
  // Q2_K, Q3_K, IQ1-3, MXFP4; Q2_K in the repacked order of llama.cpp's AVX-512 build here too, so an AVX2
  // machine gives the AVX-512 machines' bits (and llama.cpp's fixtures, made on one): with the plain order the
  // IQ1_M / Q2_K / IQ1_S files were 0.065-0.095 nats off them on a Zen 2
  install_lowbit_kernels(t, true);
  install_gemm_tiles(t);
  // F32/F16 keep the table's ggml_vec_dot_f32/_f16 (vec_dot_ggml.h): same bits at every level
  t[GGML_TYPE_BF16].vec_dot = vd_bf16;
}

}  // namespace pyllm
