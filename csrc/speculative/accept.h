// The accept step of speculative decoding (llama.cpp's common_sampler_sample_and_accept_n): the
// target is sampled normally at every verification row, with its own sampler and RNG, and a draft
// survives only while it equals the sampled token. One RNG draw per emitted token is what makes
// speculative output equal plain output (llamacpp-mtp.md 4.3); there is no rejection sampling.
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

}  // namespace pyllm
