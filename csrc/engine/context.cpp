#include "engine/context.h"

#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace pyllm {

namespace {
// first maximum (lowest id among ties)
int32_t argmax(const float* x, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; i++) if (x[i] > x[best]) best = (int32_t)i;
  return best;
}
bool mask_has(const uint32_t* m, int64_t i) { return (m[i >> 5] >> (i & 31)) & 1u; }
struct GreedySampler : TokenSampler {
  int32_t sample(const float* logits, int n_vocab, const uint32_t* allowed) override {
    if (!allowed) return argmax(logits, n_vocab);
    int32_t best = -1;
    for (int32_t i = 0; i < n_vocab; i++)
      if (mask_has(allowed, i) && (best < 0 || logits[i] > logits[best])) best = i;
    if (best < 0) throw std::runtime_error("the allowed-token mask excludes every token");
    return best;
  }
  void accept(int32_t) override {}
};
using clock_t_ = std::chrono::steady_clock;
double ms_since(clock_t_::time_point t) { return std::chrono::duration<double, std::milli>(clock_t_::now() - t).count(); }
}  // namespace

std::unique_ptr<TokenSampler> make_greedy_sampler() { return std::make_unique<GreedySampler>(); }

Context::Context(const Model& model, int n_ctx, int n_seq, int n_batch, int n_ubatch, int n_threads, const SpecParams& spec)
    : model_(model), tp_(n_threads), spec_(spec), n_batch_(std::max(1, n_batch)), n_ubatch_(std::max(1, std::min(n_batch, n_ubatch))) {
  if (n_seq < 1) throw std::invalid_argument("n_seq must be >= 1");
  if (n_ctx < n_seq * 8) throw std::invalid_argument("n_ctx " + std::to_string(n_ctx) + " is too small for " + std::to_string(n_seq) + " sequences");
  n_ctx_seq_ = n_ctx / n_seq;
  if (spec_.type != "none" && spec_.type != "draft-mtp")
    throw std::invalid_argument("speculative type '" + spec_.type + "' is not supported by pyllm");
  if (spec_.type == "draft-mtp" && spec_.n_max > 0) {
    if (!model.file_has_mtp())
      throw std::invalid_argument("--spec-type draft-mtp: the model '" + model.gguf().path() + "' has no MTP layers (nextn_predict_layers = 0 or no blk.N.nextn.* tensors)");
    if (!model.has_mtp()) throw std::invalid_argument("--spec-type draft-mtp: the model was loaded without its MTP layer (load_mtp=False)");
  }
  resolve_synth();
  // verification of [last, d1..dn] needs n_max+1 recurrent planes; the batch must fit one ubatch
  const int n_planes = spec_.enabled() ? spec_.n_max + 1 : 1;
  if (spec_.enabled() && n_ubatch_ < spec_.n_max + 1) n_ubatch_ = spec_.n_max + 1;
  mem_ = model.create_memory(n_seq, n_ctx_seq_, n_planes);
  if (spec_.enabled() && model.has_mtp()) mtp_mem_ = model.create_mtp_memory(n_seq, n_ctx_seq_);
  seqs_.resize(n_seq);
  for (auto& s : seqs_) s.pending_h.assign(model.n_embd, 0.f);
}

