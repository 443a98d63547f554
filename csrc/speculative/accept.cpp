#include "speculative/accept.h"

#include <stdexcept>
#include <string>

namespace pyllm {

std::vector<int32_t> sample_and_accept_n(TokenSampler& smpl, const float* logits, int64_t n_vocab,
                                         const std::vector<int32_t>& draft, const Model& model,
                                         const std::vector<double>& synth_probs, std::mt19937& rng,
                                         const uint32_t* masks, size_t mask_words) {
  const int nd = (int)draft.size();
  const bool synth = !synth_probs.empty();
  std::uniform_real_distribution<double> unif(0.0, 1.0);
  std::vector<int32_t> acc;
  for (int i = 0; i <= nd; i++) {
    // the target is sampled first at every row: its RNG advances exactly as in plain decoding
    const int32_t id = smpl.sample(logits + (size_t)i * n_vocab, (int)n_vocab, masks ? masks + (size_t)i * mask_words : nullptr);
    // the coin is only drawn for a real draft position (the RNG stream depends on it)
    if (synth && i < nd && unif(rng) < synth_probs[i] && !model.is_eog(draft[i])) {
      smpl.accept(draft[i]);
      acc.push_back(draft[i]);
      continue;
    }
    smpl.accept(id);
    acc.push_back(id);
    if (synth || i == nd || draft[i] != id || model.is_eog(id)) break;
  }
  return acc;
}

int32_t draw_token(const std::vector<IdProb>& dist, std::mt19937& rng) {
  if (dist.empty()) throw std::logic_error("draw_token: an empty distribution");
  double sum = 0;
  for (const IdProb& t : dist) sum += t.p;
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng) * sum;
  double run = 0;
  for (const IdProb& t : dist) {
    run += t.p;
    if (t.p > 0 && run >= u) return t.id;
  }
  for (size_t i = dist.size(); i-- > 0;)
    if (dist[i].p > 0) return dist[i].id;
  return dist.back().id;
}

std::vector<int32_t> sample_and_accept_rejection(TokenSampler& smpl, const float* logits, int64_t n_vocab,
                                                 const std::vector<int32_t>& draft,
                                                 const std::vector<std::vector<IdProb>>& draft_dists,
                                                 const Model& model, std::mt19937& rng) {
  const int nd = (int)draft.size();
  if (!draft_dists.empty() && (int)draft_dists.size() != nd)
    throw std::logic_error("rejection sampling: " + std::to_string(draft_dists.size()) + " draft distributions for " +
                           std::to_string(nd) + " drafted tokens");
  std::uniform_real_distribution<double> unif(0.0, 1.0);
  std::vector<int32_t> acc;
  std::vector<IdProb> q, resid;
  thread_local std::vector<float> pd;  // the draft distribution of the row, dense (zero outside it)
  if ((int64_t)pd.size() < n_vocab) pd.assign(n_vocab, 0.0f);
  for (int i = 0; i < nd; i++) {
    const float* row = logits + (size_t)i * n_vocab;
    smpl.target_dist(row, (int)n_vocab, q);
    const int32_t x = draft[i];
    if (x < 0 || x >= n_vocab) throw std::logic_error("rejection sampling: draft token " + std::to_string(x) + " out of range");
    const bool sampled = !draft_dists.empty() && !draft_dists[i].empty();
    if (sampled) for (const IdProb& t : draft_dists[i]) pd[t.id] = t.p;
    else pd[x] = 1.0f;  // a point mass
    double qx = 0;
    for (const IdProb& t : q) if (t.id == x) { qx = t.p; break; }
    const double px = pd[x];
    // px > 0: x was drawn from p
    const bool keep = px > 0 && unif(rng) * px < qx;
    int32_t id = x;
    if (!keep) {
      // the residual norm(max(0, q - p)) is zero outside q's support
      resid.clear();
      for (const IdProb& t : q) {
        const double r = (double)t.p - pd[t.id];
        if (r > 0) resid.push_back({t.id, (float)r});
      }
      id = draw_token(resid.empty() ? q : resid, rng);  // empty: q == p up to rounding
    }
    if (sampled) for (const IdProb& t : draft_dists[i]) pd[t.id] = 0.0f;
    else pd[x] = 0.0f;
    smpl.accept(id);
    acc.push_back(id);
    if (!keep || model.is_eog(id)) return acc;
  }
  // every draft kept: the bonus token, drawn by the target's own sampler from the last row
  const int32_t id = smpl.sample(logits + (size_t)nd * n_vocab, (int)n_vocab);
  smpl.accept(id);
  acc.push_back(id);
  return acc;
}

}  // namespace pyllm
