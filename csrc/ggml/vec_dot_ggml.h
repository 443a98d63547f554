// ggml_vec_dot_f32 / ggml_vec_dot_f16 with the lane layout and reduction order of ggml's AVX-512
// build (4 accumulators x 16 lanes over blocks of 64, fused multiply-add, tree reduction, then the
// tail), so float results match upstream bit for bit. AVX-512 when the CPU has it, else the same lanes
// on AVX2 + FMA, otherwise an exact scalar emulation.
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

// The same lanes on AVX2 (x86-64-v3 machines: Zen 2/3, Haswell..Alder Lake): each 16-lane accumulator is
// two 8-lane halves (lo: lanes 0-7, hi: 8-15) and the reduction is _mm512_reduce_add_ps's tree (hi + lo,
// then the 128-bit halves, then pairs), so the bits equal the AVX-512 bodies (and the scalar emulation,
// which costs a libm fmaf call per element where the build has no -mfma).
__attribute__((target("avx2,f16c,fma"))) static inline float reduce16_avx2(__m256 lo, __m256 hi) {
  const __m256 t = _mm256_add_ps(hi, lo);
  const __m128 u = _mm_add_ps(_mm256_extractf128_ps(t, 1), _mm256_castps256_ps128(t));
  const __m128 v = _mm_add_ps(u, _mm_movehl_ps(u, u));      // u0 + u2, u1 + u3
  return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));  // (u0 + u2) + (u1 + u3)
}
// acc[0..3] (16 lanes each, as lo/hi halves) -> (acc0 + acc2) + (acc1 + acc3), reduced
__attribute__((target("avx2,f16c,fma"))) static inline float tree_reduce16_avx2(const __m256* lo, const __m256* hi) {
  const __m256 l = _mm256_add_ps(_mm256_add_ps(lo[0], lo[2]), _mm256_add_ps(lo[1], lo[3]));
  const __m256 h = _mm256_add_ps(_mm256_add_ps(hi[0], hi[2]), _mm256_add_ps(hi[1], hi[3]));
  return reduce16_avx2(l, h);
}
__attribute__((target("avx2,f16c,fma"))) static inline float ggml_dot_f32_avx2(const float* x, const float* y, int n) {
  const int np = n & ~63;
  __m256 lo[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  __m256 hi[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int i = 0; i < np; i += 64)
    for (int j = 0; j < 4; j++) {
      lo[j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16 * j), _mm256_loadu_ps(y + i + 16 * j), lo[j]);
      hi[j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16 * j + 8), _mm256_loadu_ps(y + i + 16 * j + 8), hi[j]);
    }
  float sum = tree_reduce16_avx2(lo, hi);
  for (int i = np; i < n; i++) sum = __builtin_fmaf(x[i], y[i], sum);
  return sum;
}
__attribute__((target("avx2,f16c,fma"))) static inline float ggml_dot_f16_avx2(const uint16_t* x, const uint16_t* y, int n) {
  const int np = n & ~63;
  __m256 lo[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  __m256 hi[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int i = 0; i < np; i += 64)
    for (int j = 0; j < 4; j++) {
      const int o = i + 16 * j;
      lo[j] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(x + o))),
                              _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(y + o))), lo[j]);
      hi[j] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(x + o + 8))),
                              _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(y + o + 8))), hi[j]);
    }
  double sum = (double)tree_reduce16_avx2(lo, hi);
  for (int i = np; i < n; i++) sum += (double)(fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]));
  return (float)sum;
}
#endif
}  // namespace pyllm
