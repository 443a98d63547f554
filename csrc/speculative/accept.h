// The accept step of speculative decoding (llama.cpp's common_sampler_sample_and_accept_n): the
// target is sampled normally at every verification row, with its own sampler and RNG, and a draft
// survives only while it equals the sampled token. One RNG draw per emitted token is what makes
// speculative output equal plain output (llamacpp-mtp.md 4.3). That is the default; the opt-in
// --spec-accept rejection is sample_and_accept_rejection below.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "model/model.h"
#include "sampling/token_sampler.h"

namespace pyllm {

// logits: [draft.size() + 1][n_vocab], the verification rows of [last, d1..dn]. Returns the accepted
// drafts followed by one target token (the correction, or the bonus when every draft matched), all
// already accepted by smpl; it stops after an end-of-generation token.
//
// synth_probs (benchmark only, from check_spec_params): draft i is kept with probability
// synth_probs[i] whatever the target sampled (the output is then not valid); rng draws the coin.
// masks (optional, a constrained sequence): [draft.size() + 1][mask_words] grammar masks, row i the
// allowed tokens of verification row i (what the grammar allows after d1..di); every draft token
// was checked against its row, so the target samples each row exactly as plain decoding would.
std::vector<int32_t> sample_and_accept_n(TokenSampler& smpl, const float* logits, int64_t n_vocab,
                                         const std::vector<int32_t>& draft, const Model& model,
                                         const std::vector<double>& synth_probs, std::mt19937& rng,
                                         const uint32_t* masks = nullptr, size_t mask_words = 0);

// Speculative sampling (Leviathan et al. 2023; Chen et al. 2023), for a stochastic smpl: at row i the
// target distribution q (smpl's full chain, its penalty history holding the drafts accepted before) and
// the draft distribution p that draft[i] was drawn from; draft[i] = x is kept with probability
// min(1, q(x) / p(x)); on the first rejection the token is drawn from norm(max(0, q - p)) and the step
// ends; when every draft was kept, the bonus token is drawn by smpl itself from the last row. Each
// emitted token is then distributed exactly as plain sampling's (not the same draws: the output equals
// plain sampling in distribution, not token for token). draft_dists[i] empty: the draft was not
// sampled (an ngram or greedy drafter), p is the point mass on draft[i]. rng: the sequence's
// acceptance coins and residual draws (not smpl's). Stops after an end-of-generation token.
std::vector<int32_t> sample_and_accept_rejection(TokenSampler& smpl, const float* logits, int64_t n_vocab,
                                                 const std::vector<int32_t>& draft,
                                                 const std::vector<std::vector<IdProb>>& draft_dists,
                                                 const Model& model, std::mt19937& rng);

// One draw from a distribution given as (id, p) with p summing to about 1 (the last entry takes the rest).
int32_t draw_token(const std::vector<IdProb>& dist, std::mt19937& rng);

}  // namespace pyllm
