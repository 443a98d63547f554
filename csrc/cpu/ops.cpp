#include "cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ggml/fp16.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace pyllm {

static void silu_free_expf16(float* t);

void rms_norm(const float* x, const float* w, float* y, int n, float eps) {
  double sum = 0;  // ggml accumulates the f32 squares in double (ggml_float)
  for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
  const float scale = 1.0f / std::sqrt((float)(sum / n) + eps);
  if (w) for (int i = 0; i < n; i++) y[i] = x[i] * scale * w[i];
  else for (int i = 0; i < n; i++) y[i] = x[i] * scale;
}

void l2_norm(const float* x, float* y, int n, float eps) {
  // as llama.cpp's build_gdn_l2_norm: rms_norm(x, eps/n) / sqrt(n) = x / sqrt(sum x^2 + eps)
  rms_norm(x, nullptr, y, n, eps / n);
  const float s = 1.0f / std::sqrt((float)n);
  for (int i = 0; i < n; i++) y[i] *= s;
}

void RopeCache::compute(int64_t pos, float* cs, float* sn) const {
  // theta_i = pos * base^(-2i/n_rot), built by repeated multiplication like ggml so the rounding matches
  // as ggml_rope_cache_init/rope_yarn (no YaRN): theta_extrap advances by theta_scale, then
  // theta = freq_scale * theta_extrap
  const float theta_scale = std::pow(base, -2.0f / n_rot);
  float theta_extrap = (float)pos;
  for (int i = 0; i < n_rot / 2; i++) {
    const float theta = freq_scale * theta_extrap;
    cs[i] = std::cos(theta);
    sn[i] = std::sin(theta);
    theta_extrap *= theta_scale;
  }
}

void rope_neox(float* x, int n_rot, const float* cs, const float* sn) {
  const int h = n_rot / 2;
  for (int i = 0; i < h; i++) {
    const float a = x[i], b = x[i + h];
    // ggml's rotate_pairs as GCC contracts it (-march=native): x0*cos - x1*sin -> fma(x0, cos, -(x1*sin))
    x[i] = std::fma(a, cs[i], -(b * sn[i]));
    x[i + h] = std::fma(a, sn[i], b * cs[i]);
  }
}

void rope_norm(float* x, int n_rot, const float* cs, const float* sn) {
  for (int i = 0; i < n_rot / 2; i++) {
    const float a = x[2 * i], b = x[2 * i + 1];
    // as rope_neox (checked bit-exact against upstream's output)
    x[2 * i] = std::fma(a, cs[i], -(b * sn[i]));
    x[2 * i + 1] = std::fma(a, sn[i], b * cs[i]);
  }
}

void softmax_inplace(float* x, int n) {
  // ggml soft_max: max, then ggml_vec_soft_max_f32 (ggml_v_expf in blocks of 16, expf tail, sum in
  // double), then scale by (float)(1/sum)
  float mx = -INFINITY;
  for (int i = 0; i < n; i++) mx = std::max(mx, x[i]);
  double sum = 0;
  int i = 0;
  for (; i + 15 < n; i += 16) {
    float t[16];
    for (int l = 0; l < 16; l++) t[l] = x[i + l] - mx;
    silu_free_expf16(t);
    for (int l = 0; l < 16; l++) x[i + l] = t[l];
    float a[8], b[4];
    for (int l = 0; l < 8; l++) a[l] = t[l + 8] + t[l];
    for (int l = 0; l < 4; l++) b[l] = a[l + 4] + a[l];
    sum += (double)((b[0] + b[2]) + (b[1] + b[3]));  // _mm512_reduce_add_ps
  }
  for (; i < n; i++) { const float v = std::exp(x[i] - mx); sum += (double)v; x[i] = v; }
  const float inv = (float)(1.0 / sum);
  for (int k = 0; k < n; k++) x[k] *= inv;
}

float gelu(float x) {
  // ggml_gelu_f32 as GCC contracts it: (0.5f*x) * (1 + tanhf((c*x) * fma(a*x, x, 1)))
  const float c = 0.79788456080286535587989211986876f;  // sqrt(2/pi)
  const float a = 0.044715f;
  return (0.5f * x) * (1.0f + std::tanh((c * x) * std::fma(a * x, x, 1.0f)));
}