// --spec-synth-len / --spec-synth-rates (benchmarking only): per-position unconditional acceptance
// rates, validated as upstream does; drafts are accepted at random with the conditional rate.
void Context::resolve_synth() {
  const bool has_len = spec_.synth_len >= 0, has_rates = !spec_.synth_rates.empty();
  if (!has_len && !has_rates) return;
  if (has_len && has_rates) throw std::invalid_argument("synthetic acceptance length and rates are mutually exclusive");
  const int n_max = spec_.enabled() ? spec_.n_max : 0;
  if (n_max <= 0) throw std::invalid_argument("synthetic acceptance requires at least one speculative token");
  std::vector<double> rates;
  if (has_rates) {
    rates = spec_.synth_rates;
    if ((int)rates.size() != n_max)
      throw std::invalid_argument("synthetic acceptance rates must contain " + std::to_string(n_max) + " values, got " + std::to_string(rates.size()));
    for (size_t i = 0; i < rates.size(); i++) {
      if (!std::isfinite(rates[i]) || rates[i] < 0.0 || rates[i] > 1.0) throw std::invalid_argument("synthetic acceptance rates must be finite and within [0, 1]");
      if (i > 0 && rates[i] > rates[i - 1]) throw std::invalid_argument("synthetic acceptance rates must be monotonically non-increasing");
    }
  } else {
    const double L = spec_.synth_len, Lmax = n_max + 1.0;
    if (!std::isfinite(L) || L < 1.0 || L > Lmax)
      throw std::invalid_argument("synthetic acceptance length must be finite and within [1, " + std::to_string((int)Lmax) + "]");
    // geometric rates p, p^2, ... whose sum is L - 1 (bisection)
    double p = 0.0;
    if (L == Lmax) p = 1.0;
    else if (L > 1.0) {
      double lo = 0.0, hi = 1.0;
      for (int it = 0; it < 32; it++) {
        const double mid = 0.5 * (lo + hi);
        double sum = 0, term = mid;
        for (int j = 0; j < n_max; j++) { sum += term; term *= mid; }
        (sum < L - 1.0 ? lo : hi) = mid;
      }
      p = 0.5 * (lo + hi);
    }
    double r = p;
    for (int i = 0; i < n_max; i++) { rates.push_back(r); r *= p; }
  }
  double prev = 1.0;
  for (double r : rates) { spec_.synth_probs.push_back(prev > 0.0 ? r / prev : 0.0); prev = r; }
  std::fprintf(stderr, "synthetic speculative acceptance is enabled for benchmarking; generated output is not valid\n");
}

int Context::n_active() const {
  int n = 0;
  for (auto& s : seqs_) n += s.active;
  return n;
}

int Context::seq_begin(int seq, const std::vector<int32_t>& prompt, SeqParams params) {
  if (seq < 0 || seq >= n_seq()) throw std::out_of_range("sequence id " + std::to_string(seq) + " out of range");
  if (prompt.empty()) throw std::invalid_argument("empty prompt");
  if ((int)prompt.size() >= n_ctx_seq_) {
    throw std::invalid_argument("the request exceeds the available context size: prompt has " + std::to_string(prompt.size()) +
                                " tokens, context per slot is " + std::to_string(n_ctx_seq_));
  }
  for (int32_t t : prompt)
    if (t < 0 || t >= model_.n_vocab) throw std::invalid_argument("token id " + std::to_string(t) + " out of range [0, " + std::to_string(model_.n_vocab) + ")");
  Seq& s = seqs_[seq];
  // longest common prefix with what the sequence holds; always re-evaluate the last prompt token
  size_t lcp = 0;
  while (lcp < s.cache.size() && lcp < prompt.size() && s.cache[lcp] == prompt[lcp]) lcp++;
  int n_cached = (int)std::min(lcp, prompt.size() - 1);
  if (!mem_->can_rm(seq, n_cached)) n_cached = 0;  // recurrent state cannot go back that far
  mem_->seq_rm(seq, n_cached);
  if (mtp_mem_) mtp_mem_->seq_rm(seq, n_cached);
  // pending_h must be h_{n_cached-1}; it is exact when the prompt extends what was evaluated and
  // zero at position 0. Otherwise it is stale (as upstream): drafts may be worse, output is not.
  if (n_cached == 0) std::fill(s.pending_h.begin(), s.pending_h.end(), 0.f);
  s.cache.assign(prompt.begin(), prompt.begin() + n_cached);
  s.pending.assign(prompt.begin() + n_cached, prompt.end());
  s.params = std::move(params);
  s.sampler = s.params.sampler ? s.params.sampler((int)model_.n_vocab) : make_greedy_sampler();
  // penalties see the prompt, as in llama.cpp (common_sampler_accept on prompt tokens is not done
  // by the server; it only accepts generated tokens)
  s.active = true;
  s.generating = false;
  s.constrained = s.mask_ready = false;
  s.last = -1;
  s.stats = SeqStats{};
  s.stats.n_prompt = (int)prompt.size();
  s.stats.n_cached = n_cached;
  s.stats.n_accepted_per_pos.assign(std::max(spec_.n_max, 0), 0);
  s.t_start = clock_t_::now();
  s.synth_rng.seed(s.params.seed == 0xFFFFFFFFu ? std::random_device{}() : s.params.seed);
  return n_cached;
}

