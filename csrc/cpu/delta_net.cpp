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

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void scale_copy(const float* x, float* y, float a, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = x[i] * a;
}

void gated_delta_net(ThreadPool& tp, Memory& mem, int il, int seq, bool snap, int n, const float* u,
                     const float* z, const float* b, const float* a, float* out, const GDNParams& p) {
  const int key_dim = p.H_k * p.dk, value_dim = p.H_v * p.dv;
  const int conv_dim = 2 * key_dim + value_dim;
  const int W = p.d_conv - 1;  // stored window length
  if (snap && n > mem.n_planes) throw std::runtime_error("verification batch longer than the recurrent snapshots");

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
        scale_copy(Min, M, decay, (int64_t)p.dk * p.dv);
        for (int j = 0; j < p.dv; j++) delta[j] = (v[j] - ggml_dot_f32(M + (int64_t)j * p.dk, kn.data(), p.dk)) * beta;
        for (int j = 0; j < p.dv; j++) ggml_mad_f32(M + (int64_t)j * p.dk, kn.data(), delta[j], p.dk);
        for (int j = 0; j < p.dv; j++) o[j] = ggml_dot_f32(M + (int64_t)j * p.dk, qn.data(), p.dk) * scale;
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
