// Architectures `qwen35` (Qwen3.5/3.6 dense, e.g. 27B) and `qwen35moe` (35B-A3B): hybrid stacks of
// Gated DeltaNet layers and gated full-attention layers, plus one MTP (nextn) block at the end.
// Formulas and GGUF names: shared/docs/llamacpp-mtp.md sections 1-3. The converter already baked
// the weight transforms into the file (+1 on norms, ssm_a = -exp(A_log), tiled V heads).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "cpu/attention.h"
#include "cpu/delta_net.h"
#include "cpu/moe.h"
#include "cpu/ops.h"
#include "ggml/vec_dot_ggml.h"
#include "model/model.h"

namespace pyllm {

namespace {

struct Layer {
  bool recurrent = false;
  std::vector<float> attn_norm, post_attention_norm;
  // full attention
  Weight wq, wk, wv, wqkv_fused, wo;       // wq: {E, 2*D*H} per head [q | gate]
  std::vector<float> q_norm, k_norm;
  // Gated DeltaNet
  Weight ssm_qkv, ssm_gate, ssm_beta, ssm_alpha, ssm_out;
  std::vector<float> ssm_a, ssm_dt, ssm_conv, ssm_norm;
  // FFN
  Weight ffn_gate, ffn_up, ffn_down;       // dense
  MoEWeights moe;                          // qwen35moe
  std::vector<float> shexp_gate_inp;       // {E}
  Weight shexp_gate, shexp_up, shexp_down;
  // MTP (nextn) block only
  Weight eh_proj;
  std::vector<float> enorm, hnorm, shared_head_norm;
};

// rows keep[0..n) (ascending) of a [rows][w] buffer moved to its first n rows (each moves down or stays)
void rows_to_front(float* a, int64_t w, const int32_t* keep, int n) {
  for (int i = 0; i < n; i++)
    if (keep[i] != i) std::copy(a + keep[i] * w, a + (keep[i] + 1) * w, a + i * w);
}

class Qwen35Model : public Model {
 public:
  Qwen35Model(std::unique_ptr<GGUFFile> f, const LoadOptions& opt, bool moe) : is_moe(moe) {
    init_common(std::move(f), opt);
    n_nextn = hp_int("nextn_predict_layers", 0);
    n_trunk = n_layer - n_nextn;
    if (n_trunk <= 0) throw ModelError("GGUF file '" + file_->path() + "': block_count must exceed nextn_predict_layers");
    n_head = hp_int("attention.head_count", 0, true);
    n_head_kv = hp_int("attention.head_count_kv", n_head);
    head_dim = hp_int("attention.key_length", n_embd / n_head);
    int64_t head_dim_v = hp_int("attention.value_length", head_dim);
    if (head_dim_v != head_dim) throw ModelError("qwen35: value_length != key_length is not supported");
    eps = (float)hp_float("attention.layer_norm_rms_epsilon", 0, true);
    rope.n_rot = (int)hp_int("rope.dimension_count", head_dim);
    rope.base = (float)hp_float("rope.freq_base", 10000.0);
    if (!file_->has(key("rope.dimension_sections"))) throw ModelError("GGUF file '" + file_->path() + "': required key '" + key("rope.dimension_sections") + "' is missing");
    d_conv = (int)hp_int("ssm.conv_kernel", 0, true);
    d_inner = hp_int("ssm.inner_size", 0, true);
    dk = (int)hp_int("ssm.state_size", 0, true);
    H_v = (int)hp_int("ssm.time_step_rank", 0, true);
    H_k = (int)hp_int("ssm.group_count", 0, true);
    dv = (int)(d_inner / H_v);
    if (dv != dk) throw ModelError("qwen35: ssm value head dim " + std::to_string(dv) + " != state size " + std::to_string(dk));
    // layer pattern
    std::vector<bool> recr(n_layer, false);
    if (const GGUFValue* v = file_->find(key("attention.recurrent_layers")); v && v->type == GGUF_TYPE_ARRAY) {
      for (int64_t i = 0; i < n_layer && i < (int64_t)v->arr_n; i++) recr[i] = v->arr_i(i) != 0;
    } else {
      int64_t interval = hp_int("full_attention_interval", 4);
      for (int64_t i = 0; i < n_trunk; i++) recr[i] = ((i + 1) % interval) != 0;
    }
    for (int64_t i = n_trunk; i < n_layer; i++) recr[i] = false;  // MTP blocks are full attention
    if (is_moe) {
      n_expert = (int)hp_int("expert_count", 0, true);
      n_expert_used = (int)hp_int("expert_used_count", 0, true);
      int64_t nff = hp_int("feed_forward_length", 0);
      n_ff_exp = hp_int("expert_feed_forward_length", n_expert_used ? nff / n_expert_used : 0);
      n_ff_shexp = hp_int("expert_shared_feed_forward_length", nff);
    } else {
      n_ff = hp_int("feed_forward_length", 0, true);
    }

    tok_embd = tensor("token_embd.weight", {n_embd, n_vocab});
    output_norm = vec("output_norm.weight", n_embd);
    output = tensor("output.weight", {n_embd, n_vocab}, false);
    if (!output.valid()) output = tok_embd;

    mtp_in_file = n_nextn > 0 && file_->find_tensor("blk." + std::to_string(n_layer - 1) + ".nextn.eh_proj.weight");
    load_mtp = opt.load_mtp && mtp_in_file;
    if (n_nextn > 1 && load_mtp) throw ModelError("qwen35: only one MTP layer is supported (file has " + std::to_string(n_nextn) + ")");
    layers.resize(n_trunk + (load_mtp ? 1 : 0));
    for (int64_t i = 0; i < (int64_t)layers.size(); i++) {
      load_layer(i, recr[i]);
    }
    recurrent = true;
    if (load_mtp) {
      Layer& L = layers[n_trunk];
      const std::string p = "blk." + std::to_string(n_trunk) + ".nextn.";
      L.eh_proj = tensor(p + "eh_proj.weight", {2 * n_embd, n_embd});
      L.enorm = vec(p + "enorm.weight", n_embd);
      L.hnorm = vec(p + "hnorm.weight", n_embd);
      L.shared_head_norm = vec(p + "shared_head_norm.weight", n_embd, false);
      if (L.shared_head_norm.empty()) L.shared_head_norm = output_norm;
      mtp_embd = tensor(p + "embed_tokens.weight", {n_embd, n_vocab}, false);
      if (!mtp_embd.valid()) mtp_embd = tok_embd;
      mtp_head = tensor(p + "shared_head_head.weight", {n_embd, n_vocab}, false);
      if (!mtp_head.valid()) mtp_head = output;
    }
  }