void Context::check_seq(int seq) const {
  if (seq < 0 || seq >= (int)seqs_.size())
    throw std::out_of_range("sequence id " + std::to_string(seq) + " out of range [0, " + std::to_string(seqs_.size()) + ")");
}

void Context::seq_end(int seq) {
  check_seq(seq);
  Seq& s = seqs_.at(seq);
  if (s.active && s.generating) s.stats.t_gen_ms = ms_since(s.t_gen_start);
  s.active = false;
  s.generating = false;
  s.pending.clear();
}

void Context::seq_clear(int seq) {
  check_seq(seq);
  seq_end(seq);
  Seq& s = seqs_.at(seq);
  s.cache.clear();
  mem_->seq_rm(seq, 0);
  if (mtp_mem_) mtp_mem_->seq_rm(seq, 0);
  std::fill(s.pending_h.begin(), s.pending_h.end(), 0.f);
}

void Context::seq_set_allowed(int seq, std::vector<uint32_t> mask) {
  check_seq(seq);
  const size_t words = ((size_t)model_.n_vocab + 31) / 32;
  Seq& s = seqs_[seq];
  if (mask.empty()) { s.constrained = s.mask_ready = false; return; }  // constraint lifted
  if (mask.size() != words)
    throw std::invalid_argument("allowed mask has " + std::to_string(mask.size()) + " words, n_vocab " +
                                std::to_string(model_.n_vocab) + " needs " + std::to_string(words));
  s.allowed = std::move(mask);
  s.constrained = s.mask_ready = true;
}

int32_t Context::sample_next(Seq& s, const float* logits) {
  if (!s.constrained) return s.sampler->sample(logits, (int)model_.n_vocab);
  s.mask_ready = false;  // one mask, one token
  return s.sampler->sample(logits, (int)model_.n_vocab, s.allowed.data());
}

void Context::seq_rm(int seq, int p0) {
  check_seq(seq);
  Seq& s = seqs_.at(seq);
  if (p0 < 0) p0 = 0;  // llama.cpp: p0 < 0 means from the start
  mem_->seq_rm(seq, p0);
  if (mtp_mem_) mtp_mem_->seq_rm(seq, p0);
  if ((int)s.cache.size() > p0) s.cache.resize(p0);
}

StepToken Context::make_token(int32_t id, const float* logits, int n_probs) const {
  StepToken t{id, 1.0f, {}};
  if (n_probs <= 0) return t;
  // llama-server's n_probs: softmax of the raw logits (the sampling module's one definition)
  for (auto& [tid, p] : top_probs(logits, (int)model_.n_vocab, n_probs, id, &t.p)) t.top.push_back({tid, p});
  return t;
}

bool Context::finish_token(Seq& s, StepOutput& out, int32_t id) {
  s.stats.n_gen++;
  gstats_.n_gen_tokens++;
  std::string stop;
  if (!s.params.ignore_eos && model_.is_eog(id)) stop = "eos";
  else if (s.params.n_predict >= 0 && s.stats.n_gen >= s.params.n_predict) stop = "limit";
  else if ((int)s.cache.size() + 1 >= n_ctx_seq_) stop = "ctx";
  if (stop.empty()) return false;
  out.done = true;
  out.stop = stop;
  s.stats.t_gen_ms = ms_since(s.t_gen_start);
  s.active = false;
  s.generating = false;
  return true;
}

