// Scalar reference quantizers (ggml's quantize_row_*_ref semantics, no importance matrix, with its
// rounding helpers) and the x86-rounding activation quantizers. Dequantize: quants.cpp.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "ggml/quants.h"
#include "ggml/quants_ref_util.h"

namespace pyllm {
namespace ref {

// ---------------------------------------------------------------- quantize: 32-blocks

// index of the element with the largest |x| (first one on ties), as ggml scans
static inline float signed_absmax(const float* x, int n, float* amax_out = nullptr) {
  float amax = 0, max = 0;
  for (int j = 0; j < n; j++) {
    const float ax = std::fabs(x[j]);
    if (ax > amax) { amax = ax; max = x[j]; }
  }
  if (amax_out) *amax_out = amax;
  return max;
}

void quantize_row_q4_0(const float* x, void* vy, int64_t n) {
  block_q4_0* y = (block_q4_0*)vy;
  for (int64_t i = 0; i < n / QK4_0; i++, x += QK4_0) {
    const float max = signed_absmax(x, QK4_0);
    const float d = max / -8;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f2h(d);
    for (int j = 0; j < 16; j++) {
      const uint8_t a = (uint8_t)std::min(15, (int)(int8_t)(x[j] * id + 8.5f));
      const uint8_t b = (uint8_t)std::min(15, (int)(int8_t)(x[j + 16] * id + 8.5f));
      y[i].qs[j] = a | (b << 4);
    }
  }
}

void quantize_row_q4_1(const float* x, void* vy, int64_t n) {
  block_q4_1* y = (block_q4_1*)vy;
  for (int64_t i = 0; i < n / QK4_1; i++, x += QK4_1) {
    float mn = INFINITY, mx = -INFINITY;
    for (int j = 0; j < QK4_1; j++) { mn = std::min(mn, x[j]); mx = std::max(mx, x[j]); }
    const float d = (mx - mn) / 15;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f2h(d);
    y[i].m = f2h(mn);
    for (int j = 0; j < 16; j++) {
      const uint8_t a = (uint8_t)std::min(15, (int)(int8_t)((x[j] - mn) * id + 0.5f));
      const uint8_t b = (uint8_t)std::min(15, (int)(int8_t)((x[j + 16] - mn) * id + 0.5f));
      y[i].qs[j] = a | (b << 4);
    }
  }
}

void quantize_row_q5_0(const float* x, void* vy, int64_t n) {
  block_q5_0* y = (block_q5_0*)vy;
  for (int64_t i = 0; i < n / QK5_0; i++, x += QK5_0) {
    const float max = signed_absmax(x, QK5_0);
    const float d = max / -16;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f2h(d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
      const uint8_t a = (uint8_t)std::min(31, (int)(int8_t)(x[j] * id + 16.5f));
      const uint8_t b = (uint8_t)std::min(31, (int)(int8_t)(x[j + 16] * id + 16.5f));
      y[i].qs[j] = (a & 0xF) | ((b & 0xF) << 4);
      qh |= (uint32_t)((a & 0x10) >> 4) << j;
      qh |= (uint32_t)((b & 0x10) >> 4) << (j + 16);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}

void quantize_row_q5_1(const float* x, void* vy, int64_t n) {
  block_q5_1* y = (block_q5_1*)vy;
  for (int64_t i = 0; i < n / QK5_1; i++, x += QK5_1) {
    float mn = INFINITY, mx = -INFINITY;
    for (int j = 0; j < QK5_1; j++) { mn = std::min(mn, x[j]); mx = std::max(mx, x[j]); }
    const float d = (mx - mn) / 31;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f2h(d);
    y[i].m = f2h(mn);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
      const uint8_t a = (uint8_t)(int8_t)((x[j] - mn) * id + 0.5f);
      const uint8_t b = (uint8_t)(int8_t)((x[j + 16] - mn) * id + 0.5f);
      y[i].qs[j] = (a & 0xF) | ((b & 0xF) << 4);
      qh |= (uint32_t)((a & 0x10) >> 4) << j;
      qh |= (uint32_t)((b & 0x10) >> 4) << (j + 16);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}

void quantize_row_q8_0(const float* x, void* vy, int64_t n) {
  block_q8_0* y = (block_q8_0*)vy;
  for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
    float amax = 0;
    for (int j = 0; j < QK8_0; j++) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f2h(d);
    for (int j = 0; j < QK8_0; j++) y[i].qs[j] = (int8_t)std::round(x[j] * id);
  }
}

void quantize_row_q8_1(const float* x, void* vy, int64_t n) {
  block_q8_1* y = (block_q8_1*)vy;
  for (int64_t i = 0; i < n / QK8_1; i++, x += QK8_1) {
    float amax = 0;
    for (int j = 0; j < QK8_1; j++) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f2h(d);
    int sum = 0;
    for (int j = 0; j < QK8_1; j++) {
      y[i].qs[j] = (int8_t)std::round(x[j] * id);
      sum += y[i].qs[j];
    }
    y[i].s = f2h((float)sum * d);
  }
}

// vectorized per block by the clones; nearbyint and max are exact, so every clone gives the same bytes
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void quantize_row_q8_0_act(const float* x, void* vy, int64_t n) {
  block_q8_0* y = (block_q8_0*)vy;
  for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
    float amax = 0;
    for (int j = 0; j < QK8_0; j++) amax = std::max(amax, std::fabs(x[j]));
    y[i].d = f2h(amax / 127.f);
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    for (int j = 0; j < QK8_0; j++) y[i].qs[j] = (int8_t)std::nearbyint(x[j] * id);
  }
}

// vectorized per block by the clones; nearbyint and max are exact, so every clone gives the same bytes
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void quantize_row_q8_1_act(const float* x, void* vy, int64_t n) {
  block_q8_1* y = (block_q8_1*)vy;
  for (int64_t i = 0; i < n / QK8_1; i++, x += QK8_1) {
    float amax = 0;
    for (int j = 0; j < QK8_1; j++) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.f;
    y[i].d = f2h(d);
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < QK8_1; j++) {
      y[i].qs[j] = (int8_t)std::nearbyint(x[j] * id);
      sum += y[i].qs[j];
    }
    y[i].s = f2h((float)sum * d);
  }
}

// ---------------------------------------------------------------- quantize: K-quants

// Symmetric levels in [-nmax, nmax-1] for n values, searching 19 scales around -nmax/max and keeping
// the one with the best weighted least-squares fit (weight x^2). Returns the scale; L gets l + nmax.
static float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  float amax;
  const float max = signed_absmax(x, n, &amax);
  if (amax < GROUP_MAX_EPS) { std::memset(L, 0, n); return 0.f; }
  auto fit = [&](float iscale, float& sumlx, float& suml2, bool store) {
    sumlx = suml2 = 0;
    for (int i = 0; i < n; i++) {
      int l = std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i])));
      if (store) L[i] = (int8_t)(l + nmax);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
  };
  float sumlx, suml2;
  fit(-nmax / max, sumlx, suml2, true);
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; is++) {
    if (is == 0) continue;
    const float iscale = -(nmax + 0.1f * is) / max;
    fit(iscale, sumlx, suml2, false);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      fit(iscale, sumlx, suml2, true);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Q3_K's per-16 search: start from -nmax/max then move single levels while the weighted fit improves.
static float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
  float amax;
  const float max = signed_absmax(x, n, &amax);
  if (amax < GROUP_MAX_EPS) { std::memset(L, 0, n); return 0.f; }
  const float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; i++) {
    const int l = std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i])));
    L[i] = (int8_t)l;
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int itry = 0; itry < 5; itry++) {
    int changed = 0;
    for (int i = 0; i < n; i++) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * L[i];
      if (slx > 0) {
        float sl2 = suml2 - w * L[i] * L[i];
        int nl = std::max(-nmax, std::min(nmax - 1, nearest_int(x[i] * sl2 / slx)));
        if (nl != L[i]) {
          slx += w * x[i] * nl;
          sl2 += w * nl * nl;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = (int8_t)nl; sumlx = slx; suml2 = sl2; changed++;
          }
        }
      }
    }
    if (!changed) break;
  }
  for (int i = 0; i < n; i++) L[i] += nmax;
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Asymmetric levels [0, nmax] with a min <= 0: x ~ scale*L - the_min. Tries nstep+1 scales and
// refits (scale, min) by weighted least squares; keeps the lowest weighted error (|.| or ^2).
static float make_qkx2_quants(int n, int nmax, const float* x, const float* w, uint8_t* L, float* the_min,
                              uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
  float mn = x[0], mx = x[0];
  float sum_w = w[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; i++) {
    if (x[i] < mn) mn = x[i];
    if (x[i] > mx) mx = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (mn > 0) mn = 0;
  if (mx == mn) { std::memset(L, 0, n); *the_min = -mn; return 0.f; }
  float iscale = nmax / (mx - mn);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; i++) {
    L[i] = (uint8_t)std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - mn))));
    float diff = scale * L[i] + mn - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += w[i] * diff;
  }
  for (int is = 0; is <= nstep; is++) {
    iscale = (rmin + rdelta * is + nmax) / (mx - mn);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; i++) {
      const int l = std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - mn))));
      Laux[i] = (uint8_t)l;
      sum_l += w[i] * l;
      sum_l2 += w[i] * l * l;
      sum_xl += w[i] * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) { this_min = 0; this_scale = sum_xl / sum_l2; }
      float err = 0;
      for (int i = 0; i < n; i++) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        err += w[i] * diff;
      }
      if (err < best_error) {
        std::memcpy(L, Laux, n);
        best_error = err; scale = this_scale; mn = this_min;
      }
    }
  }
  *the_min = -mn;
  return scale;
}

