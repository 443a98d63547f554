#include "cpu/attention.h"

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/attention_tiles.h"
#include "cpu/ops.h"
#include "ggml/fp16.h"
#include "ggml/types.h"
#include "ggml/vec_dot_ggml.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace pyllm {

#if defined(__x86_64__)
__attribute__((target("avx2,f16c"))) static void store_f16c(uint16_t* dst, const float* src, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i*)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; i++) dst[i] = fp32_to_fp16(src[i]);
}
static const bool kHasF16C = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
static const bool kHasF16C = false;
#endif

void store_f16(uint16_t* dst, const float* src, int n) {
#if defined(__x86_64__)
  if (kHasF16C) { store_f16c(dst, src, n); return; }
#endif
  for (int i = 0; i < n; i++) dst[i] = fp32_to_fp16(src[i]);
}

// ---------------------------------------------------------------------------------------------
// Attention with the numerics of ggml's CPU flash-attention kernel (ops.cpp,
// ggml_compute_forward_flash_attn_ext_f16_one_chunk), which llama.cpp uses by default (-fa auto)
// for prompts shorter than its 64-row tile and for decoding with fewer than 512 KV cells:
//   * Q is rounded to f16; scores = ggml_vec_dot_f16(K, Q) (f32 lanes, ggml's reduction order)
//   * online softmax over the keys in cache order, the V accumulator is an f16 vector:
//     ggml_vec_scale_f16 / ggml_vec_mad_f16. With AVX512-FP16 (native builds on Sapphire Rapids)
//     ggml does these in half precision (v rounded to f16, fused multiply-add rounded to f16) for
//     the first DV & ~127 elements and in f32 (then rounded to f16) for the rest; without it every
//     element is done in f32 and rounded to f16.
//   * S = fmaf(S, ms, vs); out = f32(acc) * (1/S)
// The rounding of the f16 accumulator is far from negligible (a tenth of a nat in log-probs after a
// few layers), so we reproduce it; every (row, head) is computed independently, so results do not
// depend on the batch.
// ---------------------------------------------------------------------------------------------

static const bool kHasAvx512F =
#if defined(__x86_64__)
    __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma");
#else
    false;
#endif
// AVX2 machines: the same f32 numerics, 8 lanes at a time (elementwise, so the same bits)
static const bool kHasAvx2 =
#if defined(__x86_64__)
    __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma");
#else
    false;
#endif
// The half-precision variant matches an upstream build compiled with AVX512-FP16 (-march=native on
// Sapphire Rapids). The reference we match (shared/fixtures, and upstream built without AMX/FP16,
// which is what runs on these machines: the native build dies in its AMX kernels) accumulates in
// f32, so that is the default; PYLLM_GGML_AVX512FP16=1 selects the native-build numerics.
static bool env_on(const char* name) { const char* v = std::getenv(name); return v && *v && *v != '0'; }
static const bool kHasAvx512FP16 =
#if defined(__x86_64__)
    env_on("PYLLM_GGML_AVX512FP16") && kHasAvx512F && __builtin_cpu_supports("avx512fp16") &&
    __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#else
    false;
#endif

// double -> f16, correctly rounded (round-to-odd to f32, then the RNE f32 -> f16 conversion)
static inline uint16_t fp64_to_fp16(double d) {
  float f = (float)d;
  if ((double)f != d) {
    uint32_t b = fp32_to_bits(f);
    if (!(b & 1u)) {
      const bool away = std::fabs((double)f) < std::fabs(d);
      b = away ? b + 1 : b - 1;
      f = fp32_from_bits(b);
    }
  }
  return fp32_to_fp16(f);
}

