#include "engine/context.h"

#include "sampling/sampler.h"
#include "speculative/accept.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace pyllm {

namespace {
using clock_t_ = std::chrono::steady_clock;
double ms_since(clock_t_::time_point t) { return std::chrono::duration<double, std::milli>(clock_t_::now() - t).count(); }
}  // namespace

Context::Context(const Model& model, int n_ctx, int n_seq, int n_batch, int n_ubatch, int n_threads, const SpecParams& spec)
    : model_(model), tp_(n_threads), spec_(spec), n_batch_(std::max(1, n_batch)), n_ubatch_(std::max(1, std::min(n_batch, n_ubatch))) {
  if (n_seq < 1) throw std::invalid_argument("n_seq must be >= 1");
  if (n_ctx < n_seq * 8) throw std::invalid_argument("n_ctx " + std::to_string(n_ctx) + " is too small for " + std::to_string(n_seq) + " sequences");
  n_ctx_seq_ = n_ctx / n_seq;
  synth_probs_ = check_spec_params(spec_);
  if (spec_.mtp()) drafter_ = std::make_unique<MtpDrafter>(model, tp_, n_seq, n_ctx_seq_, spec_);
  if (spec_.enabled()) {
    chain_ = std::make_unique<DraftChain>(spec_, drafter_.get(), model, n_seq, n_ctx_seq_);
    n_draft_max_ = chain_->n_max();
    for (const std::string& nm : chain_->names()) gstats_.drafters.push_back({nm, 0, 0, 0, 0, std::vector<int64_t>(n_draft_max_, 0), 0});
  }
  // verification of [last, d1..dn] keeps a recurrent plane per row, n+1 for the longest draft n
  // (any accepted prefix is a plane switch) as memory allows (longer drafts: checkpoint + replay)
  n_planes_ = n_draft_max_ > 0 ? verify_planes(model, spec_, n_draft_max_) : 1;
  if (n_draft_max_ > 0) n_ubatch_ = std::max(n_ubatch_, n_draft_max_ + 1);
  ckpt_.resize(n_planes_ <= n_draft_max_ ? n_seq : 0);
  if (spec_.n_max_auto && chain_) {  // the start-up cost measurement (speculative/adaptive.h)
    const int cap = std::min(spec_.n_max, n_draft_max_);
    DraftCosts c = measure_verify_ms(model, tp_, std::min(cap + 1, n_planes_), 3);
    c.draft_ms = drafter_ ? drafter_->measure_step_ms(3) : 0.0;
    adaptive_ = std::make_unique<AdaptiveDraftLength>(n_seq, cap, c);
  }
  if (!synth_probs_.empty())
    std::fprintf(stderr, "synthetic speculative acceptance is enabled for benchmarking; generated output is not valid\n");
  mem_ = model.create_memory(n_seq, n_ctx_seq_, n_planes_);
  seqs_.resize(n_seq);
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
  // this request's speculative settings over the context's (checked before anything changes)
  const SeqParams& q = params;
  if (q.spec_n_max > n_draft_max_)
    throw std::invalid_argument(n_draft_max_ > 0 ? "speculative.n_max " + std::to_string(q.spec_n_max) + " exceeds the server's longest draft " +
                                                       std::to_string(n_draft_max_) + " (--spec-draft-n-max and the ngram sizes)"
                                                 : "speculative.n_max: speculative decoding is off (--spec-type none)");
  if (q.spec_p_min > 1.0f || q.spec_p_min != q.spec_p_min) throw std::invalid_argument("speculative.p_min must be within [0, 1]");
  Seq& s = seqs_[seq];
  gen_end_valid_ = false;  // the time to the next step is this request's set-up, not the loop's overhead
  // longest common prefix with what the sequence holds; always re-evaluate the last prompt token
  size_t lcp = 0;
  while (lcp < s.cache.size() && lcp < prompt.size() && s.cache[lcp] == prompt[lcp]) lcp++;
  int n_cached = (int)std::min(lcp, prompt.size() - 1);
  int ckpt = -1;
  // the recurrent state cannot go back that far: the nearest context checkpoint at or below, or none
  if (!mem_->can_rm(seq, n_cached)) n_cached = ckpt = ckpt_restore(seq, n_cached);
  mem_->seq_rm(seq, n_cached);
  if (drafter_) drafter_->begin(seq, n_cached);
  if (ckpt > 0 && drafter_) {
    const Checkpoint* c = s.ckpts.best(ckpt);
    if (c && !c->mtp_h.empty()) drafter_->set_pending(seq, c->mtp_h);
  }
  s.ckpts.drop_above((int32_t)lcp);  // those past the common prefix describe another prompt
  s.ckpt_hints.clear();
  if (chain_) chain_->begin(seq, prompt, (int)lcp);  // lcp: what equals the sequence's previous history
  s.cache.assign(prompt.begin(), prompt.begin() + n_cached);
  s.pending.assign(prompt.begin() + n_cached, prompt.end());
  s.n_max = q.spec_n_max >= 0 ? q.spec_n_max : n_draft_max_;
  s.n_min = std::min(s.n_max, q.spec_n_min >= 0 ? q.spec_n_min : spec_.n_min);  // n_min <= n_max, as upstream clamps
  s.p_min = q.spec_p_min >= 0 ? q.spec_p_min : spec_.p_min;
  s.auto_len = adaptive_ && q.spec_n_max < 0;
  if (adaptive_) adaptive_->begin(seq);
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
  s.stats.ckpt_restored = ckpt > 0 ? ckpt : -1;
  s.stats.n_accepted_per_pos.assign(chain_ ? n_draft_max_ : std::max(spec_.n_max, 0), 0);
  s.stats.drafters.clear();
  for (const std::string& nm : drafter_names()) s.stats.drafters.push_back({nm, 0, 0, 0, 0, std::vector<int64_t>(n_draft_max_, 0), 0});
  s.t_start = clock_t_::now();
  s.synth_rng.seed(s.params.seed == 0xFFFFFFFFu ? std::random_device{}() : s.params.seed);
  s.reject = spec_.rejection() && chain_ && synth_probs_.empty() && s.sampler->stochastic();
  // its own stream (the sampler's draws stay the plain ones), reproducible for a given seed
  if (s.reject) s.spec_rng.seed(s.params.seed == 0xFFFFFFFFu ? std::random_device{}() : s.params.seed ^ 0x5bd1e995u);
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
  s.ckpts.clear();
  mem_->seq_rm(seq, 0);
  if (drafter_) drafter_->begin(seq, 0);
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

void Context::check_draft(int seq, std::vector<int32_t>& draft) {
  Seq& s = seqs_[seq];
  const size_t words = ((size_t)model_.n_vocab + 31) / 32;
  s.allowed.resize(words);  // the next token's row only
  if (draft.empty()) return;
  std::vector<uint32_t> rows;
  const int k = draft_check_(seq, draft, rows);
  if (k < 0 || k > (int)draft.size() || rows.size() != (size_t)k * words)
    throw std::runtime_error("draft check of sequence " + std::to_string(seq) + " returned " + std::to_string(k) + " tokens and " +
                             std::to_string(rows.size()) + " mask words for a draft of " + std::to_string(draft.size()));
  draft.resize(k);
  s.allowed.insert(s.allowed.end(), rows.begin(), rows.end());
}

const uint32_t* Context::take_mask(Seq& s) {
  if (!s.constrained) return nullptr;
  s.mask_ready = false;
  return s.allowed.data();
}

void Context::seq_rm(int seq, int p0) {
  check_seq(seq);
  Seq& s = seqs_.at(seq);
  if (p0 < 0) p0 = 0;  // llama.cpp: p0 < 0 means from the start
  mem_->seq_rm(seq, p0);
  if (drafter_) drafter_->rollback(seq, p0);
  if ((int)s.cache.size() > p0) s.cache.resize(p0);
  s.ckpts.drop_above(p0);
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

void Context::prefill_step(std::vector<StepOutput>& outs, int& budget) {
  std::vector<int32_t> tokens, pos, seqs, out_rows;
  std::vector<int> done_seq;  // sequences whose prompt finishes in this batch
  for (int si = 0; si < n_seq() && budget > 0; si++) {
    Seq& s = seqs_[si];
    if (!s.active || s.generating || s.pending.empty()) continue;
    if (s.stats.n_prompt - (int)s.pending.size() == s.stats.n_cached) s.t_start = clock_t_::now();
    const int p0 = mem_->seq_pos(si);
    int take = std::min<int>((int)s.pending.size(), budget);
    if (ckpt_on()) take = std::min(take, std::max(1, ckpt_split(s, p0) - p0));  // stop where a checkpoint goes
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
  hidden.resize(drafter_ ? (size_t)n * E : 0);
  std::vector<MtpDrafter::Run> runs;
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
    in.hidden = drafter_ ? hidden.data() + (size_t)b0 * E : nullptr;
    model_.forward(tp_, *mem_, in);
    gstats_.n_decode_calls++;
    if (!drafter_) continue;
    runs.clear();  // the MTP memory follows every ubatch, one run per sequence
    for (int r = b0; r < b1;) {
      int e = r;
      while (e < b1 && seqs[e] == seqs[r]) e++;
      runs.push_back({seqs[r], tokens.data() + r, pos[r], e - r, hidden.data() + (size_t)r * E});
      r = e;
    }
    drafter_->catch_up(runs);
  }
  // bookkeeping: move evaluated tokens to the cache
  for (int r = 0; r < n; r++) seqs_[seqs[r]].cache.push_back(tokens[r]);
  for (int si = 0; si < n_seq(); si++) {
    Seq& s = seqs_[si];
    int cnt = 0;
    for (int r = 0; r < n; r++) cnt += seqs[r] == si;
    if (cnt) { s.pending.erase(s.pending.begin(), s.pending.begin() + cnt); gstats_.n_prompt_tokens += cnt; }
  }
  if (ckpt_on())
    for (int si = 0; si < n_seq(); si++)
      if (std::find(seqs.begin(), seqs.end(), si) != seqs.end() && ckpt_wanted(seqs_[si], mem_->seq_pos(si), true)) ckpt_take(si);
  for (size_t k = 0; k < done_seq.size(); k++) {
    Seq& s = seqs_[done_seq[k]];
    s.stats.t_prompt_ms = ms_since(s.t_start);
    gstats_.t_prompt_ms += s.stats.t_prompt_ms;
    s.t_gen_start = clock_t_::now();
    const float* lg = logits.data() + k * V;
    const int32_t id = s.sampler->sample(lg, (int)V, take_mask(s));
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

std::vector<std::vector<int32_t>> Context::draft(const std::vector<int>& gen, std::vector<int>& which) {
  if (!chain_) { which.assign(gen.size(), -1); return std::vector<std::vector<int32_t>>(gen.size()); }
  std::vector<DraftRequest> reqs;
  for (int si : gen) {
    Seq& s = seqs_[si];
    const int p0 = mem_->seq_pos(si);
    // room as upstream computes it: the verification rows must fit the context, and no more
    // tokens than n_predict still allows
    int m = std::min(s.n_max, n_ctx_seq_ - p0 - 2);
    if (s.auto_len) m = std::min(m, adaptive_->choose(si, (int)gen.size()));
    if (s.params.n_predict >= 0) m = std::min(m, s.params.n_predict - s.stats.n_gen - 1);
    if (s.constrained && !draft_check_) m = 0;  // drafts the grammar cannot check: none
    reqs.push_back({si, &s.cache, s.last, p0, std::max(0, m), s.n_min, s.p_min});
    s.dists.clear();
    if (s.rejects()) { reqs.back().sampler = s.sampler.get(); reqs.back().rng = &s.spec_rng; reqs.back().dists = &s.dists; }
  }
  const int64_t f0 = drafter_ ? drafter_->n_draft_forwards() : 0;
  const double t0 = drafter_ ? drafter_->t_draft_ms() : 0.0;
  std::vector<std::vector<int32_t>> d = chain_->draft(reqs, which);
  for (size_t g = 0; g < gen.size(); g++)
    if (seqs_[gen[g]].constrained) check_draft(gen[g], d[g]);  // `which` stays: its drafter hears of 0 accepted
  for (size_t k = 0; k < chain_->names().size(); k++) gstats_.drafters[k].t_draft_ms += chain_->take_draft_ms((int)k);
  if (drafter_) {
    gstats_.n_draft_forwards = drafter_->n_draft_forwards();
    gstats_.t_draft_ms = drafter_->t_draft_ms();
    if (adaptive_) {
      const MtpDrafter::CatchUp cu = drafter_->take_catch_up();
      adaptive_->observe_draft((int)(gstats_.n_draft_forwards - f0), gstats_.t_draft_ms - t0, cu.seqs, cu.rows);
    }
  }
  return d;
}

void Context::verify(const Batch& b, int n_seqs) {
  const int n = b.n();
  std::vector<int32_t> rows(n);
  for (int i = 0; i < n; i++) rows[i] = i;
  logits_buf_.resize((size_t)n * model_.n_vocab);
  hidden_buf_.resize(drafter_ ? (size_t)n * model_.n_embd : 0);
  ForwardIn in = b.rows();
  in.out_rows = rows.data(); in.n_out = n; in.logits = logits_buf_.data();
  in.hidden = drafter_ ? hidden_buf_.data() : nullptr;
  // a recurrent plane per row, so any verified prefix can be kept; a batch of one row per sequence (no
  // drafts this step) keeps every row, so it updates the state in place as plain decoding does
  in.snapshot = n_draft_max_ > 0 && n > n_seqs;
  model_.forward(tp_, *mem_, in);
  gstats_.n_decode_calls++;
}

void Context::count_drafts(Seq& s, int n_draft, int a, int who) {
  if (n_draft == 0) return;
  if (adaptive_) adaptive_->observe_accept((int)(&s - seqs_.data()), n_draft, a, s.auto_len);
  s.stats.n_draft += n_draft; s.stats.n_draft_accepted += a; s.stats.n_verif_steps++;
  gstats_.n_draft += n_draft; gstats_.n_draft_accepted += a; gstats_.n_drafts++;
  if ((int)gstats_.n_accepted_per_pos.size() < n_draft_max_) gstats_.n_accepted_per_pos.resize(n_draft_max_, 0);
  for (int i = 0; i < a; i++) { s.stats.n_accepted_per_pos[i]++; gstats_.n_accepted_per_pos[i]++; }
  for (DrafterStats* d : {&s.stats.drafters[who], &gstats_.drafters[who]}) {
    d->n_drafts++; d->n_draft += n_draft; d->n_accepted += a; d->n_drafts_accepted += a > 0;
    for (int i = 0; i < a; i++) d->n_accepted_per_pos[i]++;
  }
}

StepOutput Context::emit(int si, const std::vector<int32_t>& acc, const float* logits) {
  Seq& s = seqs_[si];
  // fed and kept: last and the accepted drafts (acc minus its final sample, the new last)
  s.cache.push_back(s.last);
  s.cache.insert(s.cache.end(), acc.begin(), acc.end() - 1);
  s.last = acc.back();
  StepOutput out;
  out.seq = si;
  for (size_t i = 0; i < acc.size(); i++) {
    out.tokens.push_back(make_token(acc[i], logits + i * model_.n_vocab, s.params.n_probs));
    if (finish_token(s, out, acc[i])) break;
  }
  return out;
}

// One decoding step of every generating sequence: draft, verify in one batch, accept, trim.
void Context::generate_step(std::vector<StepOutput>& outs) {
  std::vector<int> gen;
  for (int si = 0; si < n_seq(); si++) {
    const Seq& s = seqs_[si];
    // a constrained sequence waits for the mask of its next token (set from Python between steps)
    if (s.active && s.generating && (!s.constrained || s.mask_ready)) gen.push_back(si);
  }
  if (gen.empty()) { gen_end_valid_ = false; return; }
  if (adaptive_ && gen_end_valid_) adaptive_->observe_gap((int)gen.size(), ms_since(t_gen_end_));
  const auto t_step = clock_t_::now();
  const double t_draft0 = gstats_.t_draft_ms;  // the drafter's timer: this step's drafting forwards
  const int64_t V = model_.n_vocab, E = model_.n_embd;
  std::vector<int> who;  // the drafter of each draft (-1: none)
  const std::vector<std::vector<int32_t>> drafts = draft(gen, who);  // empty without speculation
  // verification batch: [last, d1..dn] of every sequence, rows of gen[g] from row0[g]
  batch_.clear();
  std::vector<int> row0;
  for (size_t g = 0; g < gen.size(); g++) {
    row0.push_back(batch_.n());
    batch_.add(seqs_[gen[g]].last, mem_->seq_pos(gen[g]), gen[g]);
    for (int32_t t : drafts[g]) batch_.add(t, batch_.pos.back() + 1, gen[g]);
  }
  // a draft the planes cannot hold row by row: keep the state before it, for a replay
  if (!ckpt_.empty())
    for (size_t g = 0; g < gen.size(); g++)
      if ((int)drafts[g].size() >= n_planes_) ckpt_[gen[g]].save(*mem_, gen[g]);
  const auto t_verify = clock_t_::now();
  verify(batch_, (int)gen.size());
  Batch replay;
  std::vector<MtpDrafter::Run> kept;
  for (size_t g = 0; g < gen.size(); g++) {
    Seq& s = seqs_[gen[g]];
    const float* lg = logits_buf_.data() + (size_t)row0[g] * V;
    const std::vector<int32_t> acc =
        s.rejects() && !drafts[g].empty()
            ? sample_and_accept_rejection(*s.sampler, lg, V, drafts[g], s.dists, model_, s.spec_rng)
            : sample_and_accept_n(*s.sampler, lg, V, drafts[g], model_, synth_probs_, s.synth_rng, take_mask(s),
                                  ((size_t)V + 31) / 32);
    const int a = (int)acc.size() - 1, p0 = batch_.pos[row0[g]];
    if (who[g] >= 0) {
      count_drafts(s, (int)drafts[g].size(), a, who[g]);
      chain_->accept(gen[g], who[g], a);
    }
    // trim: keep p0..p0+a (the recurrent state switches to that row's plane, nothing is recomputed),
    // or, when later rows overwrote that plane, back to the checkpoint and replay the kept rows
    if (mem_->can_rm(gen[g], p0 + a + 1)) mem_->seq_rm(gen[g], p0 + a + 1);
    else {
      ckpt_[gen[g]].restore(*mem_, gen[g], p0);
      for (int i = 0; i <= a; i++) replay.add(batch_.tokens[row0[g] + i], p0 + i, gen[g]);
    }
    // deferred: the next draft computes them in its first forward (or a sequence at k = 0 never does)
    if (drafter_) kept.push_back({gen[g], &batch_.tokens[row0[g]], p0, a + 1, hidden_buf_.data() + (size_t)row0[g] * E, true});
    outs.push_back(emit(gen[g], acc, lg));
  }
  if (replay.n() > 0) {  // no outputs: the state is wanted (its logits were sampled in the verification)
    model_.forward(tp_, *mem_, replay.rows());
    gstats_.n_replay_rows += replay.n();
  }
  if (drafter_) drafter_->catch_up(kept);  // the MTP memory follows the kept rows only
  const double ms = ms_since(t_verify);
  gstats_.n_gen_steps++; gstats_.n_gen_rows += batch_.n(); gstats_.t_verify_ms += ms;
  // the whole step but the drafting forwards (D): a step at k = 0 still builds its batch and asks the drafters,
  // and timing only the forward put plain decoding 7-10% below what it costs on the 12M trained model
  if (adaptive_) adaptive_->observe_step(batch_.n(), (int)gen.size(), ms_since(t_step) - (gstats_.t_draft_ms - t_draft0));
  t_gen_end_ = clock_t_::now();
  gen_end_valid_ = true;
  if (ckpt_on())
    for (int si : gen)
      if (ckpt_wanted(seqs_[si], mem_->seq_pos(si), false)) ckpt_take(si);
}

std::vector<StepOutput> Context::step() {
  std::vector<StepOutput> outs;
  int budget = n_batch_;
  prefill_step(outs, budget);
  if (budget != n_batch_) gen_end_valid_ = false;  // a prompt batch ran: not the loop's overhead
  generate_step(outs);
  if (drafter_) gstats_.n_mtp_rows = drafter_->n_rows();
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
  std::vector<float> logits(rows.size() * V), hidden(drafter_ ? (size_t)n * model_.n_embd : 0);
  ForwardIn in;
  in.n = n; in.tokens = tokens.data(); in.pos = pos.data(); in.seq = seqs.data();
  in.out_rows = rows.data(); in.n_out = (int)rows.size(); in.logits = logits.data();
  in.hidden = drafter_ ? hidden.data() : nullptr;
  model_.forward(tp_, *mem_, in);
  // the MTP memory keeps mirroring the target, so generation can continue after eval
  if (drafter_) drafter_->catch_up({{seq, tokens.data(), p0, n, hidden.data()}});
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

std::vector<std::string> Context::drafter_lines(int seq) const {
  check_seq(seq);
  std::vector<std::string> lines;
  for (const DrafterStats& d : seqs_.at(seq).stats.drafters) {
    char buf[256];
    const double mean = d.n_drafts ? 1.0 + (double)d.n_accepted / d.n_drafts : 0.0;
    std::snprintf(buf, sizeof buf, "statistics %16s: #gen drafts = %6lld, #acc drafts = %5lld, #gen tokens = %6lld, #acc tokens = %5lld, #mean acc len = %.2f",
                  d.name.c_str(), (long long)d.n_drafts, (long long)d.n_drafts_accepted, (long long)d.n_draft, (long long)d.n_accepted, mean);
    lines.push_back(buf);
  }
  return lines;
}

}  // namespace pyllm