// 2 bits at 4 shift positions: qs[32h + l] holds elements 128h + l + 32g at bits 2g.
static void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < QK_K; j += 128)
    for (int l = 0; l < 32; l++)
      qs[j / 4 + l] = L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6);
}

void quantize_row_q2_K(const float* x, void* vy, int64_t n) {
  block_q2_K* y = (block_q2_K*)vy;
  uint8_t L[QK_K], Laux[16];
  float w[16], mins[16], scales[16];
  const float q4scale = 15.f;
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; j++) {
      for (int l = 0; l < 16; l++) w[l] = std::fabs(x[16 * j + l]);
      scales[j] = make_qkx2_quants(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    if (max_scale > 0) {
      const float iscale = q4scale / max_scale;
      for (int j = 0; j < 16; j++) y[i].scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
      y[i].d = f2h(max_scale / q4scale);
    } else {
      for (int j = 0; j < 16; j++) y[i].scales[j] = 0;
      y[i].d = f2h(0.f);
    }
    if (max_min > 0) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < 16; j++) y[i].scales[j] |= (uint8_t)(nearest_int(iscale * mins[j]) << 4);
      y[i].dmin = f2h(max_min / q4scale);
    } else {
      y[i].dmin = f2h(0.f);
    }
    for (int j = 0; j < 16; j++) {
      const float d = h2f(y[i].d) * (y[i].scales[j] & 0xF);
      if (!d) continue;
      const float dm = h2f(y[i].dmin) * (y[i].scales[j] >> 4);
      for (int ii = 0; ii < 16; ii++)
        L[16 * j + ii] = (uint8_t)std::max(0, std::min(3, nearest_int((x[16 * j + ii] + dm) / d)));
    }
    pack_2bit(L, y[i].qs);
  }
}