void Context::mtp_catch_up(int n, const int32_t* tokens, const int32_t* pos, const int32_t* seqs, const float* h_tgt) {
  // MTP row p pairs (x_p, h_{p-1}): the first row of a sequence takes its pending_h
  const int64_t E = model_.n_embd;
  std::vector<float> hin((size_t)n * E);
  for (int r = 0; r < n; r++) {
    const float* src = (r == 0 || seqs[r] != seqs[r - 1]) ? seqs_[seqs[r]].pending_h.data() : h_tgt + (r - 1) * E;
    std::copy(src, src + E, hin.data() + r * E);
  }
  ForwardIn in;
  in.n = n; in.tokens = tokens; in.pos = pos; in.seq = seqs; in.embd_in = hin.data();
  model_.forward_mtp(tp_, *mtp_mem_, in);
}

void Context::prefill_step(std::vector<StepOutput>& outs, int& budget) {
  std::vector<int32_t> tokens, pos, seqs, out_rows;
  std::vector<int> done_seq;  // sequences whose prompt finishes in this batch
  for (int si = 0; si < n_seq() && budget > 0; si++) {
    Seq& s = seqs_[si];
    if (!s.active || s.generating || s.pending.empty()) continue;
    if (s.stats.n_prompt - (int)s.pending.size() == s.stats.n_cached) s.t_start = clock_t_::now();
    const int take = std::min<int>((int)s.pending.size(), budget);
    const int p0 = mem_->seq_pos(si);
    for (int i = 0; i < take; i++) { tokens.push_back(s.pending[i]); pos.push_back(p0 + i); seqs.push_back(si); }
    budget -= take;
    if (take == (int)s.pending.size()) { out_rows.push_back((int)tokens.size() - 1); done_seq.push_back(si); }
  }
  if (tokens.empty()) return;
  const int n = (int)tokens.size();
  const int64_t V = model_.n_vocab, E = model_.n_embd;
  // step buffers are members: every element read is written by the forward first, so reuse is safe
  // and saves zero-filling rows x n_vocab floats per step
  std::vector<float>& logits = logits_buf_;
  std::vector<float>& hidden = hidden_buf_;
  logits.resize((size_t)out_rows.size() * V);
  hidden.resize(mtp_mem_ ? (size_t)n * E : 0);
  // ubatches; a sequence's rows stay in order
  int out_i = 0;
  for (int b0 = 0; b0 < n; b0 += n_ubatch_) {
    const int b1 = std::min(n, b0 + n_ubatch_);
    std::vector<int32_t> orows;
    const int oi0 = out_i;
    while (out_i < (int)out_rows.size() && out_rows[out_i] < b1) orows.push_back(out_rows[out_i++] - b0);
    ForwardIn in;
    in.n = b1 - b0; in.tokens = tokens.data() + b0; in.pos = pos.data() + b0; in.seq = seqs.data() + b0;
    in.out_rows = orows.data(); in.n_out = (int)orows.size(); in.logits = logits.data() + (size_t)oi0 * V;
    in.hidden = mtp_mem_ ? hidden.data() + (size_t)b0 * E : nullptr;
    model_.forward(tp_, *mem_, in);
    gstats_.n_decode_calls++;
    if (mtp_mem_) {
      mtp_catch_up(b1 - b0, tokens.data() + b0, pos.data() + b0, seqs.data() + b0, hidden.data() + (size_t)b0 * E);
      for (int r = b0; r < b1; r++)
        if (r + 1 == b1 || seqs[r + 1] != seqs[r]) std::copy(hidden.begin() + (size_t)r * E, hidden.begin() + (size_t)(r + 1) * E, seqs_[seqs[r]].pending_h.begin());
    }
  }
  // bookkeeping: move evaluated tokens to the cache
  for (int r = 0; r < n; r++) seqs_[seqs[r]].cache.push_back(tokens[r]);
  for (int si = 0; si < n_seq(); si++) {
    Seq& s = seqs_[si];
    int cnt = 0;
    for (int r = 0; r < n; r++) cnt += seqs[r] == si;
    if (cnt) { s.pending.erase(s.pending.begin(), s.pending.begin() + cnt); gstats_.n_prompt_tokens += cnt; }
  }
  for (size_t k = 0; k < done_seq.size(); k++) {
    Seq& s = seqs_[done_seq[k]];
    s.stats.t_prompt_ms = ms_since(s.t_start);
    gstats_.t_prompt_ms += s.stats.t_prompt_ms;
    s.t_gen_start = clock_t_::now();
    const float* lg = logits.data() + k * V;
    const int32_t id = sample_next(s, lg);
    s.sampler->accept(id);
    StepOutput out;
    out.seq = done_seq[k];
    out.tokens.push_back(make_token(id, lg, s.params.n_probs));
    s.generating = true;
    s.last = id;
    finish_token(s, out, id);
    outs.push_back(std::move(out));
  }
}

