// What the engine and the speculative accept step need from a sampler: sample one token from a row
// of logits and record accepted tokens (penalty history). Adapters wrap the sampling module's chain
// (bindings); the greedy sampler here is the default when a request brings none.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <vector>

namespace pyllm {

struct IdProb { int32_t id; float p; };

struct TokenSampler {
  virtual ~TokenSampler() = default;
  // full chain; allowed (optional, a grammar's bitmask: bit id%32 of word id/32) restricts the draw
  virtual int32_t sample(const float* logits, int n_vocab, const uint32_t* allowed = nullptr) = 0;
  virtual void accept(int32_t token) = 0;                         // penalties history
  // Speculative rejection sampling (--spec-accept rejection, speculative/accept.h). stochastic(): the chain
  // ends in a distribution (temp > 0, no mirostat); otherwise the sequence is drafted greedily and verified
  // by exact match. target_dist: that distribution over a verification row, without drawing (the RNG of
  // sample() does not move). draft_dist: the request's drafting chain over a draft row (sampler.h
  // Sampler::draft_params). Both fill out with the tokens of p > 0.
  virtual bool stochastic() const { return false; }
  virtual void target_dist(const float*, int, std::vector<IdProb>&) { throw std::logic_error("this sampler has no distribution"); }
  virtual void draft_dist(const float*, int, std::vector<IdProb>&) { throw std::logic_error("this sampler has no distribution"); }
};
using SamplerFactory = std::function<std::unique_ptr<TokenSampler>(int n_vocab)>;

// first maximum (lowest id among ties), the same token the chain's greedy path picks
inline int32_t argmax(const float* x, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; i++) if (x[i] > x[best]) best = (int32_t)i;
  return best;
}

inline bool mask_has(const uint32_t* m, int64_t i) { return (m[i >> 5] >> (i & 31)) & 1u; }

inline std::unique_ptr<TokenSampler> make_greedy_sampler() {
  struct Greedy : TokenSampler {
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
  return std::make_unique<Greedy>();
}

}  // namespace pyllm