// the half-precision part of ggml_vec_scale_f16 / ggml_vec_mad_f16 on AVX512-FP16
static void fa_scale_h(uint16_t* y, float v, int n) {
  const float vh = fp16_to_fp32(fp32_to_fp16(v));
  for (int i = 0; i < n; i++) y[i] = fp32_to_fp16(fp16_to_fp32(y[i]) * vh);  // product exact in f32
}
static void fa_mad_h(uint16_t* y, const uint16_t* x, float v, int n) {
  const double vh = fp16_to_fp32(fp32_to_fp16(v));
  for (int i = 0; i < n; i++) y[i] = fp64_to_fp16(std::fma((double)fp16_to_fp32(x[i]), vh, (double)fp16_to_fp32(y[i])));
}
// the f32 part: compute in f32, round to f16
static void fa_scale_f(uint16_t* y, float v, int n) {
  for (int i = 0; i < n; i++) y[i] = fp32_to_fp16(fp16_to_fp32(y[i]) * v);
}
static void fa_mad_f(uint16_t* y, const uint16_t* x, float v, int n) {
  for (int i = 0; i < n; i++) y[i] = fp32_to_fp16(std::fma(fp16_to_fp32(x[i]), v, fp16_to_fp32(y[i])));
}

#if defined(__x86_64__)
__attribute__((target("avx512fp16,avx512vl,avx512bw,avx512f"))) static void fa_scale_h_hw(uint16_t* y, float v, int n) {
  const __m512h vv = _mm512_set1_ph((_Float16)v);
  for (int i = 0; i < n; i += 32) _mm512_storeu_ph(y + i, _mm512_mul_ph(_mm512_loadu_ph(y + i), vv));
}
__attribute__((target("avx512fp16,avx512vl,avx512bw,avx512f"))) static void fa_mad_h_hw(uint16_t* y, const uint16_t* x, float v, int n) {
  const __m512h vv = _mm512_set1_ph((_Float16)v);
  for (int i = 0; i < n; i += 32)
    _mm512_storeu_ph(y + i, _mm512_fmadd_ph(_mm512_loadu_ph(x + i), vv, _mm512_loadu_ph(y + i)));
}
__attribute__((target("avx512f,f16c,fma"))) static void fa_scale_f_avx512(uint16_t* y, float v, int n) {
  const __m512 vv = _mm512_set1_ps(v);
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(y + i)));
    _mm256_storeu_si256((__m256i*)(y + i), _mm512_cvtps_ph(_mm512_mul_ps(a, vv), _MM_FROUND_TO_NEAREST_INT));
  }
  fa_scale_f(y + i, v, n - i);
}
__attribute__((target("avx512f,f16c,fma"))) static void fa_mad_f_avx512(uint16_t* y, const uint16_t* x, float v, int n) {
  const __m512 vv = _mm512_set1_ps(v);
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(y + i)));
    const __m512 b = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(x + i)));
    _mm256_storeu_si256((__m256i*)(y + i), _mm512_cvtps_ph(_mm512_fmadd_ps(b, vv, a), _MM_FROUND_TO_NEAREST_INT));
  }
  fa_mad_f(y + i, x + i, v, n - i);
}
__attribute__((target("avx2,f16c,fma"))) static void fa_scale_f_avx2(uint16_t* y, float v, int n) {
  const __m256 vv = _mm256_set1_ps(v);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(y + i)));
    _mm_storeu_si128((__m128i*)(y + i), _mm256_cvtps_ph(_mm256_mul_ps(a, vv), _MM_FROUND_TO_NEAREST_INT));
  }
  fa_scale_f(y + i, v, n - i);
}
__attribute__((target("avx2,f16c,fma"))) static void fa_mad_f_avx2(uint16_t* y, const uint16_t* x, float v, int n) {
  const __m256 vv = _mm256_set1_ps(v);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(y + i)));
    const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(x + i)));
    _mm_storeu_si128((__m128i*)(y + i), _mm256_cvtps_ph(_mm256_fmadd_ps(b, vv, a), _MM_FROUND_TO_NEAREST_INT));
  }
  fa_mad_f(y + i, x + i, v, n - i);
}
#endif