// ---- ggml_v_expf / ggml_v_silu (AVX-512 flavour), scalar emulation and the real thing ----
static inline float v_expf_1(float x) {
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, std::fma(0x1.ffffecp-1f, b, 1.0f));
  if (std::fabs(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
  return std::ldexp(j, (int)n);  // _mm512_scalef_ps(j, n)
}
static inline float v_silu_1(float x) { return x / (1.0f + v_expf_1(0.0f - x)); }
static inline float silu_f32(float x) { return x / (1.0f + std::exp(-x)); }  // ggml_silu_f32 (tails)

#if defined(__x86_64__)
#define PYLLM_AVX512_TGT __attribute__((target("avx512f,avx512dq,fma")))
PYLLM_AVX512_TGT static inline __m512 v_expf_16(__m512 x) {
  const __m512 r = _mm512_set1_ps(0x1.8p23f);
  const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
  const __m512 n = _mm512_sub_ps(z, r);
  const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f), _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
  const __mmask16 d = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192), _CMP_GT_OQ);
  const __m512 u = _mm512_mul_ps(b, b);
  const __m512 j = _mm512_fmadd_ps(
      _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
                      _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
      u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0F)));
  const __m512 res = _mm512_scalef_ps(j, n);
  if (_mm512_kortestz(d, d)) return res;
  const __m512 zero = _mm512_setzero_ps();
  const __m512 alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, zero, _CMP_LE_OQ), _mm512_set1_ps(INFINITY), zero);
  return _mm512_mask_blend_ps(d, res, alt);
}
PYLLM_AVX512_TGT static inline __m512 v_silu_16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1);
  const __m512 neg_x = _mm512_sub_ps(_mm512_setzero_ps(), x);
  return _mm512_div_ps(x, _mm512_add_ps(one, v_expf_16(neg_x)));
}
PYLLM_AVX512_TGT static void expf16_avx512(float* t) { _mm512_storeu_ps(t, v_expf_16(_mm512_loadu_ps(t))); }
PYLLM_AVX512_TGT static int silu_avx512(const float* x, const float* g, float* y, int n) {
  int i = 0;
  for (; i + 15 < n; i += 16) {
    __m512 s = v_silu_16(_mm512_loadu_ps(x + i));
    if (g) s = _mm512_mul_ps(s, _mm512_loadu_ps(g + i));
    _mm512_storeu_ps(y + i, s);
  }
  return i;
}
static const bool kSiluAvx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                                __builtin_cpu_supports("fma");
// The same on AVX2 machines, 8 lanes at a time: the same fmas per lane, and scalef(j, n) as j * 2^n, one
// correctly rounded multiply as scalef and ldexp are, while every |n| <= 126 (2^n a normal float); a vector
// with a lane past that (|x| > ~87) takes v_expf_1 per lane. Without it the emulation's fmaf and ldexp were
// libm calls: a quarter of the 12M model's prompt time on a Zen 2.
#define PYLLM_AVX2_TGT __attribute__((target("avx2,fma")))
PYLLM_AVX2_TGT static inline __m256 v_expf_8(__m256 x) {
  const __m256 r = _mm256_set1_ps(0x1.8p23f);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
  const __m256 n = _mm256_sub_ps(z, r);
  const __m256 big = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), n), _mm256_set1_ps(126), _CMP_GT_OQ);
  if (_mm256_movemask_ps(big)) {
    alignas(32) float t[8];
    _mm256_store_ps(t, x);
    for (int l = 0; l < 8; l++) t[l] = v_expf_1(t[l]);
    return _mm256_load_ps(t);
  }
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f), _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 j = _mm256_fmadd_ps(
      _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                      _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
      u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0F)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(j, _mm256_castsi256_ps(e));
}
PYLLM_AVX2_TGT static void expf16_avx2(float* t) {
  _mm256_storeu_ps(t, v_expf_8(_mm256_loadu_ps(t)));
  _mm256_storeu_ps(t + 8, v_expf_8(_mm256_loadu_ps(t + 8)));
}
PYLLM_AVX2_TGT static int silu_avx2(const float* x, const float* g, float* y, int n) {
  int i = 0;
  for (; i + 15 < n; i += 16)  // ggml's blocks of 16 (the tail is silu_f32's), in halves: elementwise, same bits
    for (int o = i; o < i + 16; o += 8) {
      const __m256 v = _mm256_loadu_ps(x + o);
      __m256 s = _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1), v_expf_8(_mm256_sub_ps(_mm256_setzero_ps(), v))));
      if (g) s = _mm256_mul_ps(s, _mm256_loadu_ps(g + o));
      _mm256_storeu_ps(y + o, s);
    }
  return i;
}
static const bool kSiluAvx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif

