#include "cpu/delta_net.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/ops.h"
#include "ggml/vec_dot_ggml.h"

namespace pyllm {

// One conv step for all channels. Layouts are time-major so the per-channel FMA chain (ggml_ssm_conv's
// sumf += s*c, contracted by GCC) vectorizes across channels with the same per-lane arithmetic.
// cin/cout: [W][conv_dim] window, oldest first (cout may equal cin); wT: [W+1][conv_dim].
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void gdn_conv_row(const float* cin, float* cout, const float* wT, const float* x, float* y, int cd, int W) {
  for (int c = 0; c < cd; c++) y[c] = 0.f;
  for (int k = 0; k < W; k++) {
    const float* s = cin + (int64_t)k * cd;
    const float* w = wT + (int64_t)k * cd;
    for (int c = 0; c < cd; c++) y[c] = std::fma(s[c], w[c], y[c]);
  }
  const float* w = wT + (int64_t)W * cd;
  for (int c = 0; c < cd; c++) y[c] = std::fma(x[c], w[c], y[c]);
  for (int k = 0; k + 1 < W; k++) std::memmove(cout + (int64_t)k * cd, cin + (int64_t)(k + 1) * cd, sizeof(float) * cd);
  if (W > 0) std::memcpy(cout + (int64_t)(W - 1) * cd, x, sizeof(float) * cd);
}

#if defined(__x86_64__)
#include <immintrin.h>
// One token's delta-rule update of one head, fused per value row j, for dk % 64 == 0:
//   M_j = Min_j * decay; delta_j = (v_j - dot(M_j, k)) * beta; M_j += k * delta_j; o_j = dot(M_j, q) * scale
// Each dot uses ggml_vec_dot_f32's lanes (4 x 16 accumulators over blocks of 64, tree, reduce) and the
// update is ggml_vec_mad_f32's fma, so results equal the unfused ggml_dot_f32/ggml_mad_f32 calls.
__attribute__((target("avx512f,fma"))) static void gdn_rows_avx512(const float* Min, float* M, const float* k, const float* q,
                                                                    const float* v, float decay, float beta, float scale,
                                                                    float* o, int dk, int dv) {
  const __m512 vd = _mm512_set1_ps(decay);
  for (int j = 0; j < dv; j++) {
    const float* mi = Min + (int64_t)j * dk;
    float* mo = M + (int64_t)j * dk;
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int i = 0; i < dk; i += 64)
      for (int t = 0; t < 4; t++) {
        const __m512 m = _mm512_mul_ps(_mm512_loadu_ps(mi + i + 16 * t), vd);
        _mm512_storeu_ps(mo + i + 16 * t, m);
        acc[t] = _mm512_fmadd_ps(m, _mm512_loadu_ps(k + i + 16 * t), acc[t]);
      }
    acc[0] = _mm512_add_ps(acc[0], acc[2]); acc[1] = _mm512_add_ps(acc[1], acc[3]); acc[0] = _mm512_add_ps(acc[0], acc[1]);
    const float delta = (v[j] - _mm512_reduce_add_ps(acc[0])) * beta;
    const __m512 vdelta = _mm512_set1_ps(delta);
    __m512 aq[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int i = 0; i < dk; i += 64)
      for (int t = 0; t < 4; t++) {
        const __m512 m = _mm512_fmadd_ps(_mm512_loadu_ps(k + i + 16 * t), vdelta, _mm512_loadu_ps(mo + i + 16 * t));
        _mm512_storeu_ps(mo + i + 16 * t, m);
        aq[t] = _mm512_fmadd_ps(m, _mm512_loadu_ps(q + i + 16 * t), aq[t]);
      }
    aq[0] = _mm512_add_ps(aq[0], aq[2]); aq[1] = _mm512_add_ps(aq[1], aq[3]); aq[0] = _mm512_add_ps(aq[0], aq[1]);
    o[j] = _mm512_reduce_add_ps(aq[0]) * scale;
  }
}
// The same per row with the row held in registers between its two passes (DK / 16 zmm): the decayed row
// is not stored and reloaded, so the state streams through once per token instead of twice. Same
// operations in the same order, so the same bits.
template <int DK>
__attribute__((target("avx512f,fma"))) static void gdn_rows_avx512_reg(const float* Min, float* M, const float* k, const float* q,
                                                                        const float* v, float decay, float beta, float scale,
                                                                        float* o, int dv) {
  constexpr int NV = DK / 16;
  const __m512 vd = _mm512_set1_ps(decay);
  __m512 kv[NV];
  for (int t = 0; t < NV; t++) kv[t] = _mm512_loadu_ps(k + 16 * t);
  for (int j = 0; j < dv; j++) {
    const float* mi = Min + (int64_t)j * DK;
    float* mo = M + (int64_t)j * DK;
    __m512 m[NV];
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int t = 0; t < NV; t++) {
      m[t] = _mm512_mul_ps(_mm512_loadu_ps(mi + 16 * t), vd);
      acc[t % 4] = _mm512_fmadd_ps(m[t], kv[t], acc[t % 4]);
    }
    acc[0] = _mm512_add_ps(acc[0], acc[2]); acc[1] = _mm512_add_ps(acc[1], acc[3]); acc[0] = _mm512_add_ps(acc[0], acc[1]);
    const __m512 vdelta = _mm512_set1_ps((v[j] - _mm512_reduce_add_ps(acc[0])) * beta);
    __m512 aq[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int t = 0; t < NV; t++) {
      m[t] = _mm512_fmadd_ps(kv[t], vdelta, m[t]);
      _mm512_storeu_ps(mo + 16 * t, m[t]);
      aq[t % 4] = _mm512_fmadd_ps(m[t], _mm512_loadu_ps(q + 16 * t), aq[t % 4]);
    }
    aq[0] = _mm512_add_ps(aq[0], aq[2]); aq[1] = _mm512_add_ps(aq[1], aq[3]); aq[0] = _mm512_add_ps(aq[0], aq[1]);
    o[j] = _mm512_reduce_add_ps(aq[0]) * scale;
  }
}
// gdn_rows_avx512 on AVX2 machines: each 16-lane accumulator as two 8-lane halves and the same tree
// (vec_dot_ggml.h), so the bits equal the AVX-512 kernels'; the unfused fallback below calls out per
// row (scale_copy, ggml_dot_f32, ggml_mad_f32) and streams the state three times.
__attribute__((target("avx2,f16c,fma"))) static void gdn_rows_avx2(const float* Min, float* M, const float* k, const float* q,
                                                                    const float* v, float decay, float beta, float scale,
                                                                    float* o, int dk, int dv) {
  const __m256 vd = _mm256_set1_ps(decay);
  for (int j = 0; j < dv; j++) {
    const float* mi = Min + (int64_t)j * dk;
    float* mo = M + (int64_t)j * dk;
    __m256 lo[4], hi[4];
    for (int t = 0; t < 4; t++) lo[t] = hi[t] = _mm256_setzero_ps();
    for (int i = 0; i < dk; i += 64)
      for (int t = 0; t < 4; t++) {
        const int c = i + 16 * t;
        const __m256 m0 = _mm256_mul_ps(_mm256_loadu_ps(mi + c), vd), m1 = _mm256_mul_ps(_mm256_loadu_ps(mi + c + 8), vd);
        _mm256_storeu_ps(mo + c, m0); _mm256_storeu_ps(mo + c + 8, m1);
        lo[t] = _mm256_fmadd_ps(m0, _mm256_loadu_ps(k + c), lo[t]);
        hi[t] = _mm256_fmadd_ps(m1, _mm256_loadu_ps(k + c + 8), hi[t]);
      }
    const __m256 vdelta = _mm256_set1_ps((v[j] - tree_reduce16_avx2(lo, hi)) * beta);
    for (int t = 0; t < 4; t++) lo[t] = hi[t] = _mm256_setzero_ps();
    for (int i = 0; i < dk; i += 64)
      for (int t = 0; t < 4; t++) {
        const int c = i + 16 * t;
        const __m256 m0 = _mm256_fmadd_ps(_mm256_loadu_ps(k + c), vdelta, _mm256_loadu_ps(mo + c));
        const __m256 m1 = _mm256_fmadd_ps(_mm256_loadu_ps(k + c + 8), vdelta, _mm256_loadu_ps(mo + c + 8));
        _mm256_storeu_ps(mo + c, m0); _mm256_storeu_ps(mo + c + 8, m1);
        lo[t] = _mm256_fmadd_ps(m0, _mm256_loadu_ps(q + c), lo[t]);
        hi[t] = _mm256_fmadd_ps(m1, _mm256_loadu_ps(q + c + 8), hi[t]);
      }
    o[j] = tree_reduce16_avx2(lo, hi) * scale;
  }
}
static const bool kGdnAvx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma");
static const bool kGdnAvx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma");
#endif

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void scale_copy(const float* x, float* y, float a, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = x[i] * a;
}