  void load_layer(int64_t i, bool recr) {
    Layer& L = layers[i];
    L.recurrent = recr;
    const std::string p = "blk." + std::to_string(i) + ".";
    const int64_t E = n_embd;
    L.attn_norm = vec(p + "attn_norm.weight", E);
    L.post_attention_norm = vec(p + "post_attention_norm.weight", E);
    if (recr) {
      const int64_t key_dim = (int64_t)H_k * dk, value_dim = (int64_t)H_v * dv, conv_dim = 2 * key_dim + value_dim;
      L.ssm_qkv = tensor(p + "attn_qkv.weight", {E, conv_dim});
      L.ssm_gate = tensor(p + "attn_gate.weight", {E, value_dim});
      L.ssm_beta = tensor(p + "ssm_beta.weight", {E, H_v});
      L.ssm_alpha = tensor(p + "ssm_alpha.weight", {E, H_v});
      L.ssm_out = tensor(p + "ssm_out.weight", {value_dim, E});
      L.ssm_a = vec(p + "ssm_a", H_v);
      L.ssm_dt = vec(p + "ssm_dt.bias", H_v);
      L.ssm_norm = vec(p + "ssm_norm.weight", dv);
      Weight cw = tensor(p + "ssm_conv1d.weight", {d_conv, conv_dim});
      std::vector<float> w(d_conv * conv_dim);  // file: [conv_dim][d_conv]
      weight_to_float(cw, w.data());
      L.ssm_conv.resize(d_conv * conv_dim);     // kept time-major [d_conv][conv_dim] for the conv kernel
      for (int64_t c = 0; c < conv_dim; c++)
        for (int k = 0; k < d_conv; k++) L.ssm_conv[k * conv_dim + c] = w[c * d_conv + k];
    } else {
      const int64_t nq = n_head * head_dim, nkv = n_head_kv * head_dim;
      if (file_->find_tensor(p + "attn_qkv.weight")) {
        L.wqkv_fused = tensor(p + "attn_qkv.weight", {E, 2 * nq + 2 * nkv});
      } else {
        L.wq = tensor(p + "attn_q.weight", {E, 2 * nq});
        L.wk = tensor(p + "attn_k.weight", {E, nkv});
        L.wv = tensor(p + "attn_v.weight", {E, nkv});
      }
      L.wo = tensor(p + "attn_output.weight", {nq, E});
      L.q_norm = vec(p + "attn_q_norm.weight", head_dim);
      L.k_norm = vec(p + "attn_k_norm.weight", head_dim);
    }
    if (is_moe) {
      L.moe.n_expert = n_expert; L.moe.n_used = n_expert_used; L.moe.n_ff = n_ff_exp;
      L.moe.gate_inp = tensor(p + "ffn_gate_inp.weight", {E, n_expert});
      if (file_->find_tensor(p + "ffn_gate_up_exps.weight")) {
        L.moe.gate_up_exps = tensor(p + "ffn_gate_up_exps.weight", {E, 2 * n_ff_exp, n_expert});
      } else {
        L.moe.gate_exps = tensor(p + "ffn_gate_exps.weight", {E, n_ff_exp, n_expert});
        L.moe.up_exps = tensor(p + "ffn_up_exps.weight", {E, n_ff_exp, n_expert});
      }
      L.moe.down_exps = tensor(p + "ffn_down_exps.weight", {n_ff_exp, E, n_expert});
      L.shexp_gate_inp = vec(p + "ffn_gate_inp_shexp.weight", E);
      L.shexp_gate = tensor(p + "ffn_gate_shexp.weight", {E, n_ff_shexp});
      L.shexp_up = tensor(p + "ffn_up_shexp.weight", {E, n_ff_shexp});
      L.shexp_down = tensor(p + "ffn_down_shexp.weight", {n_ff_shexp, E});
    } else {
      L.ffn_gate = tensor(p + "ffn_gate.weight", {E, n_ff});
      L.ffn_up = tensor(p + "ffn_up.weight", {E, n_ff});
      L.ffn_down = tensor(p + "ffn_down.weight", {n_ff, E});
    }
  }

