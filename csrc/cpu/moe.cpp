#include "cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "cpu/ops.h"

namespace pyllm {

// rows [0, n) over the threads in runs of whole 16-row units: AMX tiles and weight groups (ggml/repack.h) start
// at multiples of 16, so no thread computes a part of one
static void parallel_rows16(ThreadPool& tp, int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  tp.parallel_for((n + 15) / 16, [&](int64_t u0, int64_t u1) { fn(16 * u0, std::min(n, 16 * u1)); });
}

void moe_ffn(ThreadPool& tp, const MoEWeights& w, const float* x, int n, int64_t E, float* out) {
  const int NE = w.n_expert, K = w.n_used;
  const int64_t F = w.n_ff;
  // routing: softmax over all experts, top-k, renormalise
  // thread_local storage, but only touched through these references: lambdas that run on the
  // pool's workers would otherwise see the workers' own (empty) instances
  thread_local std::vector<float> logits_tl, slot_out_tl, hbuf_tl, dbuf_tl;
  thread_local QuantActs qx_tl, qh_tl, qe_tl;
  std::vector<float>& logits = logits_tl; std::vector<float>& slot_out = slot_out_tl;
  std::vector<float>& hbuf = hbuf_tl; std::vector<float>& dbuf = dbuf_tl;
  QuantActs& qx = qx_tl; QuantActs& qh = qh_tl; QuantActs& qe = qe_tl;  // qe: one expert's rows of qx
  logits.resize((size_t)n * NE);
  matmul(tp, w.gate_inp, x, E, n, logits.data(), NE);
  std::vector<int> sel((size_t)n * K);
  std::vector<float> wsel((size_t)n * K);
  for (int r = 0; r < n; r++) {
    float* p = logits.data() + (int64_t)r * NE;
    softmax_inplace(p, NE);
    std::vector<int> idx(NE);
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + K, idx.end(), [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float sum = 0;
    for (int k = 0; k < K; k++) { sel[r * K + k] = idx[k]; sum += p[idx[k]]; }
    sum = std::max(sum, 6.103515625e-5f);
    for (int k = 0; k < K; k++) wsel[r * K + k] = p[idx[k]] / sum;
  }
  // group (row, slot) pairs by expert
  std::vector<std::vector<int>> by_exp(NE);  // entries r*K + k
  for (int i = 0; i < n * K; i++) by_exp[sel[i]].push_back(i);

  const bool fused = w.gate_up_exps.valid();
  const Weight& wg0 = fused ? w.gate_up_exps : w.gate_exps;
  const ggml_type vdt_in = get_type_traits(wg0.type).vec_dot_type;
  const ggml_type vdt_dn = get_type_traits(w.down_exps.type).vec_dot_type;
  quantize_acts(tp, x, E, n, E, vdt_in, qx);
  slot_out.resize((size_t)n * K * E);  // [n*K][E]: per (row, slot) expert output

  for (int e = 0; e < NE; e++) {
    const auto& items = by_exp[e];
    if (items.empty()) continue;
    const int m = (int)items.size();
    std::vector<int> rows(m);
    for (int i = 0; i < m; i++) rows[i] = items[i] / K;
    hbuf.resize((size_t)m * 2 * F);
    float* g = hbuf.data();           // [m][F]
    float* u = hbuf.data() + m * F;   // [m][F]
    const Weight wg = fused ? w.gate_up_exps.expert(e).rows(0, F) : w.gate_exps.expert(e);
    const Weight wu = fused ? w.gate_up_exps.expert(e).rows(F, F) : w.up_exps.expert(e);
    gather_acts(qx, rows.data(), m, qe);  // contiguous, so the expert's weights are decoded once per k <= 8 rows
    auto gate_up = [&](int64_t r0, int64_t r1) {
      matmul_q_st(wg, qe, g, F, r0, r1);
      matmul_q_st(wu, qe, u, F, r0, r1);
    };
    if ((int64_t)m * F * E >= 65536) parallel_rows16(tp, F, gate_up); else gate_up(0, F);
    for (int i = 0; i < m; i++) swiglu_row(g + (int64_t)i * F, u + (int64_t)i * F, g + (int64_t)i * F, (int)F);
    quantize_acts(tp, g, F, m, F, vdt_dn, qh);
    const Weight wd = w.down_exps.expert(e);
    dbuf.resize((size_t)m * E);
    auto down = [&](int64_t r0, int64_t r1) { matmul_q_st(wd, qh, dbuf.data(), E, r0, r1); };
    if ((int64_t)m * F * E >= 65536) parallel_rows16(tp, E, down); else down(0, E);
    for (int i = 0; i < m; i++) std::copy(dbuf.data() + (int64_t)i * E, dbuf.data() + (int64_t)(i + 1) * E, slot_out.data() + (int64_t)items[i] * E);
  }
  for (int r = 0; r < n; r++) {
    float* o = out + (int64_t)r * E;
    std::fill(o, o + E, 0.f);
    for (int k = 0; k < K; k++) {
      const float wk = wsel[r * K + k];
      const float* so = slot_out.data() + ((int64_t)r * K + k) * E;
      for (int64_t i = 0; i < E; i++) o[i] += wk * so[i];
    }
  }
}

}  // namespace pyllm