std::vector<std::vector<int32_t>> Context::draft(const std::vector<int>& gen, const std::vector<int>& n_draft_max) {
  const int64_t V = model_.n_vocab, E = model_.n_embd;
  std::vector<std::vector<int32_t>> result(gen.size());
  std::vector<int> live;  // indices into gen still drafting
  std::vector<int32_t> tok, pos, seq;
  std::vector<float> hin;
  for (size_t g = 0; g < gen.size(); g++) {
    if (n_draft_max[g] <= 0) continue;
    Seq& s = seqs_[gen[g]];
    live.push_back((int)g);
    tok.push_back(s.last); pos.push_back(mem_->seq_pos(gen[g])); seq.push_back(gen[g]);
    hin.insert(hin.end(), s.pending_h.begin(), s.pending_h.end());
  }
  std::vector<float>& logits = draft_logits_buf_;
  std::vector<float>& hidden = draft_hidden_buf_;
  std::vector<int32_t> rows;
  while (!live.empty()) {
    const int n = (int)live.size();
    logits.resize((size_t)n * V); hidden.resize((size_t)n * E);
    rows.resize(n);
    for (int i = 0; i < n; i++) rows[i] = i;
    ForwardIn in;
    in.n = n; in.tokens = tok.data(); in.pos = pos.data(); in.seq = seq.data(); in.embd_in = hin.data();
    in.out_rows = rows.data(); in.n_out = n; in.logits = logits.data(); in.hidden = hidden.data();
    model_.forward_mtp(tp_, *mtp_mem_, in);
    std::vector<int> next_live;
    std::vector<int32_t> ntok, npos, nseq;
    std::vector<float> nh;
    for (int i = 0; i < n; i++) {
      const float* lg = logits.data() + (size_t)i * V;
      // argmax, and its probability within the softmax of the top-10 logits (upstream's p_min rule)
      const int32_t best = argmax(lg, V);
      const int g = live[i];
      if (spec_.p_min > 0) {
        std::vector<float> top(lg, lg + V);
        const int k = (int)std::min<int64_t>(10, V);
        std::partial_sort(top.begin(), top.begin() + k, top.end(), std::greater<float>());
        double sum = 0;
        for (int j = 0; j < k; j++) sum += std::exp((double)top[j] - top[0]);
        if ((float)(1.0 / sum) < spec_.p_min) continue;
      }
      result[g].push_back(best);
      if ((int)result[g].size() >= n_draft_max[g]) continue;
      next_live.push_back(g);
      ntok.push_back(best); npos.push_back(pos[i] + 1); nseq.push_back(seq[i]);
      nh.insert(nh.end(), hidden.begin() + (size_t)i * E, hidden.begin() + (size_t)(i + 1) * E);
    }
    live.swap(next_live); tok.swap(ntok); pos.swap(npos); seq.swap(nseq); hin.swap(nh);
  }
  // draft-phase MTP KV is discarded before verification; too-short drafts are dropped
  for (size_t g = 0; g < gen.size(); g++) {
    mtp_mem_->seq_rm(gen[g], mem_->seq_pos(gen[g]));
    if ((int)result[g].size() < spec_.n_min) result[g].clear();
  }
  return result;
}