  std::unique_ptr<Memory> create_memory(int n_seq, int n_ctx_seq, int n_planes) const override {
    auto m = std::make_unique<Memory>((int)n_trunk, n_seq, n_ctx_seq, n_planes);
    const int64_t key_dim = (int64_t)H_k * dk, value_dim = (int64_t)H_v * dv;
    for (int i = 0; i < n_trunk; i++) {
      if (layers[i].recurrent) m->add_rs_layer(i, (d_conv - 1) * (2 * key_dim + value_dim), (int64_t)H_v * dk * dv);
      else m->add_kv_layer(i, n_head_kv * head_dim, n_head_kv * head_dim);
    }
    return m;
  }

  bool has_mtp() const override { return load_mtp; }
  bool file_has_mtp() const override { return mtp_in_file; }
  const Weight* mtp_head_weight() const override { return load_mtp ? &mtp_head : nullptr; }

  std::unique_ptr<Memory> create_mtp_memory(int n_seq, int n_ctx_seq) const override {
    if (!load_mtp) return nullptr;
    auto m = std::make_unique<Memory>(1, n_seq, n_ctx_seq, 1);
    m->add_kv_layer(0, n_head_kv * head_dim, n_head_kv * head_dim);
    return m;
  }

  // Gated full attention: x_norm [n][E] -> out [n][E]; KV layer index kv_il in mem.
  // n_keep >= 0: only in's rows keep[0..n_keep) (ascending) get outputs, out [n_keep][E]; the others only write
  // their K/V (the MTP block's catch-up rows, whose output nobody reads)
  void attn_layer(ThreadPool& tp, Memory& mem, int kv_il, const Layer& L, const ForwardIn& in, const float* xn, float* out, Scratch& s,
                  const int32_t* keep = nullptr, int n_keep = -1) const {
    const int n = in.n;
    const int64_t E = n_embd, nq = n_head * head_dim, nkv = n_head_kv * head_dim, D = head_dim;
    float* qg = Scratch::ensure(s.c, n * (2 * nq + 2 * nkv));  // [n][2*nq | nkv | nkv] (fused layout)
    const int64_t ld = 2 * nq + 2 * nkv;
    if (L.wqkv_fused.valid()) {
      matmul(tp, L.wqkv_fused, xn, E, n, qg, ld);
    } else {
      const MatmulOut qkv[3] = {{&L.wq, qg, ld}, {&L.wk, qg + 2 * nq, ld}, {&L.wv, qg + 2 * nq + nkv, ld}};
      matmul_multi(tp, qkv, 3, xn, E, n);
    }
    float* q = Scratch::ensure(s.d, n * nq);
    float* k = Scratch::ensure(s.e, n * nkv);
    float* v = Scratch::ensure(s.f, n * nkv);
    std::vector<float> cs(rope.n_rot / 2), sn(rope.n_rot / 2);
    for (int r = 0; r < n; r++) {
      rope.compute(in.pos[r], cs.data(), sn.data());
      const float* row = qg + r * ld;
      for (int h = 0; h < n_head; h++) {
        float* qh = q + r * nq + h * D;
        rms_norm(row + h * 2 * D, L.q_norm.data(), qh, (int)D, eps);
        rope_neox(qh, rope.n_rot, cs.data(), sn.data());
      }
      for (int h = 0; h < n_head_kv; h++) {
        float* kh = k + r * nkv + h * D;
        rms_norm(row + 2 * nq + h * D, L.k_norm.data(), kh, (int)D, eps);
        rope_neox(kh, rope.n_rot, cs.data(), sn.data());
      }
      std::copy(row + 2 * nq + nkv, row + 2 * nq + 2 * nkv, v + r * nkv);
    }
    float* att = Scratch::ensure(s.g, n * nq);
    AttnParams ap{(int)n_head, (int)n_head_kv, (int)D, (int)D, 1.0f / std::sqrt((float)D), 0, 0.f};
    ForwardIn sub = in;
    std::vector<int32_t> spos, sseq;
    int m = n;
    if (n_keep >= 0) {  // every row's K/V, then the kept rows' queries (moved to the front)
      store_kv(mem, kv_il, in, k, v, ap);
      if (n_keep == 0) return;
      m = n_keep;
      spos.resize(m); sseq.resize(m);
      for (int i = 0; i < m; i++) { spos[i] = in.pos[keep[i]]; sseq[i] = in.seq[keep[i]]; }
      for (auto [a, w] : {std::pair{q, nq}, {k, nkv}, {v, nkv}, {qg, ld}}) rows_to_front(a, w, keep, m);
      sub.n = m; sub.pos = spos.data(); sub.seq = sseq.data();
    }
    attention(tp, mem, kv_il, sub, q, k, v, att, ap);
    for (int r = 0; r < m; r++)  // sigmoid output gate
      for (int h = 0; h < n_head; h++) {
        const float* g = qg + r * ld + h * 2 * D + D;
        float* o = att + r * nq + h * D;
        for (int64_t i = 0; i < D; i++) o[i] *= sigmoid(g[i]);
      }
    matmul(tp, L.wo, att, nq, m, out, E);
  }

