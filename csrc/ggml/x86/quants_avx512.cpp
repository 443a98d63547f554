// AVX-512 (F/BW/VL/DQ + VNNI + BF16) kernels. Quantized dots use VNNI dpbusd on 256-bit vectors
// (one 32-byte block per op; same integers as the AVX2 path); float dots use 512-bit vectors.
// vec_dot_k (one weight row, k <= 8 activation rows) comes with every quantized kernel (both levels).
#include <immintrin.h>

#include "ggml/fp16.h"

// GCC 12's own avx512fintrin.h (_mm512_reduce_add_ps, masked cvtph) trips these on _mm*_undefined_*.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace pyllm {
namespace x86_avx512 {
static inline __m256i dot_u8s8(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
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

}  // namespace x86_avx512

void quants_override_avx512(type_traits* t) {
  using namespace x86_avx512;
  install_quant_kernels(t);
  install_lowbit_kernels(t, true);  // Q2_K, Q3_K, IQ1-3, MXFP4
  // F32/F16 keep the table's ggml_vec_dot_f32/_f16 (vec_dot_ggml.h): same bits at every level
  t[GGML_TYPE_BF16].vec_dot = vd_bf16;
  t[GGML_TYPE_F16].to_float = f16_to_float;
  t[GGML_TYPE_Q8_0].to_float = q8_0_to_float;
}

}  // namespace pyllm
