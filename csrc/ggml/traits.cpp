// THE traits table: one row per GGML type id. Kernels live in the per-type files; SIMD versions
// replace the scalar pointers at start-up (see dispatch in this file).
#include "ggml/types.h"
#include "ggml/fp16.h"
#include "ggml/quants.h"
#include "ggml/quants_iq.h"
#include "ggml/repack.h"
#include "ggml/vec_dot_ggml.h"

#include <cmath>
#if defined(PYLLM_X86)
#include <immintrin.h>
#endif

#include <cstring>
#include <stdexcept>
#include <string>

namespace pyllm {

// ---- plain float types (scalar reference) ----
static void f32_to_float(const void* x, float* y, int64_t n) { std::memcpy(y, x, n * sizeof(float)); }
static void f32_from_float(const float* x, void* y, int64_t n) { std::memcpy(y, x, n * sizeof(float)); }
// ---- ggml_vec_dot_f32 / _f16 (see vec_dot_ggml.h) ----
static inline float reduce16(const float* a) {  // _mm512_reduce_add_ps
  float t[8], u[4];
  for (int l = 0; l < 8; l++) t[l] = a[l + 8] + a[l];
  for (int l = 0; l < 4; l++) u[l] = t[l + 4] + t[l];
  return (u[0] + u[2]) + (u[1] + u[3]);
}
template <class T, float (*CV)(T)>
static float ggml_dot_scalar(const T* x, const T* y, int n, bool tail_double) {
  const int np = n & ~63;
  float acc[4][16] = {};
  for (int i = 0; i < np; i += 64)
    for (int j = 0; j < 4; j++)
      for (int l = 0; l < 16; l++) acc[j][l] = std::fma(CV(x[i + 16 * j + l]), CV(y[i + 16 * j + l]), acc[j][l]);
  float a[16];
  for (int l = 0; l < 16; l++) a[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
  const float r = reduce16(a);
  if (tail_double) {  // f16: sumf is ggml_float, tail products added in double
    double sum = r;
    for (int i = np; i < n; i++) sum += (double)(CV(x[i]) * CV(y[i]));
    return (float)sum;
  }
  float sum = r;  // f32: float sum, tail contracted to fma
  for (int i = np; i < n; i++) sum = std::fma(CV(x[i]), CV(y[i]), sum);
  return sum;
}
static inline float cv_f32(float v) { return v; }
static inline float cv_f16(uint16_t v) { return fp16_to_fp32(v); }

#if defined(PYLLM_X86)
static const bool kDotAvx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma");
static const bool kDotAvx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma");
#endif

float ggml_dot_f32(const float* x, const float* y, int n) {
#if defined(PYLLM_X86)
  if (kDotAvx512) return ggml_dot_f32_avx512(x, y, n);
  if (kDotAvx2) return ggml_dot_f32_avx2(x, y, n);
#endif
  return ggml_dot_scalar<float, cv_f32>(x, y, n, false);
}
float ggml_dot_f16(const uint16_t* x, const uint16_t* y, int n) {
#if defined(PYLLM_X86)
  if (kDotAvx512) return ggml_dot_f16_avx512(x, y, n);
  if (kDotAvx2) return ggml_dot_f16_avx2(x, y, n);
#endif
  return ggml_dot_scalar<uint16_t, cv_f16>(x, y, n, true);
}

#if defined(PYLLM_X86)
__attribute__((target("avx512f,fma"))) static void ggml_mad_f32_avx512(float* y, const float* x, float v, int n) {
  const __m512 vv = _mm512_set1_ps(v);
  int i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_fmadd_ps(_mm512_loadu_ps(x + i), vv, _mm512_loadu_ps(y + i)));
  for (; i < n; i++) y[i] = std::fma(x[i], v, y[i]);
}
__attribute__((target("avx2,fma"))) static void ggml_mad_f32_avx2(float* y, const float* x, float v, int n) {
  const __m256 vv = _mm256_set1_ps(v);
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), vv, _mm256_loadu_ps(y + i)));
  for (; i < n; i++) y[i] = __builtin_fmaf(x[i], v, y[i]);
}
#endif
void ggml_mad_f32(float* y, const float* x, float v, int n) {
#if defined(PYLLM_X86)
  if (kDotAvx512) { ggml_mad_f32_avx512(y, x, v, n); return; }
  if (kDotAvx2) { ggml_mad_f32_avx2(y, x, v, n); return; }
#endif
  for (int i = 0; i < n; i++) y[i] = std::fma(x[i], v, y[i]);
}

