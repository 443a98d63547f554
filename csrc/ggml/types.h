// GGML tensor types: ids are GGML's (they are what GGUF stores), one traits table for all.
#pragma once
#include <cstddef>
#include <cstdint>

namespace pyllm {

enum ggml_type : int32_t {
  GGML_TYPE_F32 = 0, GGML_TYPE_F16 = 1, GGML_TYPE_Q4_0 = 2, GGML_TYPE_Q4_1 = 3,
  GGML_TYPE_Q5_0 = 6, GGML_TYPE_Q5_1 = 7, GGML_TYPE_Q8_0 = 8, GGML_TYPE_Q8_1 = 9,
  GGML_TYPE_Q2_K = 10, GGML_TYPE_Q3_K = 11, GGML_TYPE_Q4_K = 12, GGML_TYPE_Q5_K = 13,
  GGML_TYPE_Q6_K = 14, GGML_TYPE_Q8_K = 15, GGML_TYPE_IQ2_XXS = 16, GGML_TYPE_IQ2_XS = 17,
  GGML_TYPE_IQ3_XXS = 18, GGML_TYPE_IQ1_S = 19, GGML_TYPE_IQ4_NL = 20, GGML_TYPE_IQ3_S = 21,
  GGML_TYPE_IQ2_S = 22, GGML_TYPE_IQ4_XS = 23, GGML_TYPE_I8 = 24, GGML_TYPE_I16 = 25,
  GGML_TYPE_I32 = 26, GGML_TYPE_I64 = 27, GGML_TYPE_F64 = 28, GGML_TYPE_IQ1_M = 29,
  GGML_TYPE_BF16 = 30, GGML_TYPE_TQ1_0 = 34, GGML_TYPE_TQ2_0 = 35, GGML_TYPE_MXFP4 = 39,
  GGML_TYPE_NVFP4 = 40, GGML_TYPE_Q1_0 = 41, GGML_TYPE_Q2_0 = 42,
  GGML_TYPE_COUNT = 43,
};

// x: one weight row (n elements of the weight type), y: one activation row already converted
// to vec_dot_type. Returns the dot product in *s.
typedef void (*vec_dot_fn)(int n, float* s, const void* x, const void* y);
typedef void (*to_float_fn)(const void* x, float* y, int64_t n);
typedef void (*from_float_fn)(const float* x, void* y, int64_t n);
// One weight row x against k activation rows y + r*by (r < k, 1 <= k <= kMaxRowsK, by in bytes),
// results in s[0..k-1]. The weight row is decoded once for all k rows, and each row keeps exactly the
// single-row accumulation order: bit-identical to k vec_dot calls at the same SIMD level (batch
// invariance), so callers may use it whenever it is non-null and fall back to vec_dot otherwise.
constexpr int kMaxRowsK = 8;
typedef void (*vec_dot_k_fn)(int n, float* s, const void* x, const void* y, size_t by, int k);

// Prefill tiles (optional, per SIMD level). A panel holds kGemmCols activation rows of one vec_dot_type,
// rearranged once per matmul by that type's gemm_pack (rows past n are zero). gemm_tile then computes
// kGemmRows weight rows (ldw bytes apart) x the panel's tokens, C[j * ldc + i] = row i . token j, with each
// pair's vec_dot arithmetic: bit-identical to vec_dot at the same level (batch invariance). The tile reuses
// every decoded weight block for kGemmCols tokens and every loaded token block for kGemmRows weight rows.
constexpr int kGemmRows = 4, kGemmCols = 4;
// Decode (optional, per SIMD level): nr <= kMaxWeightRows weight rows (bx bytes apart) against one
// activation row, s[i] = row i . y, each row bit-identical to vec_dot (independent accumulator chains
// overlap instead of one row's chain bounding the step).
constexpr int kMaxWeightRows = 4;
typedef void (*vec_dot_rows_fn)(int n, float* s, const void* x, size_t bx, const void* y, int nr);
typedef void (*gemm_pack_fn)(const void* acts, size_t row_bytes, int n, int64_t K, void* panel);
// nc (1..kGemmCols): the panel's tokens in use; only their results are computed and written
typedef void (*gemm_tile_fn)(int K, const void* w, size_t ldw, const void* panel, float* C, size_t ldc, int nc);
// Prefill on decoded rows (optional, per SIMD level): dec_row writes one weight row of n elements in an
// unpacked form of dec_row_bytes(n) bytes (64-byte aligned), and vec_dot_dec_k is vec_dot_k on such a
// row, bit-identical to vec_dot_k on the packed row. For types whose decode costs more than several
// dots (grid lookups): matmul decodes each weight row once per batch instead of once per <= 8 tokens.
typedef void (*dec_row_fn)(int n, const void* x, void* out);
// AMX prefill for weights whose row kernel keeps one integer per super-block (optional, level amx):
// amx_dec decodes kAmxRows weight rows (ldw bytes apart) into amx_w_bytes(K), the vec_dot type's amx_pack
// packs up to kAmxCols activation rows into amx_a_bytes(K) (zeros past n), and amx_tile computes
// C[j * ldc + i] = row i . token j for tokens j < nc, each pair bit-identical to the row kernel matmul
// uses for this weight (for Q4_K: vec_dot_rp, so only where matmul would use the rp arithmetic).
constexpr int kAmxRows = 16, kAmxCols = 32;
typedef void (*amx_dec_fn)(int K, const void* w, size_t ldw, void* out);
typedef void (*amx_tile_fn)(int K, const void* wpanel, const void* apanel, float* C, size_t ldc, int nc);
// Prefill tiles on decoded rows (optional, level amx): dec_tile_pack puts one row written by dec_row at
// place i (< kDecTileRows) of a tile of dec_tile_bytes(K) bytes; dec_tile computes a tile against one
// panel of kDecTileCols tokens (dec_panel_pack of the vec_dot_type, rows past n zero), C[j * ldc + i] =
// row i . token j for the nc tokens in use, each pair bit-identical to vec_dot_dec_k (so to vec_dot).
constexpr int kDecTileRows = 16, kDecTileCols = 16;
typedef void (*dec_tile_pack_fn)(int64_t K, const void* dec, int i, void* tile);
typedef void (*dec_tile_fn)(int64_t K, const void* tile, const void* panel, float* C, size_t ldc, int nc);
// Weights in 16-row groups (ggml/repack.h; every SIMD level, for the types interleave_supported names): the
// group g's 16 rows against k <= kMaxRowsK activation rows (by bytes apart), C[t * ldc + r] = row r . token t,
// each row with vec_dot_rp's bits (vec_dot's for a type without rp arithmetic) whatever k is.
typedef void (*x16_tile_fn)(int n, const void* g, const void* y, size_t by, int k, float* C, size_t ldc);
// How a group kernel reads its stream at decode (cpu/prefetch_tune.h): no software prefetch, prefetch into L1
// or L2, or no prefetch with two groups read side by side (x16_streams: more streams for the hardware
// prefetcher; decodes and batches up to the type's x16_streams_k tokens).
enum X16Prefetch { kX16PfNone = 0, kX16PfL1 = 1, kX16PfL2 = 2, kX16PfStreams = 3, kX16PfModes = 4 };
// kX16Streams consecutive groups, gstride bytes apart, against k (<= the type's x16_streams_k) activation rows by
// bytes apart: C[t * ldc + 16 * j + r] = row r of group j . token t, each row with x16_tile's bits (the groups
// interleave their blocks; each row's own order is unchanged).
constexpr int kX16Streams = 2;
typedef void (*x16_streams_fn)(int n, const void* g, size_t gstride, const void* y, size_t by, int k, float* C,
                               size_t ldc);
// AMX tiles on weights in 16-row groups (optional, level amx): the group g's 16 rows against one panel of up to
// kAmxCols tokens (x16_amx_pack of the vec_dot type, zeros past n), C[t * ldc + r] = row r . token t for t < nc,
// each pair with x16_tile's bits. matmul takes them for verification batches and short prompts.
typedef void (*x16_amx_fn)(int K, const void* g, const void* panel, float* C, size_t ldc, int nc);

struct type_traits {
  const char* name;       // GGML's name, e.g. "q4_K"
  int64_t blck_size;      // elements per block (0 = id not a valid GGUF type)
  size_t type_size;       // bytes per block
  to_float_fn to_float;   // dequantize (scalar reference or SIMD override)
  from_float_fn from_float;  // quantize (needed for vec_dot types: Q8_0, Q8_1, Q8_K, F16, BF16, F32)
  vec_dot_fn vec_dot;     // weight row . activation row
  ggml_type vec_dot_type; // what activations are quantized to for this weight type
  bool compute;           // true when to_float and vec_dot exist: loadable as a weight
  vec_dot_k_fn vec_dot_k;  // optional (nullptr = call vec_dot per row)
  // activation quantizer used by matmul: upstream's x86 path for Q8_0/Q8_1 (scale by 127/max,
  // round half to even), which differs from the reference quantizer in the last bit of some values
  from_float_fn from_float_act;
  // the arithmetic llama.cpp uses when it repacks this weight type for its CPU backend
  // (CPU_REPACK, on by default; x86 repacks Q4_K and MXFP4 matrices with a multiple of 8 rows, AVX-512
  // builds Q2_K too; IQ4_NL keeps vec_dot's, see quants_lowbit_simd.inc.h). matmul
  // uses it for such weights; nullptr = same as vec_dot.
  vec_dot_fn vec_dot_rp = nullptr;
  vec_dot_k_fn vec_dot_rp_k = nullptr;  // k rows of vec_dot_rp (same contract as vec_dot_k)
  vec_dot_rows_fn vec_dot_rp_rows = nullptr;  // decode rows of vec_dot_rp (same contract as vec_dot_rows)
  // prefill tiles: gemm_tile on a weight type (nullptr = none at this level; only for weights matmul
  // would not repack), gemm_pack and gemm_panel_bytes(K) on its vec_dot_type
  gemm_tile_fn gemm_tile = nullptr;
  gemm_pack_fn gemm_pack = nullptr;
  size_t (*gemm_panel_bytes)(int64_t K) = nullptr;
  vec_dot_rows_fn vec_dot_rows = nullptr;  // decode: several weight rows, one activation row (not rp weights)
  dec_row_fn dec_row = nullptr;  // prefill on decoded rows (not rp weights)
  size_t (*dec_row_bytes)(int64_t K) = nullptr;
  vec_dot_k_fn vec_dot_dec_k = nullptr;
  amx_dec_fn amx_dec = nullptr;  // AMX prefill (see kAmxRows): on the weight type
  size_t (*amx_w_bytes)(int64_t K) = nullptr;
  amx_tile_fn amx_tile = nullptr;
  int amx_min_rows = 16;  // tokens from which matmul takes amx_tile (a type whose row kernel is slow: fewer)
  gemm_pack_fn amx_pack = nullptr;  // on the vec_dot type
  size_t (*amx_a_bytes)(int64_t K) = nullptr;
  dec_tile_pack_fn dec_tile_pack = nullptr;  // AMX tiles on decoded rows (weight type)
  size_t (*dec_tile_bytes)(int64_t K) = nullptr;
  dec_tile_fn dec_tile = nullptr;
  gemm_pack_fn dec_panel_pack = nullptr;  // their activation panels (vec_dot_type)
  size_t (*dec_panel_bytes)(int64_t K) = nullptr;
  x16_tile_fn x16_tile = nullptr;  // weights in 16-row groups (decode, verification, prefill without AMX)
  x16_tile_fn x16_tile_pf[kX16PfModes] = {};  // x16_tile with each software prefetch, where the level has them
  x16_streams_fn x16_streams = nullptr;          // kX16PfStreams' decode kernel (where the level has one)
  int x16_streams_k = 0;                         // the most tokens it takes
  bool x16_simd = false;  // x16_tile is this level's SIMD kernel (not the scalar reference): a model's load groups only then
  x16_amx_fn x16_amx = nullptr;    // the same on AMX tiles (weight type)
  gemm_pack_fn x16_amx_pack = nullptr;  // its activation panels (vec_dot type)
  size_t (*x16_amx_panel_bytes)(int64_t K) = nullptr;
};

// THE table (csrc/ggml/traits.cpp). Index by id; ids outside [0, GGML_TYPE_COUNT) are invalid.
const type_traits& get_type_traits(ggml_type t);
bool type_id_valid(int64_t id);  // a GGML id that a GGUF file may carry (block size known)
const char* type_name(ggml_type t);
size_t row_size(ggml_type t, int64_t ne0);  // bytes of one row of ne0 elements

// Which SIMD level the dispatcher picked: "avx512", "avx2" or "scalar". Chosen at start-up from
// the CPU's features; settable for tests (not while kernels run on other threads). Setting a level
// the CPU (or this build) lacks throws std::runtime_error; "auto" picks the best again.
const char* simd_level();
void set_simd_level(const char* level);  // "auto", "scalar", "avx2", "avx512", "amx" (avx512 + AMX tiles)
bool simd_level_supported(const char* level);

}  // namespace pyllm
