#include "speculative/draft_model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>

#include "sampling/token_sampler.h"
#include "tokenizer/tokenizer.h"

namespace pyllm {

void check_draft_vocab(const Model& target, const Model& draft) {
  const Tokenizer& t = *target.tokenizer();
  const Tokenizer& d = *draft.tokenizer();
  const std::string pre = "--spec-draft-model '" + draft.gguf().path() + "': its vocabulary does not match the target's: ";
  if (t.model_name() != d.model_name())
    throw std::invalid_argument(pre + "tokenizer " + d.model_name() + " vs " + t.model_name());
  if (t.add_bos() != d.add_bos() || (t.add_bos() && t.bos() != d.bos()))
    throw std::invalid_argument(pre + "BOS " + std::to_string(d.bos()) + " vs " + std::to_string(t.bos()));
  if (t.add_eos() != d.add_eos() || (t.add_eos() && t.eos() != d.eos()))
    throw std::invalid_argument(pre + "EOS " + std::to_string(d.eos()) + " vs " + std::to_string(t.eos()));
  const int32_t nt = t.n_vocab(), nd = d.n_vocab();
  if (std::abs(nt - nd) > 128)
    throw std::invalid_argument(pre + std::to_string(nd) + " tokens vs " + std::to_string(nt) + " (at most 128 apart)");
  if (draft.n_vocab > target.n_vocab)  // a draft token must be a valid target row
    throw std::invalid_argument(pre + "its output has " + std::to_string(draft.n_vocab) + " rows, the target " + std::to_string(target.n_vocab));
  for (int32_t i = 5; i < std::min(nt, nd); i++)
    if (t.token_text(i) != d.token_text(i))
      throw std::invalid_argument(pre + "token " + std::to_string(i) + " is '" + d.token_text(i) + "' vs '" + t.token_text(i) + "'");
}

DraftModel::DraftModel(const Model& target, const Model& draft, int n_seq, int n_ctx_seq, const SpecParams& spec)
    : m_(draft), n_max_(spec.n_max), n_min_(spec.n_min), p_min_(spec.p_min),
      tp_(spec.draft_threads > 0 ? spec.draft_threads : 1) {
  check_draft_vocab(target, draft);
  // n_max + 1 drafting planes: any accepted prefix of a draft is a plane switch
  mem_ = draft.create_memory(n_seq, n_ctx_seq, n_max_ + 2);
  held_.resize(n_seq);
}

void DraftModel::sync(int seq, const std::vector<int32_t>& hist, int32_t last) {
  std::vector<int32_t>& h = held_[seq];
  size_t lcp = 0;
  const size_t n = hist.size() + 1;
  auto at = [&](size_t i) { return i < hist.size() ? hist[i] : last; };
  while (lcp < h.size() && lcp < n && h[lcp] == at(lcp)) lcp++;
  if (lcp == n) lcp--;  // the last row is fed again: its logits start the draft
  if (!mem_->can_rm(seq, (int32_t)lcp)) lcp = 0;  // the recurrent state cannot go back there: start over
  mem_->seq_rm(seq, (int32_t)lcp);
  h.resize(lcp);
  for (size_t i = lcp; i < n; i++) {
    batch_.add(at(i), (int32_t)i, seq);
    h.push_back(at(i));
  }
}

namespace {
// top-1 and its probability within the softmax of the top-10 logits
int32_t pick(const float* lg, int64_t V, float p_min, std::vector<float>& top, bool& ok) {
  const int32_t best = argmax(lg, V);
  ok = true;
  if (p_min > 0) {
    top.assign(lg, lg + V);
    const int k = (int)std::min<int64_t>(10, V);
    std::partial_sort(top.begin(), top.begin() + k, top.end(), std::greater<float>());
    double sum = 0;
    for (int j = 0; j < k; j++) sum += std::exp((double)top[j] - top[0]);
    ok = (float)(1.0 / sum) >= p_min;
  }
  return best;
}
}  // namespace

void DraftModel::draft(const std::vector<DraftRequest>& reqs, std::vector<std::vector<int32_t>>& out) {
  const int64_t V = m_.n_vocab;
  std::vector<size_t> live;  // requests drafting, in batch order
  batch_.clear();
  for (size_t i = 0; i < reqs.size(); i++) {
    if (!out[i].empty() || reqs[i].n_max <= 0) continue;
    sync(reqs[i].seq, *reqs[i].history, reqs[i].last);
    live.push_back(i);
  }
  if (live.empty()) return;
  // catch-up: every missing row of every sequence (in ubatches of kChunk rows), logits of each
  // sequence's last row
  constexpr int kChunk = 512;
  std::vector<int32_t> orows;
  for (int r = 0; r < batch_.n(); r++)
    if (r + 1 == batch_.n() || batch_.seq[r + 1] != batch_.seq[r]) orows.push_back(r);
  logits_.resize(orows.size() * V);
  size_t oi = 0;
  for (int b0 = 0; b0 < batch_.n(); b0 += kChunk) {
    const int b1 = std::min(batch_.n(), b0 + kChunk);
    std::vector<int32_t> rows;
    const size_t o0 = oi;
    while (oi < orows.size() && orows[oi] < b1) rows.push_back(orows[oi++] - b0);
    ForwardIn in;
    in.n = b1 - b0; in.tokens = batch_.tokens.data() + b0; in.pos = batch_.pos.data() + b0; in.seq = batch_.seq.data() + b0;
    in.out_rows = rows.data(); in.n_out = (int)rows.size(); in.logits = logits_.data() + o0 * V;
    m_.forward(tp_, *mem_, in);
  }
  const std::vector<size_t> mine = live;
  for (int depth = 0; !live.empty(); depth++) {
    Batch next;
    std::vector<size_t> next_live;
    for (size_t k = 0; k < live.size(); k++) {
      const DraftRequest& q = reqs[live[k]];
      bool ok;
      const int32_t t = pick(logits_.data() + k * V, V, q.p_min, top_, ok);  // the sequence's p_min
      std::vector<int32_t>& dd = out[live[k]];
      if (!ok) continue;
      dd.push_back(t);
      if ((int)dd.size() >= std::min(n_max_, q.n_max)) continue;
      next.add(t, q.pos + 1 + depth, q.seq);  // fed: the next depth drafts from it
      held_[q.seq].push_back(t);
      next_live.push_back(live[k]);
    }
    if (next.n() == 0) break;
    std::vector<int32_t> rows(next.n());
    for (int r = 0; r < next.n(); r++) rows[r] = r;
    logits_.resize((size_t)next.n() * V);
    ForwardIn fi = next.rows();
    fi.out_rows = rows.data(); fi.n_out = next.n(); fi.logits = logits_.data();
    fi.snapshot = true;  // a recurrent plane per drafted token: the accepted prefix can be kept
    m_.forward(tp_, *mem_, fi);
    live.swap(next_live);
  }
  for (size_t i : mine)
    if ((int)out[i].size() < reqs[i].n_min) out[i].clear();
}

}  // namespace pyllm
