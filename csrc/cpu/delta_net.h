// Gated DeltaNet (Qwen3.5/3.6 linear-attention layers), recurrent form, for one run of rows of one
// sequence. Heads run in parallel; rows run in order inside each head. With snapshots, row i reads
// recurrent plane in(i) and writes plane out(i) so every verified position can be restored.
#pragma once
#include "cpu/threadpool.h"
#include "memory/memory.h"

namespace pyllm {

struct GDNParams {
  int H_k, H_v, dk, dv, d_conv;
  float eps;
  const float* ssm_a;    // [H_v]  = -exp(A_log)
  const float* dt_bias;  // [H_v]
  const float* conv_w;   // [d_conv][conv_dim] (transposed at load: time-major)
  const float* norm_w;   // [dv]
};

// u: [n][conv_dim] = Wqkv x (conv input), z: [n][H_v*dv] = SiLU(Wgate x), b: [n][H_v] (pre-sigmoid beta),
// a: [n][H_v] (alpha logits). out: [n][H_v*dv] = RMS(o, norm_w) * z.
// helpers (exposed for tests)
void gdn_conv_row(const float* cin, float* cout, const float* wT, const float* x, float* y, int cd, int W);
void scale_copy(const float* x, float* y, float a, int64_t n);

void gated_delta_net(ThreadPool& tp, Memory& mem, int il, int seq, bool snap, int n, const float* u,
                     const float* z, const float* b, const float* a, float* out, const GDNParams& p);

}  // namespace pyllm
