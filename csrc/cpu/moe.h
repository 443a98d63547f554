// Mixture-of-experts SwiGLU FFN with softmax routing over all experts, top-k, renormalised weights
// (Qwen3.5/3.6-MoE). Only the selected experts' weights are read. Each row sums its experts in rank
// order, so a row's result does not depend on the other rows in the batch.
#pragma once
#include <vector>

#include "cpu/matmul.h"
#include "cpu/threadpool.h"

namespace pyllm {

struct MoEWeights {
  Weight gate_inp;             // {E, n_expert}
  Weight gate_exps, up_exps;   // {E, n_ff, n_expert} each, or
  Weight gate_up_exps;         // {E, 2*n_ff, n_expert}: [gate | up]
  Weight down_exps;            // {n_ff, E, n_expert}
  int n_expert = 0, n_used = 0;
  int64_t n_ff = 0;
};

// x: [n][E] normed input; out: [n][E] (overwritten)
void moe_ffn(ThreadPool& tp, const MoEWeights& w, const float* x, int n, int64_t E, float* out);

}  // namespace pyllm