// F32/F16 weights: ggml's decode-path kernels (llama.cpp's prefill goes through llamafile's
// tinyBLAS, which sums differently; we keep one kernel for every batch size)
static void f32_vec_dot(int n, float* s, const void* x, const void* y) {
  *s = ggml_dot_f32((const float*)x, (const float*)y, n);
}
static void f16_to_float(const void* x, float* y, int64_t n) {
  const uint16_t* h = (const uint16_t*)x; for (int64_t i = 0; i < n; i++) y[i] = fp16_to_fp32(h[i]);
}
static void f16_from_float(const float* x, void* y, int64_t n) {
  uint16_t* h = (uint16_t*)y; for (int64_t i = 0; i < n; i++) h[i] = fp32_to_fp16(x[i]);
}
static void f16_vec_dot(int n, float* s, const void* x, const void* y) {
  *s = ggml_dot_f16((const uint16_t*)x, (const uint16_t*)y, n);
}
static void bf16_to_float(const void* x, float* y, int64_t n) {
  const uint16_t* h = (const uint16_t*)x; for (int64_t i = 0; i < n; i++) y[i] = bf16_to_fp32(h[i]);
}
static void bf16_from_float(const float* x, void* y, int64_t n) {
  uint16_t* h = (uint16_t*)y; for (int64_t i = 0; i < n; i++) h[i] = fp32_to_bf16(x[i]);
}
static void bf16_vec_dot(int n, float* s, const void* x, const void* y) {
  const uint16_t* a = (const uint16_t*)x; const uint16_t* b = (const uint16_t*)y;
  double acc = 0; for (int i = 0; i < n; i++) acc += (double)bf16_to_fp32(a[i]) * bf16_to_fp32(b[i]);
  *s = (float)acc;
}

#define T(id, nm, blck, size) table[id] = type_traits{nm, blck, size, nullptr, nullptr, nullptr, GGML_TYPE_F32, false, nullptr}

// `table` is what callers see; `scalar_table` keeps the reference pointers so a SIMD level can be
// re-applied from scratch (scalar, then avx2 overrides, then avx512 overrides).
static type_traits table[GGML_TYPE_COUNT];
static type_traits scalar_table[GGML_TYPE_COUNT];