void gated_delta_net(ThreadPool& tp, Memory& mem, int il, int seq, bool snap, int n, const float* u,
                     const float* z, const float* b, const float* a, float* out, const GDNParams& p) {
  const int key_dim = p.H_k * p.dk, value_dim = p.H_v * p.dv;
  const int conv_dim = 2 * key_dim + value_dim;
  const int W = p.d_conv - 1;  // stored window length
  // snap with n > n_planes: the planes are a ring, the last n_planes rows' states survive (the
  // Context checkpoints such a sequence before: speculative/rs_checkpoint.h)

  // 1. causal depthwise conv + SiLU over all rows: y [n][conv_dim]; rows in order (each reads the
  // window the previous one wrote)
  thread_local std::vector<float> ybuf;
  ybuf.resize((size_t)n * conv_dim);
  float* y = ybuf.data();
  for (int i = 0; i < n; i++) {
    gdn_conv_row(mem.conv_ptr(il, seq, mem.run_in_plane(seq, i, snap)), mem.conv_ptr(il, seq, mem.run_out_plane(seq, i, snap)),
                 p.conv_w, u + (int64_t)i * conv_dim, y + (int64_t)i * conv_dim, conv_dim, W);
  }
  for (int i = 0; i < n; i++) silu_row(y + (int64_t)i * conv_dim, y + (int64_t)i * conv_dim, conv_dim);  // ggml_silu, one row per token

  // 2. per value head: L2-normalised q/k (tiled key head h % H_k), decay, delta rule, output.
  // Arithmetic as ggml's fused GATED_DELTA_NET CPU op (which llama.cpp uses for prefill and
  // decode alike): the state is kept transposed, M[j][i] = S[i][j] (j: value, i: key), rows are
  // reduced with ggml_vec_dot_f32 and updated with ggml_vec_mad_f32 (fma), o = dot(M[j], q) * scale.
  const float scale = 1.0f / std::sqrt((float)p.dv);
  auto head_body = [&](int64_t h0, int64_t h1) {
    std::vector<float> qn(p.dk), kn(p.dk), delta(p.dv), o(p.dv), zs(p.dv);
    for (int64_t h = h0; h < h1; h++) {
      const int kh = (int)(h % p.H_k);
      for (int i = 0; i < n; i++) {
        const float* yr = y + (int64_t)i * conv_dim;
        l2_norm(yr + kh * p.dk, qn.data(), p.dk, p.eps);
        l2_norm(yr + key_dim + kh * p.dk, kn.data(), p.dk, p.eps);
        const float* v = yr + 2 * key_dim + h * p.dv;
        const float beta = sigmoid(b[(int64_t)i * p.H_v + h]);
        const float g = softplus(a[(int64_t)i * p.H_v + h] + p.dt_bias[h]) * p.ssm_a[h];
        const float decay = std::exp(g);
        const float* Min = mem.ssm_ptr(il, seq, mem.run_in_plane(seq, i, snap)) + (int64_t)h * p.dk * p.dv;
        float* M = mem.ssm_ptr(il, seq, mem.run_out_plane(seq, i, snap)) + (int64_t)h * p.dk * p.dv;  // [dv][dk]
#if defined(__x86_64__)
        if (kGdnAvx512 && (p.dk == 64 || p.dk == 128)) {
          if (p.dk == 64) gdn_rows_avx512_reg<64>(Min, M, kn.data(), qn.data(), v, decay, beta, scale, o.data(), p.dv);
          else gdn_rows_avx512_reg<128>(Min, M, kn.data(), qn.data(), v, decay, beta, scale, o.data(), p.dv);
        } else if (kGdnAvx512 && p.dk % 64 == 0) {
          gdn_rows_avx512(Min, M, kn.data(), qn.data(), v, decay, beta, scale, o.data(), p.dk, p.dv);
        } else if (kGdnAvx2 && p.dk % 64 == 0) {
          gdn_rows_avx2(Min, M, kn.data(), qn.data(), v, decay, beta, scale, o.data(), p.dk, p.dv);
        } else
#endif
        {
          scale_copy(Min, M, decay, (int64_t)p.dk * p.dv);
          for (int j = 0; j < p.dv; j++) delta[j] = (v[j] - ggml_dot_f32(M + (int64_t)j * p.dk, kn.data(), p.dk)) * beta;
          for (int j = 0; j < p.dv; j++) ggml_mad_f32(M + (int64_t)j * p.dk, kn.data(), delta[j], p.dk);
          for (int j = 0; j < p.dv; j++) o[j] = ggml_dot_f32(M + (int64_t)j * p.dk, qn.data(), p.dk) * scale;
        }
        // gated RMSNorm: RMS(o, norm) * SiLU(z)
        float* dst = out + (int64_t)i * value_dim + h * p.dv;
        rms_norm(o.data(), p.norm_w, dst, p.dv, p.eps);
        const float* zr = z + (int64_t)i * value_dim + h * p.dv;  // already SiLU(z)
        for (int c = 0; c < p.dv; c++) dst[c] *= zr[c];
      }
    }
  };
  if ((int64_t)n * p.H_v * p.dk * p.dv >= 32768) tp.parallel_for(p.H_v, head_body); else head_body(0, p.H_v);
}

}  // namespace pyllm