  void gdn_layer(ThreadPool& tp, Memory& mem, int il, const Layer& L, const ForwardIn& in, const float* xn, float* out, Scratch& s) const {
    const int n = in.n;
    const int64_t E = n_embd, key_dim = (int64_t)H_k * dk, value_dim = (int64_t)H_v * dv, conv_dim = 2 * key_dim + value_dim;
    float* u = Scratch::ensure(s.c, n * conv_dim);
    float* z = Scratch::ensure(s.d, n * value_dim);
    float* ab = Scratch::ensure(s.e, n * 2 * H_v);  // [n][H_v] beta, then [n][H_v] alpha
    float* o = Scratch::ensure(s.f, n * value_dim);
    const MatmulOut in4[4] = {{&L.ssm_qkv, u, conv_dim}, {&L.ssm_gate, z, value_dim}, {&L.ssm_beta, ab, H_v},
                              {&L.ssm_alpha, ab + n * H_v, H_v}};
    matmul_multi(tp, in4, 4, xn, E, n);
    for (int64_t r = 0; r < n * H_v; r++) silu_row(z + r * dv, z + r * dv, dv);  // ggml_silu over [dv] rows
    GDNParams gp{H_k, H_v, dk, dv, d_conv, eps, L.ssm_a.data(), L.ssm_dt.data(), L.ssm_conv.data(), L.ssm_norm.data()};
    for (int r = 0; r < n;) {
      int e = r;
      while (e < n && in.seq[e] == in.seq[r]) e++;
      gated_delta_net(tp, mem, il, in.seq[r], in.snapshot, e - r, u + r * conv_dim, z + r * value_dim, ab + r * H_v,
                      ab + n * H_v + r * H_v, o + r * value_dim, gp);
      r = e;
    }
    matmul(tp, L.ssm_out, o, value_dim, n, out, E);
  }