static void silu_free_expf16(float* t) {
#if defined(__x86_64__)
  if (kSiluAvx512) { expf16_avx512(t); return; }
  if (kSiluAvx2) { expf16_avx2(t); return; }
#endif
  for (int l = 0; l < 16; l++) t[l] = v_expf_1(t[l]);
}

static void silu_impl(const float* x, const float* g, float* y, int n) {
  int i = 0;
#if defined(__x86_64__)
  if (kSiluAvx512) i = silu_avx512(x, g, y, n);
  else if (kSiluAvx2) i = silu_avx2(x, g, y, n);
#endif
  for (; i + 15 < n; i += 16)
    for (int l = 0; l < 16; l++) y[i + l] = g ? v_silu_1(x[i + l]) * g[i + l] : v_silu_1(x[i + l]);
  for (; i < n; i++) y[i] = g ? silu_f32(x[i]) * g[i] : silu_f32(x[i]);
}
void silu_row(const float* x, float* y, int n) { silu_impl(x, nullptr, y, n); }
void swiglu_row(const float* x, const float* g, float* y, int n) { silu_impl(x, g, y, n); }

static const uint16_t* gelu_table() {
  static const std::vector<uint16_t> t = [] {
    std::vector<uint16_t> v((1 << 16) + 1, 0);  // + 1: a 32-bit gather of the last entry stays inside
    for (int i = 0; i < (1 << 16); i++) v[i] = fp32_to_fp16(gelu(fp16_to_fp32((uint16_t)i)));
    return v;
  }();
  return t.data();
}
#if defined(__x86_64__)
// The scalar loop below, 16 at a time: vcvtps2ph rounds as fp32_to_fp16 (to nearest even; a NaN maps to
// a NaN entry either way), the table entries are gathered as 32-bit words and their low halves kept.
__attribute__((target("avx512f,avx512bw,f16c"))) static int geglu_avx512(const uint16_t* t, const float* x, const float* g,
                                                                          float* y, int n) {
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 xv = _mm512_loadu_ps(x + i), gv = _mm512_loadu_ps(g + i);
    const __m512i idx = _mm512_cvtepu16_epi32(_mm512_cvtps_ph(xv, _MM_FROUND_TO_NEAREST_INT));
    const __m512i e = _mm512_i32gather_epi32(idx, (const void*)t, 2);
    const __m512 tv = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(e));
    __m512 r = _mm512_mul_ps(tv, gv);
    r = _mm512_mask_mul_ps(r, _mm512_cmp_ps_mask(xv, _mm512_set1_ps(10.0f), _CMP_GE_OQ), xv, gv);
    r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(xv, _mm512_set1_ps(-10.0f), _CMP_LE_OQ), _mm512_setzero_ps());
    _mm512_storeu_ps(y + i, r);
  }
  return i;
}
static const bool kGegluAvx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                 __builtin_cpu_supports("f16c");
#endif
void geglu_row(const float* x, const float* g, float* y, int n) {
  const uint16_t* t = gelu_table();
  int i = 0;
#if defined(__x86_64__)
  if (kGegluAvx512) i = geglu_avx512(t, x, g, y, n);
#endif
  for (; i < n; i++) {
    if (x[i] <= -10.0f) y[i] = 0.0f;
    else if (x[i] >= 10.0f) y[i] = x[i] * g[i];
    else y[i] = fp16_to_fp32(t[fp32_to_fp16(x[i])]) * g[i];
  }
}

void weight_to_float(const Weight& w, float* out) {
  for (int64_t r = 0; r < w.ne[1] * w.ne[2]; r++) get_row(w, r, out + r * w.ne[0]);  // grouped rows too
}

}  // namespace pyllm