static void init_table() {
  for (auto& t : table) t = type_traits{nullptr, 0, 0, nullptr, nullptr, nullptr, GGML_TYPE_F32, false, nullptr};
  T(GGML_TYPE_F32, "f32", 1, 4);     T(GGML_TYPE_F16, "f16", 1, 2);
  T(GGML_TYPE_Q4_0, "q4_0", 32, 18); T(GGML_TYPE_Q4_1, "q4_1", 32, 20);
  T(GGML_TYPE_Q5_0, "q5_0", 32, 22); T(GGML_TYPE_Q5_1, "q5_1", 32, 24);
  T(GGML_TYPE_Q8_0, "q8_0", 32, 34); T(GGML_TYPE_Q8_1, "q8_1", 32, 36);
  T(GGML_TYPE_Q2_K, "q2_K", 256, 84); T(GGML_TYPE_Q3_K, "q3_K", 256, 110);
  T(GGML_TYPE_Q4_K, "q4_K", 256, 144); T(GGML_TYPE_Q5_K, "q5_K", 256, 176);
  T(GGML_TYPE_Q6_K, "q6_K", 256, 210); T(GGML_TYPE_Q8_K, "q8_K", 256, 292);
  T(GGML_TYPE_IQ2_XXS, "iq2_xxs", 256, 66); T(GGML_TYPE_IQ2_XS, "iq2_xs", 256, 74);
  T(GGML_TYPE_IQ3_XXS, "iq3_xxs", 256, 98); T(GGML_TYPE_IQ1_S, "iq1_s", 256, 50);
  T(GGML_TYPE_IQ4_NL, "iq4_nl", 32, 18); T(GGML_TYPE_IQ3_S, "iq3_s", 256, 110);
  T(GGML_TYPE_IQ2_S, "iq2_s", 256, 82); T(GGML_TYPE_IQ4_XS, "iq4_xs", 256, 136);
  T(GGML_TYPE_I8, "i8", 1, 1); T(GGML_TYPE_I16, "i16", 1, 2); T(GGML_TYPE_I32, "i32", 1, 4);
  T(GGML_TYPE_I64, "i64", 1, 8); T(GGML_TYPE_F64, "f64", 1, 8);
  T(GGML_TYPE_IQ1_M, "iq1_m", 256, 56); T(GGML_TYPE_BF16, "bf16", 1, 2);
  T(GGML_TYPE_TQ1_0, "tq1_0", 256, 54); T(GGML_TYPE_TQ2_0, "tq2_0", 256, 66);
  T(GGML_TYPE_MXFP4, "mxfp4", 32, 17); T(GGML_TYPE_NVFP4, "nvfp4", 64, 36);
  T(GGML_TYPE_Q1_0, "q1_0", 128, 18); T(GGML_TYPE_Q2_0, "q2_0", 64, 18);

  auto set = [](ggml_type id, to_float_fn tf, from_float_fn ff, vec_dot_fn vd, ggml_type vdt) {
    table[id].to_float = tf; table[id].from_float = ff; table[id].vec_dot = vd;
    table[id].vec_dot_type = vdt; table[id].compute = tf && vd;
  };
  set(GGML_TYPE_F32, f32_to_float, f32_from_float, f32_vec_dot, GGML_TYPE_F32);
  set(GGML_TYPE_F16, f16_to_float, f16_from_float, f16_vec_dot, GGML_TYPE_F16);
  set(GGML_TYPE_BF16, bf16_to_float, bf16_from_float, bf16_vec_dot, GGML_TYPE_BF16);
  using namespace ref;
  set(GGML_TYPE_Q4_0, dequantize_row_q4_0, quantize_row_q4_0, vec_dot_q4_0_q8_0, GGML_TYPE_Q8_0);
  set(GGML_TYPE_Q4_1, dequantize_row_q4_1, quantize_row_q4_1, vec_dot_q4_1_q8_1, GGML_TYPE_Q8_1);
  set(GGML_TYPE_Q5_0, dequantize_row_q5_0, quantize_row_q5_0, vec_dot_q5_0_q8_0, GGML_TYPE_Q8_0);
  set(GGML_TYPE_Q5_1, dequantize_row_q5_1, quantize_row_q5_1, vec_dot_q5_1_q8_1, GGML_TYPE_Q8_1);
  set(GGML_TYPE_Q8_0, dequantize_row_q8_0, quantize_row_q8_0, vec_dot_q8_0_q8_0, GGML_TYPE_Q8_0);
  set(GGML_TYPE_Q8_1, dequantize_row_q8_1, quantize_row_q8_1, nullptr, GGML_TYPE_Q8_1);
  set(GGML_TYPE_Q2_K, dequantize_row_q2_K, quantize_row_q2_K, vec_dot_q2_K_q8_K, GGML_TYPE_Q8_K);
  set(GGML_TYPE_Q3_K, dequantize_row_q3_K, quantize_row_q3_K, vec_dot_q3_K_q8_K, GGML_TYPE_Q8_K);
  set(GGML_TYPE_Q4_K, dequantize_row_q4_K, quantize_row_q4_K, vec_dot_q4_K_q8_K, GGML_TYPE_Q8_K);
  set(GGML_TYPE_Q5_K, dequantize_row_q5_K, quantize_row_q5_K, vec_dot_q5_K_q8_K, GGML_TYPE_Q8_K);
  set(GGML_TYPE_Q6_K, dequantize_row_q6_K, quantize_row_q6_K, vec_dot_q6_K_q8_K, GGML_TYPE_Q8_K);
  set(GGML_TYPE_Q8_K, dequantize_row_q8_K, quantize_row_q8_K, nullptr, GGML_TYPE_Q8_K);
  set(GGML_TYPE_IQ4_NL, dequantize_row_iq4_nl, quantize_row_iq4_nl, vec_dot_iq4_nl_q8_0, GGML_TYPE_Q8_0);
  set(GGML_TYPE_IQ4_XS, dequantize_row_iq4_xs, quantize_row_iq4_xs, vec_dot_iq4_xs_q8_K, GGML_TYPE_Q8_K);
  register_iq_types(table);  // IQ1/IQ2/IQ3 lattice types and MXFP4 (quants_iq.cpp)
  table[GGML_TYPE_Q4_K].x16_tile = x16_q4_K_ref;  // ggml/repack.h
  table[GGML_TYPE_IQ4_NL].x16_tile = x16_iq4_nl_ref;
  table[GGML_TYPE_Q8_0].x16_tile = x16_q8_0_ref;
  table[GGML_TYPE_Q4_0].x16_tile = x16_q4_0_ref;
  table[GGML_TYPE_Q4_1].x16_tile = x16_q4_1_ref;
  for (auto& t : table) t.from_float_act = t.from_float;
  table[GGML_TYPE_Q8_0].from_float_act = quantize_row_q8_0_act;
  table[GGML_TYPE_Q8_1].from_float_act = quantize_row_q8_1_act;
  std::memcpy(scalar_table, table, sizeof table);
}