  void ffn(ThreadPool& tp, const Layer& L, const float* xn, int n, float* out, Scratch& s) const {
    const int64_t E = n_embd;
    if (!is_moe) {
      float* g = Scratch::ensure(s.c, n * n_ff);
      float* u = Scratch::ensure(s.d, n * n_ff);
      const MatmulOut gu[2] = {{&L.ffn_gate, g, n_ff}, {&L.ffn_up, u, n_ff}};
      matmul_multi(tp, gu, 2, xn, E, n);
      for (int r = 0; r < n; r++) swiglu_row(g + r * n_ff, u + r * n_ff, g + r * n_ff, (int)n_ff);
      matmul(tp, L.ffn_down, g, n_ff, n, out, E);
      return;
    }
    moe_ffn(tp, L.moe, xn, n, E, out);
    float* g = Scratch::ensure(s.c, n * n_ff_shexp);
    float* u = Scratch::ensure(s.d, n * n_ff_shexp);
    float* d = Scratch::ensure(s.e, n * E);
    const MatmulOut gu[2] = {{&L.shexp_gate, g, n_ff_shexp}, {&L.shexp_up, u, n_ff_shexp}};
    matmul_multi(tp, gu, 2, xn, E, n);
    for (int r = 0; r < n; r++) swiglu_row(g + r * n_ff_shexp, u + r * n_ff_shexp, g + r * n_ff_shexp, (int)n_ff_shexp);
    matmul(tp, L.shexp_down, g, n_ff_shexp, n, d, E);
    for (int r = 0; r < n; r++) {
      float gs = ggml_dot_f32(L.shexp_gate_inp.data(), xn + r * E, (int)E);
      gs = sigmoid(gs);
      for (int64_t i = 0; i < E; i++) out[r * E + i] += d[r * E + i] * gs;
    }
  }

  // One transformer block body shared by the trunk and the MTP block: x += attn(RMS(x)); x += ffn(RMS(x)).
  // keep / n_keep (full attention only): as attn_layer's; x then holds the kept rows, [n_keep][E]
  void block(ThreadPool& tp, Memory& mem, int mem_il, const Layer& L, const ForwardIn& in, float* x, Scratch& s,
             const int32_t* keep = nullptr, int n_keep = -1) const {
    int n = in.n;
    const int64_t E = n_embd;
    float* xn = Scratch::ensure(s.b, n * E);
    float* t = Scratch::ensure(s.a2, n * E);
    for (int r = 0; r < n; r++) rms_norm(x + r * E, L.attn_norm.data(), xn + r * E, (int)E, eps);
    if (L.recurrent) gdn_layer(tp, mem, mem_il, L, in, xn, t, s);
    else attn_layer(tp, mem, mem_il, L, in, xn, t, s, keep, n_keep);
    if (n_keep >= 0) {
      if (n_keep == 0) return;
      rows_to_front(x, E, keep, n_keep);
      n = n_keep;
    }
    for (int64_t i = 0; i < n * E; i++) x[i] += t[i];
    for (int r = 0; r < n; r++) rms_norm(x + r * E, L.post_attention_norm.data(), xn + r * E, (int)E, eps);
    ffn(tp, L, xn, n, t, s);
    for (int64_t i = 0; i < n * E; i++) x[i] += t[i];
  }

