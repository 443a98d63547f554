// ggml_vec_dot_f32 / ggml_vec_dot_f16 with the lane layout and reduction order of ggml's AVX-512
// build (4 accumulators x 16 lanes over blocks of 64, fused multiply-add, tree reduction, then the
// tail), so float results match upstream bit for bit. AVX-512 when the CPU has it, otherwise an
// exact scalar emulation.
#pragma once
#include <cstdint>

namespace pyllm {
float ggml_dot_f32(const float* x, const float* y, int n);
float ggml_dot_f16(const uint16_t* x, const uint16_t* y, int n);
// ggml_vec_mad_f32: y[i] = fma(x[i], v, y[i])
void ggml_mad_f32(float* y, const float* x, float v, int n);
}  // namespace pyllm
