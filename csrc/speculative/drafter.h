// The interface of a drafter that guesses the next tokens of a sequence from what it holds
// (llama.cpp's common_speculative_impl): the ngram family implements it directly, the MTP drafter
// through DraftChain's adapter. A drafter never changes the output: every draft is verified by the
// target and cut at the first token the target's own sampler does not produce (accept.h).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "sampling/token_sampler.h"

namespace pyllm {

struct DraftRequest {
  int seq;
  const std::vector<int32_t>* history;  // the tokens the target holds (prompt + accepted), positions 0..pos-1
  int32_t last;                         // the sampled token the target reads next, at position pos
  int32_t pos;
  int n_max;                            // room (context, n_predict); <= 0: no draft
  int n_min = 0;                        // the sequence's draft-model bounds (its request's speculative.n_min /
  float p_min = 0.0f;                   // p_min, or the context's)
  // --spec-accept rejection, a stochastic sequence: a drafter that can sample draws each token from
  // sampler->draft_dist over its logits with rng and appends that distribution to *dists (one per
  // drafted token, cut with the draft); one that cannot leaves *dists empty (a point mass per token).
  TokenSampler* sampler = nullptr;
  std::mt19937* rng = nullptr;
  std::vector<std::vector<IdProb>>* dists = nullptr;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual const char* name() const = 0;
  // the longest draft this drafter makes (its own limit, before the room of a request)
  virtual int n_max() const = 0;
  // seq (re)starts on prompt; its first n_same tokens equal what the sequence held before
  virtual void begin(int seq, const std::vector<int32_t>& prompt, int n_same) = 0;
  // Fills out[i] for every request i whose out[i] is empty (a drafter earlier in the chain did not
  // draft it) and whose n_max > 0; it may leave it empty. Drafts may exceed n_max (the chain cuts).
  virtual void draft(const std::vector<DraftRequest>& reqs, std::vector<std::vector<int32_t>>& out) = 0;
  // The target accepted n_accepted tokens of seq's last draft; mine: this drafter made it (else
  // another drafter did, or nobody drafted).
  virtual void accept(int seq, int n_accepted, bool mine) = 0;
};

}  // namespace pyllm