void Context::generate_step(std::vector<StepOutput>& outs) {
  std::vector<int> gen;
  for (int si = 0; si < n_seq(); si++) {
    const Seq& s = seqs_[si];
    // a constrained sequence waits for the mask of its next token (set from Python between steps)
    if (s.active && s.generating && (!s.constrained || s.mask_ready)) gen.push_back(si);
  }
  if (gen.empty()) return;
  const int64_t V = model_.n_vocab, E = model_.n_embd;

  std::vector<int> n_draft_max(gen.size(), 0);
  for (size_t g = 0; g < gen.size(); g++) {
    Seq& s = seqs_[gen[g]];
    if (!spec_.enabled() || s.constrained) continue;
    int m = std::min(spec_.n_max, n_ctx_seq_ - mem_->seq_pos(gen[g]) - 2);
    if (s.params.n_predict >= 0) m = std::min(m, s.params.n_predict - s.stats.n_gen - 1);
    n_draft_max[g] = std::max(0, m);
  }
  std::vector<std::vector<int32_t>> drafts(gen.size());
  if (spec_.enabled()) drafts = draft(gen, n_draft_max);
  // verification batch: [last, d1..dn] per sequence, logits for every row
  std::vector<int32_t> tokens, pos, seqs, rows;
  std::vector<int> row0(gen.size());
  for (size_t g = 0; g < gen.size(); g++) {
    Seq& s = seqs_[gen[g]];
    const int p0 = mem_->seq_pos(gen[g]);
    row0[g] = (int)tokens.size();
    tokens.push_back(s.last); pos.push_back(p0); seqs.push_back(gen[g]);
    for (size_t i = 0; i < drafts[g].size(); i++) { tokens.push_back(drafts[g][i]); pos.push_back(p0 + 1 + (int)i); seqs.push_back(gen[g]); }
  }
  const int n = (int)tokens.size();
  rows.resize(n);
  for (int i = 0; i < n; i++) rows[i] = i;
  std::vector<float>& logits = logits_buf_;
  std::vector<float>& hidden = hidden_buf_;
  logits.resize((size_t)n * V);
  hidden.resize(mtp_mem_ ? (size_t)n * E : 0);
  ForwardIn in;
  in.n = n; in.tokens = tokens.data(); in.pos = pos.data(); in.seq = seqs.data();
  in.out_rows = rows.data(); in.n_out = n; in.logits = logits.data();
  in.hidden = mtp_mem_ ? hidden.data() : nullptr;
  in.snapshot = spec_.enabled();
  model_.forward(tp_, *mem_, in);
  gstats_.n_decode_calls++;
  if (mtp_mem_) mtp_catch_up(n, tokens.data(), pos.data(), seqs.data(), hidden.data());

  for (size_t g = 0; g < gen.size(); g++) {
    const int si = gen[g];
    Seq& s = seqs_[si];
    const auto& d = drafts[g];
    const int nd = (int)d.size();
    const int p0 = pos[row0[g]];
    // sample_and_accept_n: the target is sampled normally at each row; a draft survives while it
    // equals the sampled token; stop after an end-of-generation token
    std::vector<int32_t> acc;
    const bool synth = !spec_.synth_probs.empty();
    std::uniform_real_distribution<double> unif(0.0, 1.0);
    for (int i = 0; i <= nd; i++) {
      const float* lg = logits.data() + (size_t)(row0[g] + i) * V;
      const int32_t id = i == 0 ? sample_next(s, lg) : s.sampler->sample(lg, (int)V);
      if (synth && i < nd && unif(s.synth_rng) < spec_.synth_probs[i] && !model_.is_eog(d[i])) {
        s.sampler->accept(d[i]);  // benchmark mode: the draft is kept whatever the target said
        acc.push_back(d[i]);
        continue;
      }
      s.sampler->accept(id);
      acc.push_back(id);
      if (synth || i == nd || d[i] != id || model_.is_eog(id)) break;
    }
    const int a = (int)acc.size() - 1;  // accepted drafts
    if (nd > 0) {
      s.stats.n_draft += nd; s.stats.n_draft_accepted += a; s.stats.n_verif_steps++;
      gstats_.n_draft += nd; gstats_.n_draft_accepted += a; gstats_.n_drafts++;
      if ((int)gstats_.n_accepted_per_pos.size() < spec_.n_max) gstats_.n_accepted_per_pos.resize(spec_.n_max, 0);
      for (int i = 0; i < a; i++) { s.stats.n_accepted_per_pos[i]++; gstats_.n_accepted_per_pos[i]++; }
    }
    // keep positions p0..p0+a; both memories roll back to the accepted prefix
    mem_->seq_rm(si, p0 + a + 1);
    if (mtp_mem_) {
      mtp_mem_->seq_rm(si, p0 + a + 1);
      std::copy(hidden.begin() + (size_t)(row0[g] + a) * E, hidden.begin() + (size_t)(row0[g] + a + 1) * E, s.pending_h.begin());
    }
    s.cache.push_back(s.last);
    for (int i = 0; i < a; i++) s.cache.push_back(d[i]);
    s.last = acc.back();
    StepOutput out;
    out.seq = si;
    for (int i = 0; i <= a; i++) {
      out.tokens.push_back(make_token(acc[i], logits.data() + (size_t)(row0[g] + i) * V, s.params.n_probs));
      if (finish_token(s, out, acc[i])) break;
    }
    outs.push_back(std::move(out));
  }
}

