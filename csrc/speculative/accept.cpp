#include "speculative/accept.h"

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

}  // namespace pyllm
