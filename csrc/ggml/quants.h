// Block layouts of the GGML quant types (memory order = GGUF bytes) and the scalar reference
// kernels. The scalar code in quants.cpp / quants_dot.cpp is the spec; SIMD files must agree with it
// (dequantize: bit for bit; vec_dot: within float reassociation error).
#pragma once
#include <cstddef>
#include <cstdint>

#include "ggml/types.h"

namespace pyllm {

constexpr int QK4_0 = 32, QK4_1 = 32, QK5_0 = 32, QK5_1 = 32, QK8_0 = 32, QK8_1 = 32;
constexpr int QK4_NL = 32;
constexpr int QK_K = 256;
constexpr int K_SCALE_SIZE = 12;

typedef uint16_t half;  // IEEE fp16 bits, little-endian

struct block_q4_0 { half d; uint8_t qs[QK4_0 / 2]; };
static_assert(sizeof(block_q4_0) == 18, "block_q4_0 size");
struct block_q4_1 { half d; half m; uint8_t qs[QK4_1 / 2]; };
static_assert(sizeof(block_q4_1) == 20, "block_q4_1 size");
struct block_q5_0 { half d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; };
static_assert(sizeof(block_q5_0) == 22, "block_q5_0 size");
struct block_q5_1 { half d; half m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; };
static_assert(sizeof(block_q5_1) == 24, "block_q5_1 size");
struct block_q8_0 { half d; int8_t qs[QK8_0]; };
static_assert(sizeof(block_q8_0) == 34, "block_q8_0 size");
struct block_q8_1 { half d; half s; int8_t qs[QK8_1]; };  // s = d * sum(qs)
static_assert(sizeof(block_q8_1) == 36, "block_q8_1 size");

// Super-blocks of 256.
struct block_q2_K { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; half d; half dmin; };
static_assert(sizeof(block_q2_K) == 84, "block_q2_K size");
struct block_q3_K { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; half d; };
static_assert(sizeof(block_q3_K) == 110, "block_q3_K size");
struct block_q4_K { half d; half dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; };
static_assert(sizeof(block_q4_K) == 144, "block_q4_K size");
struct block_q5_K { half d; half dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; };
static_assert(sizeof(block_q5_K) == 176, "block_q5_K size");
struct block_q6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; half d; };
static_assert(sizeof(block_q6_K) == 210, "block_q6_K size");
struct block_q8_K { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; };
static_assert(sizeof(block_q8_K) == 292, "block_q8_K size");

struct block_iq4_nl { half d; uint8_t qs[QK4_NL / 2]; };
static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl size");
struct block_iq4_xs { half d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; };
static_assert(sizeof(block_iq4_xs) == 136, "block_iq4_xs size");

// The non-linear 4-bit grid shared by IQ4_NL and IQ4_XS.
alignas(16) extern const int8_t kvalues_iq4nl[16];

// Q4_K/Q5_K: 8 six-bit (scale, min) pairs packed in 12 bytes.
static inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63; *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}
// Q3_K: the 16 six-bit scales (0..63, subtract 32 for the signed value).
static inline int q3k_scale(const uint8_t* s, int j) {
  const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
  const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return lo | (hi << 4);
}
// IQ4_XS: the 8 six-bit scales (subtract 32 for the signed value).
static inline int iq4xs_scale(const block_iq4_xs& b, int ib) {
  return ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b.scales_h >> (2 * ib)) & 3) << 4);
}

