// Architecture `llama` (SmolLM2, Llama 2/3 layout): RMSNorm, GQA attention with "normal" RoPE
// (adjacent pairs; the converter permuted Q/K for it), SwiGLU FFN, optional tied output.
#include <cmath>

#include "cpu/attention.h"
#include "cpu/ops.h"
#include "model/model.h"

namespace pyllm {

namespace {

struct Layer {
  std::vector<float> attn_norm, ffn_norm;
  Weight wq, wk, wv, wo, ffn_gate, ffn_up, ffn_down;
};

class LlamaModel : public Model {
 public:
  LlamaModel(std::unique_ptr<GGUFFile> f, const LoadOptions& opt) {
    init_common(std::move(f), opt);
    n_head = hp_int("attention.head_count", 0, true);
    n_head_kv = hp_int("attention.head_count_kv", n_head);
    head_dim = hp_int("attention.key_length", n_embd / n_head);
    n_ff = hp_int("feed_forward_length", 0, true);
    eps = (float)hp_float("attention.layer_norm_rms_epsilon", 1e-5);
    rope.n_rot = (int)hp_int("rope.dimension_count", head_dim);
    rope.base = (float)hp_float("rope.freq_base", 10000.0);
    double scale_factor = hp_float("rope.scaling.factor", 0.0);
    if (file_->get_str(key("rope.scaling.type"), "none") == "linear" && scale_factor > 0) rope.freq_scale = (float)(1.0 / scale_factor);

    tok_embd = tensor("token_embd.weight", {n_embd, n_vocab});
    output_norm = vec("output_norm.weight", n_embd);
    output = tensor("output.weight", {n_embd, n_vocab}, false);
    if (!output.valid()) output = tok_embd;  // tied
    const int64_t nq = n_head * head_dim, nkv = n_head_kv * head_dim;
    layers.resize(n_layer);
    for (int i = 0; i < n_layer; i++) {
      auto& L = layers[i];
      const std::string p = "blk." + std::to_string(i) + ".";
      L.attn_norm = vec(p + "attn_norm.weight", n_embd);
      L.wq = tensor(p + "attn_q.weight", {n_embd, nq});
      L.wk = tensor(p + "attn_k.weight", {n_embd, nkv});
      L.wv = tensor(p + "attn_v.weight", {n_embd, nkv});
      L.wo = tensor(p + "attn_output.weight", {nq, n_embd});
      L.ffn_norm = vec(p + "ffn_norm.weight", n_embd);
      L.ffn_gate = tensor(p + "ffn_gate.weight", {n_embd, n_ff});
      L.ffn_up = tensor(p + "ffn_up.weight", {n_embd, n_ff});
      L.ffn_down = tensor(p + "ffn_down.weight", {n_ff, n_embd});
    }
  }

  std::unique_ptr<Memory> create_memory(int n_seq, int n_ctx_seq, int n_planes) const override {
    auto m = std::make_unique<Memory>((int)n_layer, n_seq, n_ctx_seq, n_planes);
    for (int i = 0; i < n_layer; i++) m->add_kv_layer(i, n_head_kv * head_dim, n_head_kv * head_dim);
    return m;
  }

  void forward(ThreadPool& tp, Memory& mem, const ForwardIn& in) const override {
    const int n = in.n;
    const int64_t E = n_embd, nq = n_head * head_dim, nkv = n_head_kv * head_dim;
    thread_local Scratch s;
    float* x = Scratch::ensure(s.a, n * E);      // [n][E] residual stream
    float* xn = Scratch::ensure(s.b, n * E);     // [n][E]
    float* q = Scratch::ensure(s.c, n * nq);     // [n][H*D]
    float* k = Scratch::ensure(s.d, n * nkv);    // [n][Hkv*D]
    float* v = Scratch::ensure(s.e, n * nkv);
    float* att = Scratch::ensure(s.f, n * std::max(nq, n_ff * 2));  // attention out, then FFN gate|up
    std::vector<float> cs(rope.n_rot / 2), sn(rope.n_rot / 2);

    for (int r = 0; r < n; r++) get_row(tok_embd, in.tokens[r], x + r * E);
    AttnParams ap{(int)n_head, (int)n_head_kv, (int)head_dim, (int)head_dim, 1.0f / std::sqrt((float)head_dim), 0, 0.f};

    for (int il = 0; il < n_layer; il++) {
      const Layer& L = layers[il];
      for (int r = 0; r < n; r++) rms_norm(x + r * E, L.attn_norm.data(), xn + r * E, (int)E, eps);
      const MatmulOut qkv[3] = {{&L.wq, q, nq}, {&L.wk, k, nkv}, {&L.wv, v, nkv}};
      matmul_multi(tp, qkv, 3, xn, E, n);
      for (int r = 0; r < n; r++) {
        rope.compute(in.pos[r], cs.data(), sn.data());
        for (int h = 0; h < n_head; h++) rope_norm(q + r * nq + h * head_dim, rope.n_rot, cs.data(), sn.data());
        for (int h = 0; h < n_head_kv; h++) rope_norm(k + r * nkv + h * head_dim, rope.n_rot, cs.data(), sn.data());
      }
      attention(tp, mem, il, in, q, k, v, att, ap);
      matmul(tp, L.wo, att, nq, n, xn, E);
      for (int64_t i = 0; i < n * E; i++) x[i] += xn[i];

      for (int r = 0; r < n; r++) rms_norm(x + r * E, L.ffn_norm.data(), xn + r * E, (int)E, eps);
      float* g = att;            // [n][n_ff]
      float* u = att + n * n_ff; // [n][n_ff]
      const MatmulOut gu[2] = {{&L.ffn_gate, g, n_ff}, {&L.ffn_up, u, n_ff}};
      matmul_multi(tp, gu, 2, xn, E, n);
      for (int r = 0; r < n; r++) swiglu_row(g + r * n_ff, u + r * n_ff, g + r * n_ff, (int)n_ff);
      matmul(tp, L.ffn_down, g, n_ff, n, xn, E);
      for (int64_t i = 0; i < n * E; i++) x[i] += xn[i];
    }
    for (int r = 0; r < n; r++) rms_norm(x + r * E, output_norm.data(), x + r * E, (int)E, eps);
    if (in.hidden) std::copy(x, x + n * E, in.hidden);
    compute_logits(tp, output, x, E, in);
    commit_runs(mem, in);
  }

  int64_t n_head, n_head_kv, head_dim, n_ff;
  float eps;
  RopeCache rope;
  Weight tok_embd, output;
  std::vector<float> output_norm;
  std::vector<Layer> layers;
};

}  // namespace

std::unique_ptr<Model> build_llama(std::unique_ptr<GGUFFile> f, const LoadOptions& opt) {
  return std::make_unique<LlamaModel>(std::move(f), opt);
}

}  // namespace pyllm