  void forward(ThreadPool& tp, Memory& mem, const ForwardIn& in) const override {
    const int n = in.n;
    const int64_t E = n_embd;
    thread_local Scratch s;
    float* x = Scratch::ensure(s.a, n * E);  // [n][E] residual stream
    for (int r = 0; r < n; r++) get_row(tok_embd, in.tokens[r], x + r * E);
    for (int il = 0; il < n_trunk; il++) block(tp, mem, il, layers[il], in, x, s);
    for (int r = 0; r < n; r++) rms_norm(x + r * E, output_norm.data(), x + r * E, (int)E, eps);  // hN
    if (in.hidden) std::copy(x, x + n * E, in.hidden);
    compute_logits(tp, output, x, E, in);
    commit_runs(mem, in);
  }

  // MTP row p: u = eh_proj [RMS(emb(x_p), enorm) ; RMS(h_{p-1}, hnorm)], one full-attention block,
  // h_out = RMS(., shared_head_norm) -> hidden (fed back when drafting) and logits.
  void forward_mtp(ThreadPool& tp, Memory& mem, const ForwardIn& in) const override {
    const Layer& L = layers[n_trunk];
    const int n = in.n;
    const int64_t E = n_embd;
    thread_local Scratch s;
    float* cat = Scratch::ensure(s.g, n * 2 * E);  // [n][2E]
    float* x = Scratch::ensure(s.a, n * E);
    for (int r = 0; r < n; r++) {
      float* c = cat + r * 2 * E;
      get_row(mtp_embd, in.tokens[r], c);
      rms_norm(c, L.enorm.data(), c, (int)E, eps);
      rms_norm(in.embd_in + r * E, L.hnorm.data(), c + E, (int)E, eps);
    }
    matmul(tp, L.eh_proj, cat, 2 * E, n, x, E);
    // Only the out rows get an output (hidden, logits): the others (catch-up rows, a draft's rows before
    // its drafting row) are only wanted for their K/V, so their attention, output projection and FFN are
    // skipped (in a catch-up, most of the block; each out row is computed as in a whole batch: the same bits)
    const int m = in.n_out;
    for (int i = 1; i < m; i++)  // the drafter's rows are ascending (its compact_rows needs it too)
      if (in.out_rows[i] <= in.out_rows[i - 1]) throw std::logic_error("forward_mtp: out_rows must be ascending");
    block(tp, mem, 0, L, in, x, s, in.out_rows, m);
    if (m > 0) {
      for (int r = 0; r < m; r++) rms_norm(x + r * E, L.shared_head_norm.data(), x + r * E, (int)E, eps);
      if (in.hidden)  // at the rows' places in the batch, as before
        for (int i = 0; i < m; i++) std::copy(x + i * E, x + (i + 1) * E, in.hidden + in.out_rows[i] * E);
      if (in.logits) matmul(tp, mtp_head, x, E, m, in.logits, mtp_head.ne[1]);  // x holds the out rows, in order
    }
    commit_runs(mem, in);
  }

  bool is_moe;
  int64_t n_nextn, n_trunk, n_head, n_head_kv, head_dim, n_ff = 0, d_inner;
  int d_conv, dk, dv, H_k, H_v;
  int n_expert = 0, n_expert_used = 0;
  int64_t n_ff_exp = 0, n_ff_shexp = 0;
  float eps;
  RopeCache rope;
  bool mtp_in_file = false, load_mtp = false;
  Weight tok_embd, output, mtp_embd, mtp_head;
  std::vector<float> output_norm;
  std::vector<Layer> layers;
};

}  // namespace

std::unique_ptr<Model> build_qwen35(std::unique_ptr<GGUFFile> f, const LoadOptions& opt) {
  return std::make_unique<Qwen35Model>(std::move(f), opt, false);
}
std::unique_ptr<Model> build_qwen35moe(std::unique_ptr<GGUFFile> f, const LoadOptions& opt) {
  return std::make_unique<Qwen35Model>(std::move(f), opt, true);
}

}  // namespace pyllm
