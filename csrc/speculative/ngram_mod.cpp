#include "speculative/ngram_mod.h"

#include <algorithm>
#include <cstdio>

namespace pyllm {

NgramMod::NgramMod(const NgramParams& p, int n_seq)
    : n_(p.mod_n_match), n_min_(p.mod_n_min), n_max_(p.mod_n_max), table_(kSize, kEmpty), seqs_(n_seq) {
  if (n_ < 16)
    std::fprintf(stderr, "ngram_mod n_match=%zu is too small - poor quality is possible, see: https://github.com/ggml-org/llama.cpp/pull/19164\n", n_);
}

size_t NgramMod::slot(const int32_t* t) const {
  uint64_t h = 0;
  for (size_t i = 0; i < n_; i++) h = h * 6364136223846793005ULL + (uint64_t)(int64_t)t[i];
  return (size_t)(h % kSize);
}

void NgramMod::add(const int32_t* t) {
  int32_t& e = table_[slot(t)];
  if (e == kEmpty) used_++;
  e = t[n_];
}

void NgramMod::reset() {
  std::fill(table_.begin(), table_.end(), kEmpty);
  used_ = 0;
}

// every n-gram starting in [from, len - n) with the token after it; from <- len - n
void NgramMod::add_history(size_t& from, const std::vector<int32_t>& h) {
  for (size_t i = from; i + n_ < h.size(); i++) add(h.data() + i);
  from = h.size() - n_;
}

void NgramMod::begin(int seq, const std::vector<int32_t>& prompt, int) {
  Seq& s = seqs_[seq];
  s.added_to = 0;
  s.n_draft_last = 0;
  if (prompt.size() < n_) return;
  add_history(s.added_to, prompt);
  if ((double)used_ / (double)kSize > 0.25) {
    std::fprintf(stderr, "ngram_mod occupancy %.2f exceeds threshold (0.25) - resetting\n", (double)used_ / (double)kSize);
    reset();
  }
}

void NgramMod::draft(const std::vector<DraftRequest>& reqs, std::vector<std::vector<int32_t>>& out) {
  for (size_t r = 0; r < reqs.size(); r++) {
    if (!out[r].empty() || reqs[r].n_max <= 0) continue;
    const std::vector<int32_t>& h = *reqs[r].history;
    Seq& s = seqs_[reqs[r].seq];
    s.n_draft_last = 0;
    if (h.size() < n_) continue;
    if (s.added_to > h.size() - n_) s.added_to = h.size() - n_;  // the history was cut (seq_rm)
    // the n-grams the history gained since the last step (upstream adds them in chunks of 32 tokens; every step
    // costs a few hashes and lets a repeat that starts in the answer itself be drafted at once, whatever the
    // step size: with draft-mtp accepting 4 tokens a step, 32-token chunks left the table a whole chunk behind)
    add_history(s.added_to, h);
    // window = last n-1 tokens + the sampled one, then the chain of lookups
    win_.assign(h.end() - (n_ - 1), h.end());
    win_.push_back(reqs[r].last);
    int i = 0;
    for (; i < n_max_; i++) {
      const int32_t t = table_[slot(win_.data() + i)];
      if (t == kEmpty) break;
      win_.push_back(t);
    }
    if (i < n_max_ && i < n_min_) continue;  // the chain broke before n_min
    out[r].assign(win_.begin() + n_, win_.end());
    s.n_draft_last = out[r].size();
  }
}

void NgramMod::accept(int seq, int n_accepted, bool mine) {
  Seq& s = seqs_[seq];
  if (!mine || s.n_draft_last == 0) return;
  if ((double)n_accepted / (double)s.n_draft_last >= 0.25) { s.n_low = 0; return; }
  if (++s.n_low >= 5) {  // a streak of poor drafts: the table no longer fits this text
    reset();
    s.n_low = 0;
    s.added_to = 0;
  }
}

}  // namespace pyllm
