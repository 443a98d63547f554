// Element-wise and row ops on float32 buffers. Rows are contiguous; n = row length.
#pragma once
#include <cmath>
#include <cstdint>

#include "cpu/matmul.h"

namespace pyllm {

// y = x / sqrt(mean(x^2) + eps) * w   (w may be null); y may alias x
void rms_norm(const float* x, const float* w, float* y, int n, float eps);
// x / sqrt(sum x^2 + eps), the Gated DeltaNet q/k normalisation
void l2_norm(const float* x, float* y, int n, float eps);

// RoPE over the first n_rot dims of one head vector; neox pairs (i, i+n_rot/2), normal pairs (2i, 2i+1).
struct RopeCache {
  int n_rot = 0;
  float base = 10000.f, freq_scale = 1.f;
  // cos/sin for one position, n_rot/2 each
  void compute(int64_t pos, float* cs, float* sn) const;
};
void rope_neox(float* x, int n_rot, const float* cs, const float* sn);
void rope_norm(float* x, int n_rot, const float* cs, const float* sn);

void softmax_inplace(float* x, int n);
static inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
static inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
static inline float softplus(float x) { return x > 20.f ? x : std::log(1.0f + std::exp(x)); }  // as ggml
float gelu(float x);  // tanh approximation, as ggml_gelu_f32

// The activations as ggml's CPU backend computes them (bit-exact with an AVX-512 build), over one
// row of n elements: silu uses ggml_v_expf's polynomial in blocks of 16 from the row start and
// x/(1+expf(-x)) for the tail; gelu goes through ggml's f16 table (GGML_GELU_FP16).
void silu_row(const float* x, float* y, int n);                    // y = silu(x)
void swiglu_row(const float* x, const float* g, float* y, int n);  // y = silu(x) * g
void geglu_row(const float* x, const float* g, float* y, int n);   // y = gelu(x) * g

// Float weight vectors (norm weights etc.) dequantized once at load.
void weight_to_float(const Weight& w, float* out);

}  // namespace pyllm
