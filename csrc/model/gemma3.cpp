// Architecture `gemma3` (Gemma 3 270M..27B text): embeddings scaled by sqrt(n_embd), q/k RMSNorm,
// post-attention and post-FFN norms, GELU-gated FFN, NEOX RoPE, local sliding-window layers
// (5 of every 6 by default) with their own RoPE base, tied output, optional final softcapping.
#include <cmath>

#include "cpu/attention.h"
#include "cpu/ops.h"
#include "model/model.h"

namespace pyllm {

namespace {

struct Layer {
  std::vector<float> attn_norm, q_norm, k_norm, attn_post_norm, ffn_norm, ffn_post_norm;
  Weight wq, wk, wv, wo, ffn_gate, ffn_up, ffn_down;
  bool swa = false;
};

class Gemma3Model : public Model {
 public:
  Gemma3Model(std::unique_ptr<GGUFFile> f, const LoadOptions& opt) {
    init_common(std::move(f), opt);
    n_head = hp_int("attention.head_count", 0, true);
    n_head_kv = hp_int("attention.head_count_kv", n_head);
    head_dim = hp_int("attention.key_length", n_embd / n_head);
    head_dim_v = hp_int("attention.value_length", head_dim);
    n_ff = hp_int("feed_forward_length", 0, true);
    eps = (float)hp_float("attention.layer_norm_rms_epsilon", 1e-6, true);
    n_swa = (int)hp_int("attention.sliding_window", 0);
    softcap = (float)hp_float("final_logit_softcapping", 0.0);
    rope_global.n_rot = rope_local.n_rot = (int)hp_int("rope.dimension_count", head_dim);
    rope_global.base = (float)hp_float("rope.freq_base", 10000.0);
    rope_local.base = (float)hp_float("rope.freq_base_swa", 10000.0);
    double sf = hp_float("rope.scaling.factor", 0.0);
    if (file_->get_str(key("rope.scaling.type"), "none") == "linear" && sf > 0) rope_global.freq_scale = (float)(1.0 / sf);
    // llama.cpp: 1/sqrt(n_embd/n_head) for the 27B (62 layers), else 1/sqrt(head_dim)
    attn_scale = n_layer == 62 ? 1.0f / std::sqrt((float)(n_embd / n_head)) : 1.0f / std::sqrt((float)head_dim);

    tok_embd = tensor("token_embd.weight", {n_embd, n_vocab});
    output_norm = vec("output_norm.weight", n_embd);
    output = tensor("output.weight", {n_embd, n_vocab}, false);
    if (!output.valid()) output = tok_embd;
    const int64_t nq = n_head * head_dim, nk = n_head_kv * head_dim, nv = n_head_kv * head_dim_v;
    int pattern = (int)hp_int("attention.sliding_window_pattern", 6);
    layers.resize(n_layer);
    for (int i = 0; i < n_layer; i++) {
      auto& L = layers[i];
      const std::string p = "blk." + std::to_string(i) + ".";
      L.swa = n_swa > 0 && (pattern == 0 || (i % pattern) < pattern - 1);
      L.attn_norm = vec(p + "attn_norm.weight", n_embd);
      L.wq = tensor(p + "attn_q.weight", {n_embd, nq});
      L.wk = tensor(p + "attn_k.weight", {n_embd, nk});
      L.wv = tensor(p + "attn_v.weight", {n_embd, nv});
      L.wo = tensor(p + "attn_output.weight", {n_head * head_dim_v, n_embd});
      L.q_norm = vec(p + "attn_q_norm.weight", head_dim);
      L.k_norm = vec(p + "attn_k_norm.weight", head_dim);
      L.attn_post_norm = vec(p + "post_attention_norm.weight", n_embd);
      L.ffn_norm = vec(p + "ffn_norm.weight", n_embd);
      L.ffn_gate = tensor(p + "ffn_gate.weight", {n_embd, n_ff});
      L.ffn_up = tensor(p + "ffn_up.weight", {n_embd, n_ff});
      L.ffn_down = tensor(p + "ffn_down.weight", {n_ff, n_embd});
      L.ffn_post_norm = vec(p + "post_ffw_norm.weight", n_embd);
    }
  }

  std::unique_ptr<Memory> create_memory(int n_seq, int n_ctx_seq, int n_planes) const override {
    auto m = std::make_unique<Memory>((int)n_layer, n_seq, n_ctx_seq, n_planes);
    for (int i = 0; i < n_layer; i++) m->add_kv_layer(i, n_head_kv * head_dim, n_head_kv * head_dim_v);
    return m;
  }

