#include "speculative/draft_chain.h"

#include <algorithm>
#include <chrono>

#include "speculative/draft_model.h"
#include "speculative/ngram_cache.h"
#include "speculative/ngram_map.h"
#include "speculative/ngram_mod.h"
#include "speculative/ngram_simple.h"

namespace pyllm {

namespace {
// draft-mtp as a chain member: drafts the sequences still without a draft in one batched MTP pass.
// Its memory (begin / rollback / catch_up) stays with the Context, which owns the MtpDrafter.
class MtpStage : public Drafter {
 public:
  MtpStage(MtpDrafter& d, int n_max) : d_(d), n_max_(n_max) {}
  const char* name() const override { return "draft-mtp"; }
  int n_max() const override { return n_max_; }
  void begin(int, const std::vector<int32_t>&, int) override {}
  void draft(const std::vector<DraftRequest>& reqs, std::vector<std::vector<int32_t>>& out) override {
    std::vector<MtpDrafter::Request> q;
    std::vector<size_t> at;
    for (size_t i = 0; i < reqs.size(); i++) {
      if (!out[i].empty() || reqs[i].n_max <= 0) continue;
      const DraftRequest& r = reqs[i];
      q.push_back({r.seq, r.last, r.pos, std::min(n_max_, r.n_max), r.n_min, r.p_min, r.sampler, r.rng, r.dists});
      at.push_back(i);
    }
    if (q.empty()) return;
    std::vector<std::vector<int32_t>> d = d_.draft(q);
    for (size_t k = 0; k < at.size(); k++) out[at[k]] = std::move(d[k]);
  }
  void accept(int, int, bool) override {}

 private:
  MtpDrafter& d_;
  int n_max_;
};
}  // namespace

std::unique_ptr<Drafter> make_ngram_drafter(const std::string& t, const NgramParams& g, int n_seq, int64_t n_vocab) {
  if (t == "ngram-simple") return std::make_unique<NgramSimple>(g.simple);
  if (t == "ngram-map-k") return std::make_unique<NgramMap>(g.map_k, false, n_seq);
  if (t == "ngram-map-k4v") return std::make_unique<NgramMap>(g.map_k4v, true, n_seq);
  if (t == "ngram-mod") return std::make_unique<NgramMod>(g, n_seq);
  if (t == "ngram-cache") return std::make_unique<NgramCache>(g, n_seq, n_vocab);
  return nullptr;
}

DraftChain::DraftChain(const SpecParams& spec, MtpDrafter* mtp, const Model& target, int n_seq, int n_ctx_seq) {
  for (const std::string& t : spec_types_supported()) {
    if (!spec.has(t)) continue;
    if (t == "ngram-mod" && spec.ngram.mod_n_max <= 0) continue;  // drafts nothing
    if (auto d = make_ngram_drafter(t, spec.ngram, n_seq, target.n_vocab)) drafters_.push_back(std::move(d));
    else if (t == "draft-simple") { if (spec.n_max > 0) drafters_.push_back(std::make_unique<DraftModel>(target, *spec.draft_model, n_seq, n_ctx_seq, spec)); }
    else if (t == "draft-mtp") { if (mtp) drafters_.push_back(std::make_unique<MtpStage>(*mtp, spec.n_max)); }
  }
  for (auto& d : drafters_) {
    names_.push_back(d->name());
    n_max_ = std::max(n_max_, d->n_max());
  }
  t_ms_.assign(drafters_.size(), 0.0);
}

void DraftChain::begin(int seq, const std::vector<int32_t>& prompt, int n_same) {
  for (auto& d : drafters_) d->begin(seq, prompt, n_same);
}

std::vector<std::vector<int32_t>> DraftChain::draft(const std::vector<DraftRequest>& reqs, std::vector<int>& which) {
  std::vector<std::vector<int32_t>> out(reqs.size());
  which.assign(reqs.size(), -1);
  size_t left = 0;
  for (const DraftRequest& r : reqs) left += r.n_max > 0;
  for (size_t k = 0; k < drafters_.size() && left > 0; k++) {
    const auto t0 = std::chrono::steady_clock::now();
    drafters_[k]->draft(reqs, out);
    t_ms_[k] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    for (size_t i = 0; i < reqs.size(); i++) {
      if (which[i] >= 0 || out[i].empty()) continue;
      which[i] = (int)k;  // the first drafter with a draft wins the sequence
      if ((int)out[i].size() > reqs[i].n_max) out[i].resize(std::max(0, reqs[i].n_max));
      if (reqs[i].dists && reqs[i].dists->size() > out[i].size()) reqs[i].dists->resize(out[i].size());
      left--;
    }
  }
  for (size_t i = 0; i < reqs.size(); i++)
    if (out[i].empty()) which[i] = -1;
  return out;
}

void DraftChain::accept(int seq, int who, int n_accepted) {
  for (size_t k = 0; k < drafters_.size(); k++) drafters_[k]->accept(seq, n_accepted, (int)k == who);
}

}  // namespace pyllm