// ggml_vec_scale_f16
static inline void fa_scale(uint16_t* y, float v, int n) {
  const int nh = kHasAvx512FP16 ? (n & ~127) : 0;
#if defined(__x86_64__)
  if (nh) fa_scale_h_hw(y, v, nh);
  if (kHasAvx512F) { fa_scale_f_avx512(y + nh, v, n - nh); return; }
  if (kHasAvx2) { fa_scale_f_avx2(y + nh, v, n - nh); return; }
#endif
  fa_scale_f(y + nh, v, n - nh);
}
// ggml_vec_mad_f16: y += x * v
static inline void fa_mad(uint16_t* y, const uint16_t* x, float v, int n) {
  const int nh = kHasAvx512FP16 ? (n & ~127) : 0;
#if defined(__x86_64__)
  if (nh) fa_mad_h_hw(y, x, v, nh);
  if (kHasAvx512F) { fa_mad_f_avx512(y + nh, x + nh, v, n - nh); return; }
  if (kHasAvx2) { fa_mad_f_avx2(y + nh, x + nh, v, n - nh); return; }
#endif
  fa_mad_f(y + nh, x + nh, v, n - nh);
}

// One (row, head): the key loop of ggml's one_chunk kernel. Compiled four times so that the
// helpers inline (AVX512-FP16, AVX-512 f32, AVX2 f32, portable); they give the same bits as ggml's
// build for the matching CPU (see fa_scale / fa_mad for which elements use half precision), the AVX2
// and portable ones those of ggml's AVX-512 f32 build (ggml's own AVX2 build sums in other lanes).
struct FaRow {
  const uint16_t* k;  // key row of position lo (this kv head), rows kstride apart
  const uint16_t* v;
  int64_t kstride, vstride;
  int n;              // keys lo..pos
  const uint16_t* q16;
  uint16_t* acc;      // [Dv] f16 accumulator
  int Dk, Dv;
  float kq_scale, softcap;
};
#define FA_ROW_BODY(DOT, SCALE_H, MAD_H, SCALE_F, MAD_F, NH)                                        \
  const int nh = (NH);                                                                              \
  float S = 0.0f, M = -INFINITY;                                                                    \
  for (int i = 0; i < a.Dv; i++) a.acc[i] = 0;                                                      \
  for (int j = 0; j < a.n; j++) {                                                                   \
    float s = DOT(a.k + j * a.kstride, a.q16, a.Dk);                                                \
    s = s * a.kq_scale;                                                                             \
    if (a.softcap > 0) s = a.softcap * std::tanh(s);                                                \
    float ms = 1.0f, vs = 1.0f;                                                                     \
    if (s > M) {                                                                                    \
      const float Mold = M;                                                                         \
      M = s;                                                                                        \
      ms = std::exp(Mold - M);                                                                      \
      if (nh) SCALE_H(a.acc, ms, nh);                                                               \
      SCALE_F(a.acc + nh, ms, a.Dv - nh);                                                           \
    } else {                                                                                        \
      vs = std::exp(s - M);                                                                         \
    }                                                                                               \
    const uint16_t* vr = a.v + j * a.vstride;                                                       \
    if (nh) MAD_H(a.acc, vr, vs, nh);                                                               \
    MAD_F(a.acc + nh, vr + nh, vs, a.Dv - nh);                                                      \
    S = FMAF(S, ms, vs);                                                                            \
  }                                                                                                 \
  return S;

#if defined(__x86_64__)
#define FMAF(a, b, c) _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)))
__attribute__((target("avx512fp16,avx512vl,avx512bw,avx512f,f16c,fma"))) static float fa_row_fp16(const FaRow& a) {
  FA_ROW_BODY(ggml_dot_f16_avx512, fa_scale_h_hw, fa_mad_h_hw, fa_scale_f_avx512, fa_mad_f_avx512, a.Dv & ~127)
}
__attribute__((target("avx512f,f16c,fma"))) static float fa_row_avx512(const FaRow& a) {
  FA_ROW_BODY(ggml_dot_f16_avx512, fa_scale_h, fa_mad_h, fa_scale_f_avx512, fa_mad_f_avx512, 0)
}
__attribute__((target("avx2,f16c,fma"))) static float fa_row_avx2(const FaRow& a) {
  FA_ROW_BODY(ggml_dot_f16_avx2, fa_scale_h, fa_mad_h, fa_scale_f_avx2, fa_mad_f_avx2, 0)
}
#undef FMAF
#endif
#define FMAF(a, b, c) std::fma(a, b, c)
static float fa_row_scalar(const FaRow& a) {
  FA_ROW_BODY(ggml_dot_f16, fa_scale_h, fa_mad_h, fa_scale_f, fa_mad_f, 0)
}
#undef FMAF
#undef FA_ROW_BODY