std::vector<StepOutput> Context::step() {
  std::vector<StepOutput> outs;
  int budget = n_batch_;
  prefill_step(outs, budget);
  generate_step(outs);
  // a sequence whose prompt ended in prefill_step also decodes in generate_step: it then has two
  // entries, in order (first token, then the next ones)
  return outs;
}

std::vector<float> Context::eval(int seq, const std::vector<int32_t>& tokens, bool all_logits) {
  check_seq(seq);
  if (tokens.empty()) return {};
  Seq& s = seqs_.at(seq);
  const int n = (int)tokens.size();
  const int p0 = mem_->seq_pos(seq);
  if (p0 + n > n_ctx_seq_) throw std::invalid_argument("eval beyond the context size");
  const int64_t V = model_.n_vocab;
  std::vector<int32_t> pos(n), seqs(n, seq), rows;
  for (int i = 0; i < n; i++) pos[i] = p0 + i;
  if (all_logits) for (int i = 0; i < n; i++) rows.push_back(i);
  else rows.push_back(n - 1);
  std::vector<float> logits(rows.size() * V);
  ForwardIn in;
  in.n = n; in.tokens = tokens.data(); in.pos = pos.data(); in.seq = seqs.data();
  in.out_rows = rows.data(); in.n_out = (int)rows.size(); in.logits = logits.data();
  model_.forward(tp_, *mem_, in);
  s.cache.insert(s.cache.end(), tokens.begin(), tokens.end());
  return logits;
}

std::string Context::acceptance_line(int seq) const {
  check_seq(seq);
  const SeqStats& st = seqs_.at(seq).stats;
  char buf[160];
  // float, as upstream computes it (the 5th decimal can differ otherwise)
  const float rate = st.n_draft ? (float)st.n_draft_accepted / (float)st.n_draft : 0.0f;
  const double mean_len = st.n_verif_steps ? 1.0 + (double)st.n_draft_accepted / st.n_verif_steps : 0.0;
  std::snprintf(buf, sizeof buf, "draft acceptance = %0.5f (%5lld accepted / %5lld generated), mean len = %5.2f", rate,
                (long long)st.n_draft_accepted, (long long)st.n_draft, mean_len);
  return buf;
}

}  // namespace pyllm
