// The low-bit lattice types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) and MXFP4: block
// layouts (memory order = GGUF bytes), their grid tables (iq_grids.cpp, generated from gguf-py) and
// the scalar reference kernels (quants_iq.cpp, the spec the SIMD kernels are tested against).
//
// All IQ types pair with Q8_K activations, MXFP4 with Q8_0 (ggml-cpu's vec_dot_type table), so
// their integer sums match upstream's and only the float side may differ.
#pragma once
#include <cstdint>

#include "ggml/quants.h"

namespace pyllm {

constexpr int QK_MXFP4 = 32;
constexpr float IQ1S_DELTA = 0.125f, IQ1M_DELTA = 0.125f;

struct block_iq2_xxs { half d; uint16_t qs[QK_K / 8]; };  // per 32: 4 grid bytes, then 4x7 sign bits + 4-bit scale
static_assert(sizeof(block_iq2_xxs) == 66, "block_iq2_xxs size");
struct block_iq2_xs { half d; uint16_t qs[QK_K / 8]; uint8_t scales[QK_K / 32]; };  // qs: 9-bit grid | 7-bit signs
static_assert(sizeof(block_iq2_xs) == 74, "block_iq2_xs size");
struct block_iq2_s { half d; uint8_t qs[QK_K / 4]; uint8_t qh[QK_K / 32]; uint8_t scales[QK_K / 32]; };  // qs: 32 grid + 32 sign bytes
static_assert(sizeof(block_iq2_s) == 82, "block_iq2_s size");
struct block_iq3_xxs { half d; uint8_t qs[3 * QK_K / 8]; };  // 64 grid bytes, then per 32: 4x7 sign bits + scale
static_assert(sizeof(block_iq3_xxs) == 98, "block_iq3_xxs size");
struct block_iq3_s { half d; uint8_t qs[QK_K / 4]; uint8_t qh[QK_K / 32]; uint8_t signs[QK_K / 8]; uint8_t scales[QK_K / 64]; };
static_assert(sizeof(block_iq3_s) == 110, "block_iq3_s size");
struct block_iq1_s { half d; uint8_t qs[QK_K / 8]; uint16_t qh[QK_K / 32]; };  // qh: 3x4 grid bits, 3-bit scale, delta sign
static_assert(sizeof(block_iq1_s) == 50, "block_iq1_s size");
struct block_iq1_m { uint8_t qs[QK_K / 8]; uint8_t qh[QK_K / 16]; uint8_t scales[QK_K / 32]; };  // fp16 d in scales' top nibbles
static_assert(sizeof(block_iq1_m) == 56, "block_iq1_m size");
struct block_mxfp4 { uint8_t e; uint8_t qs[QK_MXFP4 / 2]; };  // E8M0 exponent, E2M1 nibbles (kvalues_mxfp4 = 2x)
static_assert(sizeof(block_mxfp4) == 17, "block_mxfp4 size");

// Grids (iq_grids.cpp, generated): entry = little-endian bytes, byte j = element j.
extern const uint64_t iq2xxs_grid[256];
extern const uint64_t iq2xs_grid[512];
extern const uint64_t iq2s_grid[1024];
extern const uint32_t iq3xxs_grid[256];
extern const uint32_t iq3s_grid[512];
extern const uint64_t iq1s_grid[2048];  // bytes are int8 -1, 0, 1
extern const uint8_t ksigns_iq2xs[128];  // 7 sign bits -> 8 with even parity
alignas(16) extern const int8_t kvalues_mxfp4[16];

// E8M0 exponent -> 2^(e-127) / 2 (the half compensates the doubled E2M1 values), exact.
static inline float e8m0_to_fp32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
  float f; __builtin_memcpy(&f, &bits, 4);
  return f;
}
// IQ1_M: the fp16 super-block scale, spread over the top nibbles of the 4 scale words.
static inline half iq1m_d(const block_iq1_m& b) {
  uint16_t sc[4]; __builtin_memcpy(sc, b.scales, 8);
  return (half)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
}
// IQ1_M: 3-bit scale of 16-element group j (0..15).
static inline int iq1m_scale(const block_iq1_m& b, int j) {
  uint16_t sc[4]; __builtin_memcpy(sc, b.scales, 8);
  return (sc[j / 4] >> (3 * (j % 4))) & 7;
}

namespace ref {
void dequantize_row_iq2_xxs(const void* x, float* y, int64_t n);
void dequantize_row_iq2_xs(const void* x, float* y, int64_t n);
void dequantize_row_iq2_s(const void* x, float* y, int64_t n);
void dequantize_row_iq3_xxs(const void* x, float* y, int64_t n);
void dequantize_row_iq3_s(const void* x, float* y, int64_t n);
void dequantize_row_iq1_s(const void* x, float* y, int64_t n);
void dequantize_row_iq1_m(const void* x, float* y, int64_t n);
void dequantize_row_mxfp4(const void* x, float* y, int64_t n);

void vec_dot_iq2_xxs_q8_K(int n, float* s, const void* x, const void* y);
void vec_dot_iq2_xs_q8_K(int n, float* s, const void* x, const void* y);
void vec_dot_iq2_s_q8_K(int n, float* s, const void* x, const void* y);
void vec_dot_iq3_xxs_q8_K(int n, float* s, const void* x, const void* y);
void vec_dot_iq3_s_q8_K(int n, float* s, const void* x, const void* y);
void vec_dot_iq1_s_q8_K(int n, float* s, const void* x, const void* y);
void vec_dot_iq1_m_q8_K(int n, float* s, const void* x, const void* y);
void vec_dot_mxfp4_q8_0(int n, float* s, const void* x, const void* y);

// Quantizers (quants_iq_quantize.cpp): our own weighted grid search (no imatrix), not
// llama-quantize's, so the bytes differ from its files; every output is a valid block of the type.
// MXFP4 is gguf-py's quantizer.
void quantize_row_iq2_xxs(const float* x, void* y, int64_t n);
void quantize_row_iq2_xs(const float* x, void* y, int64_t n);
void quantize_row_iq2_s(const float* x, void* y, int64_t n);
void quantize_row_iq3_xxs(const float* x, void* y, int64_t n);
void quantize_row_iq3_s(const float* x, void* y, int64_t n);
void quantize_row_iq1_s(const float* x, void* y, int64_t n);
void quantize_row_iq1_m(const float* x, void* y, int64_t n);
void quantize_row_mxfp4(const float* x, void* y, int64_t n);
}  // namespace ref

// Fills the traits rows of these types (scalar reference); called by traits.cpp's init_table.
void register_iq_types(type_traits* table);

}  // namespace pyllm