  void forward(ThreadPool& tp, Memory& mem, const ForwardIn& in) const override {
    const int n = in.n;
    const int64_t E = n_embd, nq = n_head * head_dim, nk = n_head_kv * head_dim, nv = n_head_kv * head_dim_v;
    const int64_t no = n_head * head_dim_v;
    thread_local Scratch s;
    float* x = Scratch::ensure(s.a, n * E);    // [n][E]
    float* xn = Scratch::ensure(s.b, n * E);   // [n][E]
    float* q = Scratch::ensure(s.c, n * nq);   // [n][H*D]
    float* k = Scratch::ensure(s.d, n * nk);
    float* v = Scratch::ensure(s.e, n * nv);
    float* buf = Scratch::ensure(s.f, n * std::max(no, n_ff * 2));
    std::vector<float> cs(rope_global.n_rot / 2), sn(rope_global.n_rot / 2);

    const float emb_scale = std::sqrt((float)E);
    for (int r = 0; r < n; r++) {
      get_row(tok_embd, in.tokens[r], x + r * E);
      for (int64_t i = 0; i < E; i++) x[r * E + i] *= emb_scale;
    }
    for (int il = 0; il < n_layer; il++) {
      const Layer& L = layers[il];
      const RopeCache& rope = L.swa ? rope_local : rope_global;
      for (int r = 0; r < n; r++) rms_norm(x + r * E, L.attn_norm.data(), xn + r * E, (int)E, eps);
      const MatmulOut qkv[3] = {{&L.wq, q, nq}, {&L.wk, k, nk}, {&L.wv, v, nv}};
      matmul_multi(tp, qkv, 3, xn, E, n);
      for (int r = 0; r < n; r++) {
        rope.compute(in.pos[r], cs.data(), sn.data());
        for (int h = 0; h < n_head; h++) {
          float* qh = q + r * nq + h * head_dim;
          rms_norm(qh, L.q_norm.data(), qh, (int)head_dim, eps);
          rope_neox(qh, rope.n_rot, cs.data(), sn.data());
          for (int64_t i = 0; i < head_dim; i++) qh[i] *= attn_scale;
        }
        for (int h = 0; h < n_head_kv; h++) {
          float* kh = k + r * nk + h * head_dim;
          rms_norm(kh, L.k_norm.data(), kh, (int)head_dim, eps);
          rope_neox(kh, rope.n_rot, cs.data(), sn.data());
        }
      }
      AttnParams ap{(int)n_head, (int)n_head_kv, (int)head_dim, (int)head_dim_v, 1.0f, L.swa ? n_swa : 0, 0.f};
      attention(tp, mem, il, in, q, k, v, buf, ap);
      matmul(tp, L.wo, buf, no, n, xn, E);
      for (int r = 0; r < n; r++) {
        rms_norm(xn + r * E, L.attn_post_norm.data(), xn + r * E, (int)E, eps);
        for (int64_t i = 0; i < E; i++) x[r * E + i] += xn[r * E + i];
      }
      for (int r = 0; r < n; r++) rms_norm(x + r * E, L.ffn_norm.data(), xn + r * E, (int)E, eps);
      float* g = buf;
      float* u = buf + n * n_ff;
      const MatmulOut gu[2] = {{&L.ffn_gate, g, n_ff}, {&L.ffn_up, u, n_ff}};
      matmul_multi(tp, gu, 2, xn, E, n);
      for (int r = 0; r < n; r++) geglu_row(g + r * n_ff, u + r * n_ff, g + r * n_ff, (int)n_ff);
      matmul(tp, L.ffn_down, g, n_ff, n, xn, E);
      for (int r = 0; r < n; r++) {
        rms_norm(xn + r * E, L.ffn_post_norm.data(), xn + r * E, (int)E, eps);
        for (int64_t i = 0; i < E; i++) x[r * E + i] += xn[r * E + i];
      }
    }
    for (int r = 0; r < n; r++) rms_norm(x + r * E, output_norm.data(), x + r * E, (int)E, eps);
    if (in.hidden) std::copy(x, x + n * E, in.hidden);
    compute_logits(tp, output, x, E, in);
    if (softcap > 0 && in.logits)
      for (int64_t i = 0; i < (int64_t)in.n_out * n_vocab; i++) in.logits[i] = softcap * std::tanh(in.logits[i] / softcap);
    commit_runs(mem, in);
  }

  int64_t n_head, n_head_kv, head_dim, head_dim_v, n_ff;
  float eps, attn_scale, softcap;
  int n_swa;
  RopeCache rope_global, rope_local;
  Weight tok_embd, output;
  std::vector<float> output_norm;
  std::vector<Layer> layers;
};

}  // namespace

std::unique_ptr<Model> build_gemma3(std::unique_ptr<GGUFFile> f, const LoadOptions& opt) {
  return std::make_unique<Gemma3Model>(std::move(f), opt);
}

}  // namespace pyllm