namespace ref {
// dequantize (n = elements, multiple of the block size)
void dequantize_row_q4_0(const void* x, float* y, int64_t n);
void dequantize_row_q4_1(const void* x, float* y, int64_t n);
void dequantize_row_q5_0(const void* x, float* y, int64_t n);
void dequantize_row_q5_1(const void* x, float* y, int64_t n);
void dequantize_row_q8_0(const void* x, float* y, int64_t n);
void dequantize_row_q8_1(const void* x, float* y, int64_t n);
void dequantize_row_q2_K(const void* x, float* y, int64_t n);
void dequantize_row_q3_K(const void* x, float* y, int64_t n);
void dequantize_row_q4_K(const void* x, float* y, int64_t n);
void dequantize_row_q5_K(const void* x, float* y, int64_t n);
void dequantize_row_q6_K(const void* x, float* y, int64_t n);
void dequantize_row_q8_K(const void* x, float* y, int64_t n);
void dequantize_row_iq4_nl(const void* x, float* y, int64_t n);
void dequantize_row_iq4_xs(const void* x, float* y, int64_t n);

// quantize (ggml's quantize_row_*_ref semantics; no importance matrix)
void quantize_row_q4_0(const float* x, void* y, int64_t n);
void quantize_row_q4_1(const float* x, void* y, int64_t n);
void quantize_row_q5_0(const float* x, void* y, int64_t n);
void quantize_row_q5_1(const float* x, void* y, int64_t n);
void quantize_row_q8_0(const float* x, void* y, int64_t n);
void quantize_row_q8_1(const float* x, void* y, int64_t n);
void quantize_row_q8_0_act(const float* x, void* y, int64_t n);  // upstream x86 activation rounding
void quantize_row_q8_1_act(const float* x, void* y, int64_t n);
void quantize_row_q2_K(const float* x, void* y, int64_t n);
void quantize_row_q3_K(const float* x, void* y, int64_t n);
void quantize_row_q4_K(const float* x, void* y, int64_t n);
void quantize_row_q5_K(const float* x, void* y, int64_t n);
void quantize_row_q6_K(const float* x, void* y, int64_t n);
void quantize_row_q8_K(const float* x, void* y, int64_t n);
void quantize_row_iq4_nl(const float* x, void* y, int64_t n);
void quantize_row_iq4_xs(const float* x, void* y, int64_t n);

// dot products: weight row x (n elements) . activation row y (vec_dot_type)
void vec_dot_q4_0_q8_0(int n, float* s, const void* x, const void* y);
void vec_dot_q4_1_q8_1(int n, float* s, const void* x, const void* y);
void vec_dot_q5_0_q8_0(int n, float* s, const void* x, const void* y);
void vec_dot_q5_1_q8_1(int n, float* s, const void* x, const void* y);
void vec_dot_q8_0_q8_0(int n, float* s, const void* x, const void* y);
void vec_dot_iq4_nl_q8_0(int n, float* s, const void* x, const void* y);
void vec_dot_q2_K_q8_K(int n, float* s, const void* x, const void* y);
void vec_dot_q3_K_q8_K(int n, float* s, const void* x, const void* y);
void vec_dot_q4_K_q8_K(int n, float* s, const void* x, const void* y);
void vec_dot_q5_K_q8_K(int n, float* s, const void* x, const void* y);
void vec_dot_q6_K_q8_K(int n, float* s, const void* x, const void* y);
void vec_dot_iq4_xs_q8_K(int n, float* s, const void* x, const void* y);
}  // namespace ref

// SIMD overrides: each replaces the pointers it has kernels for (x86 builds only).
void quants_override_avx2(type_traits* table);
void quants_override_avx512(type_traits* table);
void quants_override_amx(type_traits* table);  // on top of avx512
bool amx_usable();  // the CPU has AMX-INT8 and the OS grants this process the tile state
void amx_new_epoch();  // before a matmul that uses tiles: each thread reloads its tile configuration once
void install_amx_kquants(type_traits* table);  // its Q4_K / Q2_K tiles (x86/amx_kquants.cpp)
void install_amx_b32(type_traits* table);      // its MXFP4 tiles (x86/amx_b32.cpp)
void install_amx_x16(type_traits* table);      // Q4_K groups on tiles (x86/amx_x16.cpp)

}  // namespace pyllm