// The many-query schedule (attention_tiles.cpp) reproduces fa_row_avx512; PYLLM_FA_ROWS=1 keeps the
// per-row loop (the tests compare the two).
static const bool kFaTiles = (kHasAvx512F || kHasAvx2) && !kHasAvx512FP16 && !env_on("PYLLM_FA_ROWS");

static float fa_row(const FaRow& a) {
#if defined(__x86_64__)
  if (kHasAvx512FP16) return fa_row_fp16(a);
  if (kHasAvx512F) return fa_row_avx512(a);
  if (kHasAvx2) return fa_row_avx2(a);
#endif
  return fa_row_scalar(a);
}

// software versions of the half-precision kernels, exposed for tests
void fa_ref_mad_h(uint16_t* y, const uint16_t* x, float v, int n) { fa_mad_h(y, x, v, n); }
void fa_ref_scale_h(uint16_t* y, float v, int n) { fa_scale_h(y, v, n); }

// -ctk / -ctv other than f16 (ggml's one_chunk kernel for those types): K rows are stored with the type's CPU
// quantizer, Q is converted to K's vec_dot type and scored with its vec_dot; a non-f16 V row is dequantized
// to f32 and accumulated in f32 (ggml_vec_scale_f32 / ggml_vec_mad_f32), an f16 V as above. Per (row, head)
// as the f16 kernel, so results do not depend on the batch either.
static from_float_fn kv_quantizer(ggml_type t) {
  const type_traits& tt = get_type_traits(t);
  return tt.from_float_act ? tt.from_float_act : tt.from_float;
}

struct FaRowT {
  const uint8_t* k;
  const uint8_t* v;
  size_t kstride, vstride;  // bytes between positions
  int n;
  const void* qk;           // Q in K's vec_dot type (f16 bits for an f16 K)
  ggml_type tk, tv;
  uint16_t* acc16;          // f16 V: the f16 accumulator
  float* acc32;             // other V: the f32 accumulator
  float* v32;               // scratch [Dv]
  int Dk, Dv;
  float kq_scale, softcap;
};

static float fa_row_typed(const FaRowT& a) {
  const type_traits& tkt = get_type_traits(a.tk);
  const type_traits& tvt = get_type_traits(a.tv);
  const bool v16 = a.tv == GGML_TYPE_F16;
  float S = 0.0f, M = -INFINITY;
  if (v16) std::fill_n(a.acc16, a.Dv, (uint16_t)0); else std::fill_n(a.acc32, a.Dv, 0.0f);
  for (int j = 0; j < a.n; j++) {
    const uint8_t* kr = a.k + j * a.kstride;
    float s;
    if (a.tk == GGML_TYPE_F16) s = ggml_dot_f16((const uint16_t*)kr, (const uint16_t*)a.qk, a.Dk);
    else tkt.vec_dot(a.Dk, &s, kr, a.qk);
    s = s * a.kq_scale;
    if (a.softcap > 0) s = a.softcap * std::tanh(s);
    float ms = 1.0f, vs = 1.0f;
    if (s > M) {
      const float Mold = M;
      M = s;
      ms = std::exp(Mold - M);
      if (v16) fa_scale(a.acc16, ms, a.Dv);
      else for (int i = 0; i < a.Dv; i++) a.acc32[i] *= ms;
    } else {
      vs = std::exp(s - M);
    }
    const uint8_t* vr = a.v + j * a.vstride;
    if (v16) {
      fa_mad(a.acc16, (const uint16_t*)vr, vs, a.Dv);
    } else {
      tvt.to_float(vr, a.v32, a.Dv);
      ggml_mad_f32(a.acc32, a.v32, vs, a.Dv);
    }
    S = std::fma(S, ms, vs);
  }
  return S;
}

