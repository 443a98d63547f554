// ggml_vec_dot_f32 / ggml_vec_dot_f16 with the lane layout and reduction order of ggml's AVX-512
// build (4 accumulators x 16 lanes over blocks of 64, fused multiply-add, tree reduction, then the
// tail), so float results match upstream bit for bit. AVX-512 when the CPU has it, otherwise an
// exact scalar emulation.
#pragma once
#include <cstdint>

#include "ggml/fp16.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace pyllm {
float ggml_dot_f32(const float* x, const float* y, int n);
float ggml_dot_f16(const uint16_t* x, const uint16_t* y, int n);
// ggml_vec_mad_f32: y[i] = fma(x[i], v, y[i])
void ggml_mad_f32(float* y, const float* x, float v, int n);

#if defined(__x86_64__)
// The AVX-512 bodies of ggml_dot_f32 / ggml_dot_f16, inline so target-specific kernels (flash
// attention's per-key loop) can use them without a call; callers check the CPU first.
__attribute__((target("avx512f,f16c,fma"))) static inline float ggml_dot_f32_avx512(const float* x, const float* y, int n) {
  const int np = n & ~63;
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  for (int i = 0; i < np; i += 64)
    for (int j = 0; j < 4; j++) acc[j] = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16 * j), _mm512_loadu_ps(y + i + 16 * j), acc[j]);
  acc[0] = _mm512_add_ps(acc[0], acc[2]);
  acc[1] = _mm512_add_ps(acc[1], acc[3]);
  acc[0] = _mm512_add_ps(acc[0], acc[1]);
  float sum = _mm512_reduce_add_ps(acc[0]);
  for (int i = np; i < n; i++) sum = __builtin_fmaf(x[i], y[i], sum);
  return sum;
}
__attribute__((target("avx512f,f16c,fma"))) static inline float ggml_dot_f16_avx512(const uint16_t* x, const uint16_t* y, int n) {
  const int np = n & ~63;
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  for (int i = 0; i < np; i += 64)
    for (int j = 0; j < 4; j++) {
      const __m512 ax = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(x + i + 16 * j)));
      const __m512 ay = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(y + i + 16 * j)));
      acc[j] = _mm512_fmadd_ps(ax, ay, acc[j]);
    }
  acc[0] = _mm512_add_ps(acc[0], acc[2]);
  acc[1] = _mm512_add_ps(acc[1], acc[3]);
  acc[0] = _mm512_add_ps(acc[0], acc[1]);
  double sum = (double)_mm512_reduce_add_ps(acc[0]);
  for (int i = np; i < n; i++) sum += (double)(fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]));
  return (float)sum;
}
#endif
}  // namespace pyllm
