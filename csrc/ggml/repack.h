// Weight rows interleaved in groups of 16, converted once at load (Model::tensor_any): the layout the
// group kernels (type_traits::x16_tile) read. Lane r of every 64-byte vector belongs to row r, so one
// load brings 4 elements of 16 rows and each token's sums build up in per-row lanes with no horizontal
// sums: a block is decoded once for the group's 16 rows and for all k tokens of a batch. The bytes per
// group equal those of its 16 GGUF rows, so a row-major offset r * nb1 (r a multiple of 16) finds group
// r / 16, and a matrix's size does not change.
#pragma once
#include <cstddef>
#include <cstdint>

#include "ggml/quants.h"

namespace pyllm {

constexpr int kGroupRows = 16;

// Q4_K, super-block i of a group (2304 bytes = 16 block_q4_K); a group is its K / 256 super-blocks in order.
struct block_q4_Kx16 {
  half d[kGroupRows], dmin[kGroupRows];  // row r's d, dmin
  uint32_t scales[3][kGroupRows];        // word w (bytes 4w..4w+3) of row r's 12 packed scale bytes
  uint32_t qs[32][kGroupRows];           // word v (bytes 4v..4v+3) of row r's 128 qs bytes
};
static_assert(sizeof(block_q4_Kx16) == kGroupRows * sizeof(block_q4_K), "block_q4_Kx16 size");
// IQ4_NL, block b of a group (288 bytes = 16 block_iq4_nl).
struct block_iq4_nlx16 {
  half d[kGroupRows];
  uint32_t qs[4][kGroupRows];  // word v (bytes 4v..4v+3) of row r's 16 qs bytes
};
static_assert(sizeof(block_iq4_nlx16) == kGroupRows * sizeof(block_iq4_nl), "block_iq4_nlx16 size");
// Q4_0 and Q4_1, block b of a group (288 / 320 bytes = 16 GGUF blocks).
struct block_q4_0x16 {
  half d[kGroupRows];
  uint32_t qs[4][kGroupRows];  // word v (bytes 4v..4v+3) of row r's 16 qs bytes
};
static_assert(sizeof(block_q4_0x16) == kGroupRows * sizeof(block_q4_0), "block_q4_0x16 size");
struct block_q4_1x16 {
  half d[kGroupRows], m[kGroupRows];
  uint32_t qs[4][kGroupRows];
};
static_assert(sizeof(block_q4_1x16) == kGroupRows * sizeof(block_q4_1), "block_q4_1x16 size");
// Q8_0, block b of a group (544 bytes = 16 block_q8_0). The weights are stored + 128 (qs ^ 0x80, unsigned), the
// operand dpbusd takes unsigned, so the activations stay as they are.
struct block_q8_0x16 {
  half d[kGroupRows];
  uint32_t qs[8][kGroupRows];  // word v (bytes 4v..4v+3) of row r's 32 qs bytes, each ^ 0x80
};
static_assert(sizeof(block_q8_0x16) == kGroupRows * sizeof(block_q8_0), "block_q8_0x16 size");

// The types with a group layout (and a group kernel at every SIMD level; Q4_0 / Q4_1 take the AVX2 one there).
bool interleave_supported(ggml_type t);
// n_rows (a multiple of 16) rows of K elements: GGUF blocks at src -> groups at dst (dst == src allowed).
void interleave_rows(ggml_type t, const uint8_t* src, uint8_t* dst, int64_t n_rows, int64_t K);
// Row r (< 16) of the group at g, back in GGUF layout: row_size(t, K) bytes at out.
void deinterleave_row(ggml_type t, const uint8_t* g, int r, int64_t K, uint8_t* out);

// One thread's run of group-kernel calls over the same activation rows (a matmul chunk's groups, cpu/matmul.cpp):
// while it is open a group kernel may keep what it derives from the rows for the next group (Q8_0: each block's
// lane-sum starts) instead of making it again. x16_acts_scope() is the open run's id on this thread, 0 outside.
struct X16ActsScope {
  X16ActsScope();
  ~X16ActsScope();
  X16ActsScope(const X16ActsScope&) = delete;
  X16ActsScope& operator=(const X16ActsScope&) = delete;
};
unsigned x16_acts_scope();

// The scalar reference group kernels (type_traits::x16_tile), C[t * ldc + r] = row r . token t for r < 16,
// t < k. Q4_K: dot_q4_K_rp's arithmetic per row. IQ4_NL: llama.cpp's for its repacked IQ4_NL (the rp
// form of MXFP4, dot_b32_rp): per 32-block the exact integer isum, then acc = fma(isum, d * y.d, acc), block
// after block (not vec_dot's lanes: grouped IQ4_NL rows have these bits at every batch size, ungrouped ones
// vec_dot's). Q8_0: the SIMD vec_dot's arithmetic (its 8 lanes: lane l sums bytes 4l..4l+3 of each block
// exactly and does fma(p_l, d * y.d, acc_l) block after block; then hsum8's tree), so a grouped row has
// the bits of the GGUF layout at the SIMD levels (the scalar vec_dot's one chain differs in the last bits).
// Q4_0 and Q4_1: the same 8 lanes (Q4_1 then adds its min chain fma(m, y.s, accm) after the tree).
void x16_q4_K_ref(int K, const void* g, const void* y, size_t by, int k, float* C, size_t ldc);
void x16_iq4_nl_ref(int K, const void* g, const void* y, size_t by, int k, float* C, size_t ldc);
void x16_q8_0_ref(int K, const void* g, const void* y, size_t by, int k, float* C, size_t ldc);
void x16_q4_0_ref(int K, const void* g, const void* y, size_t by, int k, float* C, size_t ldc);
void x16_q4_1_ref(int K, const void* g, const void* y, size_t by, int k, float* C, size_t ldc);

}  // namespace pyllm