void store_kv(Memory& mem, int il, const ForwardIn& in, const float* k, const float* v, const AttnParams& p) {
  const KVLayer& L = mem.kv[il];
  const int64_t nk = (int64_t)p.Hkv * p.Dk, nv = (int64_t)p.Hkv * p.Dv;
  const from_float_fn qk = L.tk == GGML_TYPE_F16 ? nullptr : kv_quantizer(L.tk);
  const from_float_fn qv = L.tv == GGML_TYPE_F16 ? nullptr : kv_quantizer(L.tv);
  for (int r = 0; r < in.n; r++) {
    if (in.pos[r] >= mem.n_ctx_seq) throw std::runtime_error("position " + std::to_string(in.pos[r]) + " beyond the context size");
    if (L.tk == GGML_TYPE_F16) store_f16((uint16_t*)mem.k_ptr(il, in.seq[r], in.pos[r]), k + r * nk, (int)nk);
    else qk(k + r * nk, mem.k_ptr(il, in.seq[r], in.pos[r]), nk);
    if (L.tv == GGML_TYPE_F16) store_f16((uint16_t*)mem.v_ptr(il, in.seq[r], in.pos[r]), v + r * nv, (int)nv);
    else qv(v + r * nv, mem.v_ptr(il, in.seq[r], in.pos[r]), nv);
  }
}

void attention(ThreadPool& tp, Memory& mem, int il, const ForwardIn& in, const float* q, const float* k,
               const float* v, float* out, const AttnParams& p) {
  const int n = in.n;
  const int64_t nk = (int64_t)p.Hkv * p.Dk, nv = (int64_t)p.Hkv * p.Dv;
  const KVLayer& L = mem.kv[il];
  if (L.tk != GGML_TYPE_F16 || L.tv != GGML_TYPE_F16)
    return attention_typed(tp, mem, il, in, q, k, v, out, p);
  store_kv(mem, il, in, k, v, p);
  // ggml: scale /= softcap; s = s*scale; s = softcap*tanhf(s)
  const float kq_scale = p.softcap > 0 ? p.scale / p.softcap : p.scale;
  int64_t work = 0;
  for (int r = 0; r < n; r++) work += in.pos[r] + 1;
  const bool parallel = work * p.H * p.Dk >= 65536;  // dispatch only when there is enough work
  if (kFaTiles && fa_tiles_supported(p.Dk, p.Dv, p.softcap)) {
    // the same per-(row, head) arithmetic as fa_row_avx512, K/V shared by the queries of a kv head
    const FaTiles a{&mem, il, in.seq, in.pos, q, out, p.H, p.Hkv, p.Dk, p.Dv, p.n_swa, kq_scale};
    const std::vector<FaTask> tasks = fa_tiles_plan(in.seq, n, p.H, p.Hkv, parallel ? tp.n_threads() : 1);
    if (!parallel || tasks.size() == 1) {
      for (const FaTask& t : tasks) fa_tiles_run(a, t);
      return;
    }
    // tasks differ in length (causal rows): taken from a shared counter
    tp.for_chunks((int64_t)tasks.size(), [&](int64_t i) { fa_tiles_run(a, tasks[i]); });
    return;
  }
  // one task per (row, head), as ggml's kernel: every head reads its kv head's f16 K/V rows
  const int ratio = p.H / p.Hkv;
  const int64_t total = (int64_t)n * p.H;
  auto body = [&](int64_t t0, int64_t t1) {
    std::vector<uint16_t> q16(p.Dk), acc(p.Dv);
    for (int64_t t = t0; t < t1; t++) {
      const int r = (int)(t / p.H), h = (int)(t % p.H), kvh = h / ratio;
      const int seq = in.seq[r], pos = in.pos[r];
      const int lo = p.n_swa > 0 ? std::max(0, pos - p.n_swa + 1) : 0;
      const float* qh = q + (int64_t)r * p.H * p.Dk + (int64_t)h * p.Dk;
      store_f16(q16.data(), qh, p.Dk);
      FaRow a{(const uint16_t*)mem.k_ptr(il, seq, lo) + (int64_t)kvh * p.Dk, (const uint16_t*)mem.v_ptr(il, seq, lo) + (int64_t)kvh * p.Dv,
              nk, nv,  // cache rows are n_embd_k / n_embd_v apart
              pos - lo + 1, q16.data(), acc.data(), p.Dk, p.Dv, kq_scale, p.softcap};
      const float S = fa_row(a);
      const float S_inv = S == 0.0f ? 0.0f : 1.0f / S;
      float* o = out + (int64_t)r * p.H * p.Dv + (int64_t)h * p.Dv;
      for (int d = 0; d < p.Dv; d++) o[d] = fp16_to_fp32(acc[d]) * S_inv;
    }
  };
  if (!parallel) body(0, total); else tp.parallel_for(total, body);
}

