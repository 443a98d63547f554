#include "cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/ops.h"
#include "ggml/fp16.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace pyllm {

#if defined(__x86_64__)
__attribute__((target("avx2,fma,f16c"))) static float dot_f16c(const float* a, const uint16_t* b, int n) {
  __m256 acc = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 bb = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(b + i)));
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), bb, acc);
  }
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_hadd_ps(s, s); s = _mm_hadd_ps(s, s);
  float r = _mm_cvtss_f32(s);
  for (; i < n; i++) r += a[i] * fp16_to_fp32(b[i]);
  return r;
}
__attribute__((target("avx2,fma,f16c"))) static void axpy_f16c(float* y, const uint16_t* x, float a, int n) {
  __m256 va = _mm256_set1_ps(a);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 xx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(x + i)));
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, xx, _mm256_loadu_ps(y + i)));
  }
  for (; i < n; i++) y[i] += a * fp16_to_fp32(x[i]);
}
__attribute__((target("avx2,f16c"))) static void store_f16c(uint16_t* dst, const float* src, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i*)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; i++) dst[i] = fp32_to_fp16(src[i]);
}
static const bool kHasF16C = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
static const bool kHasF16C = false;
#endif

#if defined(__x86_64__)
__attribute__((target("avx2,f16c"))) static void f16_row_f16c(const uint16_t* x, float* y, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(x + i))));
  for (; i < n; i++) y[i] = fp16_to_fp32(x[i]);
}
__attribute__((target("avx2,fma"))) static float dot_f32_avx2(const float* a, const float* b, int n) {
  __m256 acc = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_hadd_ps(s, s); s = _mm_hadd_ps(s, s);
  float r = _mm_cvtss_f32(s);
  for (; i < n; i++) r += a[i] * b[i];
  return r;
}
__attribute__((target("avx2,fma"))) static void axpy_f32_avx2(float* y, const float* x, float a, int n) {
  const __m256 va = _mm256_set1_ps(a);
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; i++) y[i] += a * x[i];
}
#endif

void f16_to_f32_row(const uint16_t* x, float* y, int n) {
#if defined(__x86_64__)
  if (kHasF16C) { f16_row_f16c(x, y, n); return; }
#endif
  for (int i = 0; i < n; i++) y[i] = fp16_to_fp32(x[i]);
}
float dot_f32(const float* a, const float* b, int n) {
#if defined(__x86_64__)
  if (kHasF16C) return dot_f32_avx2(a, b, n);
#endif
  float r = 0; for (int i = 0; i < n; i++) r += a[i] * b[i]; return r;
}
void axpy_f32(float* y, const float* x, float a, int n) {
#if defined(__x86_64__)
  if (kHasF16C) { axpy_f32_avx2(y, x, a, n); return; }
#endif
  for (int i = 0; i < n; i++) y[i] += a * x[i];
}

float dot_f32_f16(const float* a, const uint16_t* b, int n) {
#if defined(__x86_64__)
  if (kHasF16C) return dot_f16c(a, b, n);
#endif
  float r = 0; for (int i = 0; i < n; i++) r += a[i] * fp16_to_fp32(b[i]); return r;
}
void axpy_f16(float* y, const uint16_t* x, float a, int n) {
#if defined(__x86_64__)
  if (kHasF16C) { axpy_f16c(y, x, a, n); return; }
#endif
  for (int i = 0; i < n; i++) y[i] += a * fp16_to_fp32(x[i]);
}
void store_f16(uint16_t* dst, const float* src, int n) {
#if defined(__x86_64__)
  if (kHasF16C) { store_f16c(dst, src, n); return; }
#endif
  for (int i = 0; i < n; i++) dst[i] = fp32_to_fp16(src[i]);
}

void attention(ThreadPool& tp, Memory& mem, int il, const ForwardIn& in, const float* q, const float* k,
               const float* v, float* out, const AttnParams& p) {
  const int n = in.n;
  const int64_t nk = (int64_t)p.Hkv * p.Dk, nv = (int64_t)p.Hkv * p.Dv;
  for (int r = 0; r < n; r++) {
    if (in.pos[r] >= mem.n_ctx_seq) throw std::runtime_error("position " + std::to_string(in.pos[r]) + " beyond the context size");
    store_f16(mem.k_ptr(il, in.seq[r], in.pos[r]), k + r * nk, (int)nk);
    store_f16(mem.v_ptr(il, in.seq[r], in.pos[r]), v + r * nv, (int)nv);
  }
  // one task per (row, kv head): the K/V rows of that kv head are converted once and shared by the
  // `ratio` query heads of the group (GQA)
  const int ratio = p.H / p.Hkv;
  const int64_t total = (int64_t)n * p.Hkv;
  auto body = [&](int64_t t0, int64_t t1) {
    std::vector<float> sc, kf(p.Dk), vf(p.Dv);
    for (int64_t t = t0; t < t1; t++) {
      const int r = (int)(t / p.Hkv), kvh = (int)(t % p.Hkv);
      const int seq = in.seq[r], pos = in.pos[r];
      const int lo = p.n_swa > 0 ? std::max(0, pos - p.n_swa + 1) : 0;
      const int np = pos - lo + 1;
      const float* q0 = q + (int64_t)r * p.H * p.Dk + (int64_t)kvh * ratio * p.Dk;  // [ratio][Dk]
      sc.resize((size_t)ratio * np);  // [ratio][np]
      for (int j = lo; j <= pos; j++) {
        f16_to_f32_row(mem.k_ptr(il, seq, j) + (int64_t)kvh * p.Dk, kf.data(), p.Dk);
        for (int g = 0; g < ratio; g++) sc[(size_t)g * np + (j - lo)] = dot_f32(q0 + (int64_t)g * p.Dk, kf.data(), p.Dk) * p.scale;
      }
      float* o0 = out + (int64_t)r * p.H * p.Dv + (int64_t)kvh * ratio * p.Dv;  // [ratio][Dv]
      for (int g = 0; g < ratio; g++) {
        float* sg = sc.data() + (size_t)g * np;
        if (p.softcap > 0) for (int j = 0; j < np; j++) sg[j] = p.softcap * std::tanh(sg[j] / p.softcap);
        float mx = -INFINITY;
        for (int j = 0; j < np; j++) mx = std::max(mx, sg[j]);
        const float inv = (float)(1.0 / exp_sub_sum(sg, np, mx));
        for (int j = 0; j < np; j++) sg[j] *= inv;
        std::fill(o0 + (int64_t)g * p.Dv, o0 + (int64_t)(g + 1) * p.Dv, 0.f);
      }
      for (int j = lo; j <= pos; j++) {
        f16_to_f32_row(mem.v_ptr(il, seq, j) + (int64_t)kvh * p.Dv, vf.data(), p.Dv);
        for (int g = 0; g < ratio; g++) axpy_f32(o0 + (int64_t)g * p.Dv, vf.data(), sc[(size_t)g * np + (j - lo)], p.Dv);
      }
    }
  };
  // each (row, kv head) is independent; dispatch only when there is enough work
  int64_t work = 0;
  for (int r = 0; r < n; r++) work += in.pos[r] + 1;
  if (work * p.H * p.Dk < 65536) body(0, total); else tp.parallel_for(total, body);
}

}  // namespace pyllm
