#include "cpu/ops.h"

#include <algorithm>
#include <cmath>

namespace pyllm {

#if defined(PYLLM_X86)
namespace x86_avx512 {
void silu_mul(float* g, const float* u, int64_t n);
void silu_inplace(float* x, int64_t n);
double exp_sub_sum(float* x, int64_t n, float mx);
}  // namespace x86_avx512
static const bool kAvx512 = __builtin_cpu_supports("avx512f");
#endif

void silu_mul(float* g, const float* u, int64_t n) {
#if defined(PYLLM_X86)
  if (kAvx512) { x86_avx512::silu_mul(g, u, n); return; }
#endif
  for (int64_t i = 0; i < n; i++) g[i] = silu(g[i]) * u[i];
}

void silu_inplace(float* x, int64_t n) {
#if defined(PYLLM_X86)
  if (kAvx512) { x86_avx512::silu_inplace(x, n); return; }
#endif
  for (int64_t i = 0; i < n; i++) x[i] = silu(x[i]);
}

double exp_sub_sum(float* x, int64_t n, float mx) {
#if defined(PYLLM_X86)
  if (kAvx512) return x86_avx512::exp_sub_sum(x, n, mx);
#endif
  double sum = 0;
  for (int64_t i = 0; i < n; i++) { x[i] = std::exp(x[i] - mx); sum += x[i]; }
  return sum;
}

void rms_norm(const float* x, const float* w, float* y, int n, float eps) {
  double sum = 0;  // ggml accumulates the sum of squares in double (ggml_float)
  for (int i = 0; i < n; i++) sum += (double)x[i] * x[i];
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
  const float theta_scale = std::pow(base, -2.0f / n_rot);
  float theta = (float)pos * freq_scale;
  for (int i = 0; i < n_rot / 2; i++) {
    cs[i] = std::cos(theta);
    sn[i] = std::sin(theta);
    theta *= theta_scale;
  }
}

void rope_neox(float* x, int n_rot, const float* cs, const float* sn) {
  const int h = n_rot / 2;
  for (int i = 0; i < h; i++) {
    const float a = x[i], b = x[i + h];
    x[i] = a * cs[i] - b * sn[i];
    x[i + h] = a * sn[i] + b * cs[i];
  }
}

void rope_norm(float* x, int n_rot, const float* cs, const float* sn) {
  for (int i = 0; i < n_rot / 2; i++) {
    const float a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * cs[i] - b * sn[i];
    x[2 * i + 1] = a * sn[i] + b * cs[i];
  }
}

void softmax_inplace(float* x, int n) {
  float mx = -INFINITY;
  for (int i = 0; i < n; i++) mx = std::max(mx, x[i]);
  const double sum = exp_sub_sum(x, n, mx);
  const float inv = (float)(1.0 / sum);
  for (int i = 0; i < n; i++) x[i] *= inv;
}

float gelu(float x) {
  const float c = 0.79788456080286535587989211986876f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + std::tanh(c * x * (1.0f + 0.044715f * x * x)));
}

void weight_to_float(const Weight& w, float* out) {
  const auto& tr = get_type_traits(w.type);
  for (int64_t r = 0; r < w.ne[1] * w.ne[2]; r++) tr.to_float(w.data + r * w.nb1, out + r * w.ne[0], w.ne[0]);
}

}  // namespace pyllm