void quantize_row_q3_K(const float* x, void* vy, int64_t n) {
  block_q3_K* y = (block_q3_K*)vy;
  int8_t L[QK_K];
  float scales[16];
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; j++) {
      scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
      const float a = std::fabs(scales[j]);
      if (a > amax) { amax = a; max_scale = scales[j]; }
    }
    std::memset(y[i].scales, 0, 12);
    if (max_scale) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < 16; j++) {
        int8_t l = (int8_t)nearest_int(iscale * scales[j]);
        l = (int8_t)(std::max(-32, std::min(31, (int)l)) + 32);
        if (j < 8) y[i].scales[j] = l & 0xF;
        else y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
        l >>= 4;
        y[i].scales[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
      }
      y[i].d = f2h(1 / iscale);
    } else {
      y[i].d = f2h(0.f);
    }
    for (int j = 0; j < 16; j++) {
      const float d = h2f(y[i].d) * (float)(q3k_scale(y[i].scales, j) - 32);
      if (!d) continue;
      for (int ii = 0; ii < 16; ii++)
        L[16 * j + ii] = (int8_t)(std::max(-4, std::min(3, nearest_int(x[16 * j + ii] / d))) + 4);
    }
    std::memset(y[i].hmask, 0, 32);
    uint8_t Lu[QK_K];
    for (int j = 0; j < QK_K; j++) {
      int v = L[j];
      if (v > 3) { y[i].hmask[j % 32] |= (uint8_t)(1 << (j / 32)); v -= 4; }
      Lu[j] = (uint8_t)v;
    }
    pack_2bit(Lu, y[i].qs);
  }
}