// ---- run-time dispatch ----
// amx: avx512 plus the AMX prefill tiles (csrc/ggml/x86/quants_amx.cpp)
enum simd_t { SIMD_SCALAR = 0, SIMD_AVX2 = 1, SIMD_AVX512 = 2, SIMD_AMX = 3 };
constexpr int kLevels = 4;
static const char* const simd_names[kLevels] = {"scalar", "avx2", "avx512", "amx"};
static simd_t g_level = SIMD_SCALAR;

static simd_t best_supported() {
#if defined(PYLLM_X86)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bf16") &&
                      __builtin_cpu_supports("bmi2");
  if (avx512 && amx_usable()) return SIMD_AMX;
  return avx512 ? SIMD_AVX512 : avx2 ? SIMD_AVX2 : SIMD_SCALAR;
#else
  return SIMD_SCALAR;
#endif
}

static void apply_level(simd_t lv) {
  std::memcpy(table, scalar_table, sizeof table);
#if defined(PYLLM_X86)
  if (lv >= SIMD_AVX2) quants_override_avx2(table);
  if (lv >= SIMD_AVX512) quants_override_avx512(table);
  if (lv >= SIMD_AMX) quants_override_amx(table);
#endif
  for (auto& t : table) t.compute = t.to_float && t.vec_dot;
  g_level = lv;
}

#if !defined(PYLLM_X86)
bool amx_usable() { return false; }
void amx_new_epoch() {}
#endif

static struct TableInit { TableInit() { init_table(); apply_level(best_supported()); } } table_init;

const type_traits& get_type_traits(ggml_type t) {
  if ((int)t < 0 || (int)t >= GGML_TYPE_COUNT) throw std::out_of_range("invalid ggml type id " + std::to_string((int)t));
  return table[t];
}
bool type_id_valid(int64_t id) { return id >= 0 && id < GGML_TYPE_COUNT && table[id].blck_size > 0; }
const char* type_name(ggml_type t) {
  return type_id_valid(t) ? table[t].name : "unknown";
}
size_t row_size(ggml_type t, int64_t ne0) { return (size_t)(ne0 / table[t].blck_size) * table[t].type_size; }

const char* simd_level() { return simd_names[g_level]; }

static simd_t parse_level(const char* level) {
  if (!std::strcmp(level, "auto")) return best_supported();
  for (int i = 0; i < kLevels; i++)
    if (!std::strcmp(level, simd_names[i])) return (simd_t)i;
  throw std::invalid_argument(std::string("unknown SIMD level '") + level +
                              "' (expected auto, scalar, avx2, avx512 or amx)");
}
bool simd_level_supported(const char* level) { return parse_level(level) <= best_supported(); }
void set_simd_level(const char* level) {
  const simd_t lv = parse_level(level);
  if (lv > best_supported())
    throw std::runtime_error(std::string("SIMD level '") + level + "' is not supported by this CPU/build (best: " +
                             simd_names[best_supported()] + ")");
  apply_level(lv);
}

}  // namespace pyllm