void attention_typed(ThreadPool& tp, Memory& mem, int il, const ForwardIn& in, const float* q, const float* k,
                     const float* v, float* out, const AttnParams& p) {
  const int n = in.n;
  const KVLayer& L = mem.kv[il];
  const type_traits& tkt = get_type_traits(L.tk);
  if (p.Dk % tkt.blck_size || p.Dv % get_type_traits(L.tv).blck_size)
    throw std::runtime_error(std::string("KV cache types ") + type_name(L.tk) + "/" + type_name(L.tv) +
                             ": head sizes " + std::to_string(p.Dk) + "/" + std::to_string(p.Dv) + " are not whole blocks");
  store_kv(mem, il, in, k, v, p);
  const ggml_type qt = L.tk == GGML_TYPE_F16 ? GGML_TYPE_F16 : tkt.vec_dot_type;
  const from_float_fn to_qt = qt == GGML_TYPE_F16 ? nullptr : kv_quantizer(qt);
  const size_t k_head = row_size(L.tk, p.Dk), v_head = row_size(L.tv, p.Dv);
  const int ratio = p.H / p.Hkv;
  const int64_t total = (int64_t)n * p.H;
  const float kq_scale = p.softcap > 0 ? p.scale / p.softcap : p.scale;
  auto body = [&](int64_t t0, int64_t t1) {
    std::vector<uint8_t> qbuf(row_size(qt, p.Dk) + 64);
    std::vector<uint16_t> acc16(p.Dv);
    std::vector<float> acc32(p.Dv), v32(p.Dv);
    for (int64_t t = t0; t < t1; t++) {
      const int r = (int)(t / p.H), h = (int)(t % p.H), kvh = h / ratio;
      const int seq = in.seq[r], pos = in.pos[r];
      const int lo = p.n_swa > 0 ? std::max(0, pos - p.n_swa + 1) : 0;
      const float* qh = q + (int64_t)r * p.H * p.Dk + (int64_t)h * p.Dk;
      if (to_qt) to_qt(qh, qbuf.data(), p.Dk); else store_f16((uint16_t*)qbuf.data(), qh, p.Dk);
      FaRowT a{mem.k_ptr(il, seq, lo) + kvh * k_head, mem.v_ptr(il, seq, lo) + kvh * v_head, L.k_row, L.v_row,
               pos - lo + 1, qbuf.data(), L.tk, L.tv, acc16.data(), acc32.data(), v32.data(), p.Dk, p.Dv,
               kq_scale, p.softcap};
      const float S = fa_row_typed(a);
      const float S_inv = S == 0.0f ? 0.0f : 1.0f / S;
      float* o = out + (int64_t)r * p.H * p.Dv + (int64_t)h * p.Dv;
      if (L.tv == GGML_TYPE_F16) for (int d = 0; d < p.Dv; d++) o[d] = fp16_to_fp32(acc16[d]) * S_inv;
      else for (int d = 0; d < p.Dv; d++) o[d] = acc32[d] * S_inv;
    }
  };
  int64_t work = 0;
  for (int r = 0; r < n; r++) work += in.pos[r] + 1;
  if (work * p.H * p.Dk < 65536) body(0, total); else tp.parallel_for(total, body);
}

}  // namespace pyllm