// Q4_K/Q5_K share everything but the level count and the search parameters.
template <int NMAX>
static void quantize_k45(const float* x, uint8_t L[QK_K], uint8_t scales_out[12], half* dd, half* dmin_out,
                         float rmin, int nstep) {
  uint8_t Laux[32];
  float w[32], mins[8], scales[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; j++) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; l++) w[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, NMAX, x + 32 * j, w, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, false);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < 8; j++) {
    const uint8_t ls = std::min<uint8_t>(63, (uint8_t)nearest_int(inv_scale * scales[j]));
    const uint8_t lm = std::min<uint8_t>(63, (uint8_t)nearest_int(inv_min * mins[j]));
    if (j < 4) {
      scales_out[j] = ls;
      scales_out[j + 4] = lm;
    } else {
      scales_out[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
      scales_out[j - 4] |= (uint8_t)((ls >> 4) << 6);
      scales_out[j] |= (uint8_t)((lm >> 4) << 6);
    }
  }
  *dd = f2h(max_scale / 63.f);
  *dmin_out = f2h(max_min / 63.f);
  for (int j = 0; j < 8; j++) {
    uint8_t sc, m;
    get_scale_min_k4(j, scales_out, &sc, &m);
    const float d = h2f(*dd) * sc;
    if (!d) continue;
    const float dm = h2f(*dmin_out) * m;
    for (int ii = 0; ii < 32; ii++)
      L[32 * j + ii] = (uint8_t)std::max(0, std::min(NMAX, nearest_int((x[32 * j + ii] + dm) / d)));
  }
}

void quantize_row_q4_K(const float* x, void* vy, int64_t n) {
  block_q4_K* y = (block_q4_K*)vy;
  uint8_t L[QK_K];
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    quantize_k45<15>(x, L, y[i].scales, &y[i].d, &y[i].dmin, -1.f, 20);
    for (int c = 0; c < 4; c++)
      for (int l = 0; l < 32; l++) y[i].qs[32 * c + l] = L[64 * c + l] | (L[64 * c + 32 + l] << 4);
  }
}

void quantize_row_q5_K(const float* x, void* vy, int64_t n) {
  block_q5_K* y = (block_q5_K*)vy;
  uint8_t L[QK_K];
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    quantize_k45<31>(x, L, y[i].scales, &y[i].d, &y[i].dmin, -0.5f, 15);
    std::memset(y[i].qh, 0, 32);
    for (int c = 0; c < 4; c++)
      for (int l = 0; l < 32; l++) {
        const int a = L[64 * c + l], b = L[64 * c + 32 + l];
        y[i].qs[32 * c + l] = (uint8_t)((a & 0xF) | ((b & 0xF) << 4));
        y[i].qh[l] |= (uint8_t)(((a >> 4) << (2 * c)) | ((b >> 4) << (2 * c + 1)));
      }
  }
}

