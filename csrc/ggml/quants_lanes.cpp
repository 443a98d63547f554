// Lane-parallel Q4_K/Q5_K quantization, bit-exact with ref::quantize_row_q4_K/_q5_K (tests/test_quants_lanes.py
// compares the bytes). The reference's make_qkx2_quants is a chain of dependent float additions per 32-value
// sub-block; here the 8 sub-blocks of a super-block are independent lanes (two groups of 4-wide vectors), each
// lane doing exactly the reference's operations in its order. This file gets no ISA flags: no FMA is contracted.
#include "ggml/quants_lanes.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "ggml/fp16.h"
#include "ggml/quants.h"

namespace pyllm {

namespace {
constexpr int K = 8;   // sub-blocks per super-block
constexpr int N = 32;  // values per sub-block

// the reference's rounding (ties to even through the 1.5*2^23 trick)
inline int nearest_int(float f) {
  const float v = f + 12582912.f;
  int i; std::memcpy(&i, &v, 4);
  return (i & 0x007fffff) - 0x00400000;
}

// Lanes as GCC/Clang vector types: element-wise IEEE operations, split into whatever the target has (no FMA
// here, so no contraction); casts between same-size vector types reinterpret bits, like the reference's memcpy.
#pragma GCC diagnostic ignored "-Wpsabi"  // the vector types never cross this file's boundary
typedef float f8 __attribute__((vector_size(16)));  // 4 lanes: one SSE2 / NEON register
typedef int32_t i8 __attribute__((vector_size(16)));
constexpr int V = 4;

inline i8 nearest_int8(f8 f) {
  const f8 v = f + 12582912.f;
  return ((i8)v & 0x007fffff) - 0x00400000;
}
inline i8 clamp8(i8 l, int hi) {
  l = l < 0 ? 0 : l;
  return l > hi ? hi : l;
}

// make_qkx2_quants(32, NMAX, ..., rmin, 0.1f, nstep, use_mad=false) for V sub-blocks of x (32 * V values) with
// the weights av_x + |x| of quantize_k45; L[32 * k + i], scales[k], mins[k] as the reference returns them.
template <int NMAX>
void qkx2_lanes(const float* x, uint8_t* L, float* scales, float* mins, float rmin, int nstep) {
  const float rdelta = 0.1f;
  f8 xt[N], w[N];
  for (int i = 0; i < N; i++)
    for (int k = 0; k < V; k++) xt[i][k] = x[N * k + i];
  f8 sum_x2 = {};
  for (int i = 0; i < N; i++) sum_x2 += xt[i] * xt[i];
  f8 av;
  for (int k = 0; k < V; k++) av[k] = std::sqrt(sum_x2[k] / 32);
  for (int i = 0; i < N; i++) {
    const f8 ax = (f8)((i8)xt[i] & 0x7fffffff);  // fabs
    w[i] = av + ax;
  }
  f8 mn = xt[0], mx = xt[0], sum_w = w[0], sum_x = w[0] * xt[0];
  for (int i = 1; i < N; i++) {
    mn = xt[i] < mn ? xt[i] : mn;
    mx = xt[i] > mx ? xt[i] : mx;
    sum_w += w[i];
    sum_x += w[i] * xt[i];
  }
  mn = mn > 0 ? 0.f : mn;
  const i8 flat = mx == mn;  // the reference returns early for these lanes (no search)
  f8 iscale = (float)NMAX / (mx - mn);
  f8 scale = 1.f / iscale;
  f8 best = {};
  i8 Lt[N], Laux[N];
  for (int i = 0; i < N; i++) {
    Lt[i] = clamp8(nearest_int8(iscale * (xt[i] - mn)), NMAX);
    f8 diff = scale * __builtin_convertvector(Lt[i], f8) + mn - xt[i];
    diff = diff * diff;
    best += w[i] * diff;
  }
  for (int is = 0; is <= nstep; is++) {
    const float num = rmin + rdelta * is + NMAX;  // the reference evaluates this in scalar floats
    iscale = num / (mx - mn);                      // mn: the best fit so far, as in the reference
    f8 sum_l = {}, sum_l2 = {}, sum_xl = {};
    for (int i = 0; i < N; i++) {
      Laux[i] = clamp8(nearest_int8(iscale * (xt[i] - mn)), NMAX);
      const f8 fl = __builtin_convertvector(Laux[i], f8);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * xt[i];
    }
    const f8 D = sum_w * sum_l2 - sum_l * sum_l;
    f8 this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
    f8 this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
    const i8 pos = this_min > 0;
    this_min = pos ? 0.f : this_min;
    this_scale = pos ? sum_xl / sum_l2 : this_scale;
    f8 err = {};
    for (int i = 0; i < N; i++) {
      f8 diff = this_scale * __builtin_convertvector(Laux[i], f8) + this_min - xt[i];
      diff = diff * diff;
      err += w[i] * diff;
    }
    const i8 take = (D > 0) & (err < best);
    for (int i = 0; i < N; i++) Lt[i] = take ? Laux[i] : Lt[i];
    best = take ? err : best;
    scale = take ? this_scale : scale;
    mn = take ? this_min : mn;
  }
  for (int k = 0; k < V; k++) {
    mins[k] = -mn[k];
    scales[k] = flat[k] ? 0.f : scale[k];
    for (int i = 0; i < N; i++) L[N * k + i] = flat[k] ? 0 : (uint8_t)Lt[i][k];
  }
}

// quantize_k45 of the reference after its 8 make_qkx2_quants calls: 6-bit scales/mins and the final levels.
template <int NMAX>
void k45_super_block(const float* x, uint8_t* L, uint8_t* scales_out, half* dd, half* dmin_out, float rmin, int nstep) {
  float mins[K], scales[K];
  for (int g = 0; g < K; g += V) qkx2_lanes<NMAX>(x + N * g, L + N * g, scales + g, mins + g, rmin, nstep);
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < K; j++) {
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < K; j++) {
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
  *dd = fp32_to_fp16(max_scale / 63.f);
  *dmin_out = fp32_to_fp16(max_min / 63.f);
  for (int j = 0; j < K; j++) {
    uint8_t sc, m;
    get_scale_min_k4(j, scales_out, &sc, &m);
    const float d = fp16_to_fp32(*dd) * sc;
    if (!d) continue;
    const float dm = fp16_to_fp32(*dmin_out) * m;
    for (int ii = 0; ii < N; ii++)
      L[N * j + ii] = (uint8_t)std::max(0, std::min(NMAX, nearest_int((x[N * j + ii] + dm) / d)));
  }
}
}  // namespace

void quantize_row_lanes(ggml_type t, const float* x, void* vy, int64_t n) {
  uint8_t L[QK_K];
  if (t == GGML_TYPE_Q4_K) {
    block_q4_K* y = (block_q4_K*)vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
      k45_super_block<15>(x, L, y[i].scales, &y[i].d, &y[i].dmin, -1.f, 20);
      for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) y[i].qs[32 * c + l] = L[64 * c + l] | (L[64 * c + 32 + l] << 4);
    }
    return;
  }
  if (t == GGML_TYPE_Q5_K) {
    block_q5_K* y = (block_q5_K*)vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
      k45_super_block<31>(x, L, y[i].scales, &y[i].d, &y[i].dmin, -0.5f, 15);
      std::memset(y[i].qh, 0, 32);
      for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
          const int a = L[64 * c + l], b = L[64 * c + 32 + l];
          y[i].qs[32 * c + l] = (uint8_t)((a & 0xF) | ((b & 0xF) << 4));
          y[i].qh[l] |= (uint8_t)(((a >> 4) << (2 * c)) | ((b >> 4) << (2 * c + 1)));
        }
    }
    return;
  }
  const type_traits& tr = get_type_traits(t);
  if (!tr.from_float) throw std::invalid_argument(std::string(tr.name) + ": no quantizer");
  tr.from_float(x, vy, n);
}

}  // namespace pyllm