void quantize_row_q6_K(const float* x, void* vy, int64_t n) {
  block_q6_K* y = (block_q6_K*)vy;
  int8_t L[QK_K];
  float scales[16];
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    float max_scale = 0, max_abs = 0;
    for (int ib = 0; ib < 16; ib++) {
      scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
      const float a = std::fabs(scales[ib]);
      if (a > max_abs) { max_abs = a; max_scale = scales[ib]; }
    }
    if (max_abs < GROUP_MAX_EPS) {
      std::memset(&y[i], 0, sizeof(block_q6_K));
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[i].d = f2h(1 / iscale);
    for (int ib = 0; ib < 16; ib++) y[i].scales[ib] = (int8_t)std::min(127, nearest_int(iscale * scales[ib]));
    for (int j = 0; j < 16; j++) {
      const float d = h2f(y[i].d) * y[i].scales[j];
      if (!d) continue;
      for (int ii = 0; ii < 16; ii++)
        L[16 * j + ii] = (int8_t)(std::max(-32, std::min(31, nearest_int(x[16 * j + ii] / d))) + 32);
    }
    for (int h = 0; h < 2; h++) {
      uint8_t* ql = y[i].ql + 64 * h;
      uint8_t* qh = y[i].qh + 32 * h;
      const int8_t* Lh = L + 128 * h;
      for (int l = 0; l < 32; l++) {
        ql[l] = (uint8_t)((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
        ql[l + 32] = (uint8_t)((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
        qh[l] = (uint8_t)((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) | ((Lh[l + 96] >> 4) << 6));
      }
    }
  }
}

void quantize_row_q8_K(const float* x, void* vy, int64_t n) {
  block_q8_K* y = (block_q8_K*)vy;
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    float amax;
    const float max = signed_absmax(x, QK_K, &amax);
    if (!amax) {
      std::memset(&y[i], 0, sizeof(block_q8_K));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < QK_K; j++) y[i].qs[j] = (int8_t)std::min(127, nearest_int(iscale * x[j]));
    for (int j = 0; j < 16; j++) {
      int sum = 0;
      for (int l = 0; l < 16; l++) sum += y[i].qs[16 * j + l];
      y[i].bsums[j] = (int16_t)sum;
    }
    y[i].d = 1 / iscale;
  }
}

// ---------------------------------------------------------------- quantize: IQ4

static inline int best_index_iq4(float x) {
  const int8_t* v = kvalues_iq4nl;
  if (x <= v[0]) return 0;
  if (x >= v[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < v[mid]) hi = mid; else lo = mid;
  }
  return x - v[hi - 1] < v[hi] - x ? hi - 1 : hi;
}

// Per 32-block scale search over the IQ4 grid (weight x^2). ntry < 0: single start, no search.
static float iq4_block_scale(const float* xb, uint8_t* Lb, int ntry) {
  float amax;
  const float max = signed_absmax(xb, 32, &amax);
  if (amax < GROUP_MAX_EPS) return 0.f;
  const int8_t* v = kvalues_iq4nl;
  float d = ntry > 0 ? -max / v[0] : max / v[0];
  float id = 1 / d;
  float sumqx = 0, sumq2 = 0;
  for (int j = 0; j < 32; j++) {
    const int l = best_index_iq4(id * xb[j]);
    Lb[j] = (uint8_t)l;
    const float q = v[l], w = xb[j] * xb[j];
    sumqx += w * q * xb[j];
    sumq2 += w * q * q;
  }
  d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
  float best = d * sumqx;
  for (int itry = -ntry; itry <= ntry; itry++) {
    id = (itry + v[0]) / max;
    sumqx = sumq2 = 0;
    for (int j = 0; j < 32; j++) {
      const float q = v[best_index_iq4(id * xb[j])], w = xb[j] * xb[j];
      sumqx += w * q * xb[j];
      sumq2 += w * q * q;
    }
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) { d = sumqx / sumq2; best = d * sumqx; }
  }
  return d;
}

static void pack_iq4(const uint8_t* L, uint8_t* qs, int nblocks32) {
  for (int i = 0; i < nblocks32; i++)
    for (int j = 0; j < 16; j++) qs[16 * i + j] = L[32 * i + j] | (L[32 * i + 16 + j] << 4);
}

void quantize_row_iq4_nl(const float* x, void* vy, int64_t n) {
  block_iq4_nl* y = (block_iq4_nl*)vy;
  uint8_t L[32];
  for (int64_t i = 0; i < n / QK4_NL; i++, x += QK4_NL) {
    std::memset(L, 0, sizeof L);
    const float d = iq4_block_scale(x, L, -1);
    y[i].d = f2h(d);
    pack_iq4(L, y[i].qs, 1);
  }
}

void quantize_row_iq4_xs(const float* x, void* vy, int64_t n) {
  block_iq4_xs* y = (block_iq4_xs*)vy;
  uint8_t L[QK_K];
  float scales[8];
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    std::memset(L, 0, sizeof L);
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < 8; ib++) {
      scales[ib] = iq4_block_scale(x + 32 * ib, L + 32 * ib, 7);
      const float a = std::fabs(scales[ib]);
      if (a > amax_scale) { amax_scale = a; max_scale = scales[ib]; }
    }
    y[i].scales_h = 0;
    std::memset(y[i].scales_l, 0, 4);
    const float d = -max_scale / 32;
    y[i].d = f2h(d);
    const float id = d ? 1 / d : 0.f;
    for (int ib = 0; ib < 8; ib++) {
      int l = std::max(-32, std::min(31, nearest_int(id * scales[ib])));
      const float dl = d * l;
      const float idl = dl ? 1 / dl : 0.f;
      for (int j = 0; j < 32; j++) L[32 * ib + j] = (uint8_t)best_index_iq4(idl * x[32 * ib + j]);
      l += 32;
      y[i].scales_l[ib / 2] |= (uint8_t)((l & 0xF) << (4 * (ib % 2)));
      y[i].scales_h |= (uint16_t)((l >> 4) << (2 * ib));
    }
    pack_iq4(L, y[i].qs, 8);
  }
}

}  // namespace ref
}  // namespace pyllm
