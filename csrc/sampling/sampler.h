// llama.cpp's sampler chain (common_sampler semantics) over one row of logits.
//
// Chain, as llama.cpp builds it: logit bias -> the configured steps in `order` (default penalties,
// dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc, temperature) -> dist(seed) draws one token.
// With mirostat 1/2 the chain is logit bias -> temperature -> mirostat instead.
// Steps that llama.cpp would create "empty" for the given params (top_p >= 1, min_p <= 0, ...) are
// skipped, so the RNG draws are the same as llama.cpp's.
//
// Every sort uses (logit desc, id asc), a total order: ties resolve to the lowest token id no matter
// how much of the array is sorted, so greedy == argmax with lowest-id ties.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace pyllm {

constexpr uint32_t SAMPLER_DEFAULT_SEED = 0xFFFFFFFFu;  // LLAMA_DEFAULT_SEED: draw a random seed

enum class SamplerType { PENALTIES, DRY, TOP_N_SIGMA, TOP_K, TYPICAL_P, TOP_P, MIN_P, XTC, TEMPERATURE, INFILL, ADAPTIVE_P };

struct LogitBias {
  int32_t token;
  float bias;
};

// Field names and defaults of llama.cpp's common_params_sampling.
struct SamplerParams {
  uint32_t seed = SAMPLER_DEFAULT_SEED;
  int32_t n_probs = 0;
  int32_t min_keep = 0;
  int32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float xtc_probability = 0.00f;
  float xtc_threshold = 0.10f;
  float typ_p = 1.00f;
  float temp = 0.80f;
  float dynatemp_range = 0.00f;
  float dynatemp_exponent = 1.00f;
  int32_t penalty_last_n = 64;
  float penalty_repeat = 1.00f;
  float penalty_freq = 0.00f;
  float penalty_present = 0.00f;
  float dry_multiplier = 0.0f;  // DRY is not implemented: enabling it throws
  float dry_base = 1.75f;
  int32_t dry_allowed_length = 2;
  int32_t dry_penalty_last_n = 64;
  std::vector<std::string> dry_sequence_breakers = {"\n", ":", "\"", "*"};
  float adaptive_target = -1.0f;  // adaptive-p is not implemented: naming it in `samplers` throws
  float adaptive_decay = 0.90f;
  int32_t mirostat = 0;
  float top_n_sigma = -1.00f;
  float mirostat_tau = 5.00f;
  float mirostat_eta = 0.10f;
  bool ignore_eos = false;
  std::vector<SamplerType> samplers = {
      SamplerType::PENALTIES, SamplerType::DRY,   SamplerType::TOP_N_SIGMA,
      SamplerType::TOP_K,     SamplerType::TYPICAL_P, SamplerType::TOP_P,
      SamplerType::MIN_P,     SamplerType::XTC,   SamplerType::TEMPERATURE,
  };
  std::vector<LogitBias> logit_bias;      // applied to the raw logits, before the chain
  std::vector<LogitBias> logit_bias_eog;  // -inf for every EOG token; merged in when ignore_eos
};

// Sampler names as llama.cpp spells them ("top_k", "top-k", "topk", "nucleus", "temp", "typ", ...),
// case-insensitive; unknown names are skipped like llama.cpp does (it only warns).
std::vector<SamplerType> sampler_types_from_names(const std::vector<std::string>& names);
// One char per sampler: d k y p s m t x i e a (llama.cpp's --sampling-seq).
std::vector<SamplerType> sampler_types_from_chars(const std::string& chars);
std::string sampler_type_name(SamplerType t);

struct TokenData {
  int32_t id;
  float logit;
  float p;
};

// Softmax of raw logits (llama-server's n_probs without post_sampling_probs): the n most likely
// tokens, most likely first (ties: lowest id first). If token >= 0 and token_prob != nullptr,
// *token_prob receives that token's probability.
std::vector<std::pair<int32_t, float>> top_probs(const float* logits, int n_vocab, int n,
                                                 int32_t token = -1, float* token_prob = nullptr);

class Sampler {
 public:
  Sampler(const SamplerParams& params, int n_vocab);

  // Runs the chain over logits[0..n_vocab) and draws a token. Does NOT accept it: call accept().
  // allowed (optional, a grammar's mask): bit (id % 32) of word id / 32 set = id may be drawn;
  // the others get -inf right after the logit bias, before the chain. Throws if none is allowed.
  int32_t sample(const float* logits, const uint32_t* allowed = nullptr);
  // Speculative rejection sampling (speculative/accept.h): the chain's final distribution over logits, the
  // candidates with p > 0 (any order), without the draw: the dist RNG does not move (XTC's coin does, as in
  // sample()). Only when has_distribution(): temp > 0 and no mirostat (greedy is a point mass, handled
  // by exact match; mirostat's distribution depends on its own draws). Throws otherwise.
  bool has_distribution() const;
  void distribution(const float* logits, std::vector<TokenData>& out, const uint32_t* allowed = nullptr);
  // The drafting chain of a request: its steps without the history (penalties) and the coin (XTC), so the
  // draft distribution is a function of the draft logits alone; the other settings are the request's.
  static SamplerParams draft_params(const SamplerParams& p);
  // Records a token in the history (penalties). llama-server accepts the prompt tokens too.
  void accept(int32_t token);
  // Clears the history and reseeds the RNGs (a new random seed if seed == -1).
  void reset();

  // Raw-softmax probabilities (see the free function).
  std::vector<std::pair<int32_t, float>> top_probs(const float* logits, int n) const {
    return pyllm::top_probs(logits, n_vocab_, n);
  }
  // After sample(): the candidates left by the chain with their final probabilities, highest
  // first, zero probabilities dropped (llama-server's post_sampling_probs).
  std::vector<std::pair<int32_t, float>> post_sampling_probs(int n) const;
  // After sample(): probability of the selected token in the post-sampling distribution.
  float selected_prob() const;
  // After sample(): all candidates left by the chain, in chain order, with normalized p.
  std::vector<TokenData> candidates() const;

  const SamplerParams& params() const { return params_; }
  int n_vocab() const { return n_vocab_; }
  uint32_t seed() const { return seed_cur_; }  // the seed actually in use (dist sampler)
  std::vector<int32_t> history() const;  // the last penalty_last_n accepted tokens, oldest first

 private:
  struct Cands {  // llama_token_data_array: a window [off, off+size) of buf
    std::vector<TokenData> buf;
    size_t off = 0, size = 0;
    bool sorted = false;
    bool identity = false;  // data()[i].id == i for the whole vocab: index by id directly
    int selected = -1;
    TokenData* data() { return buf.data() + off; }
    const TokenData* data() const { return buf.data() + off; }
  };

  void run_chain(const float* logits, const uint32_t* allowed);  // logit bias, mask, the steps (no draw)
  void sort_desc(size_t k);  // top k sorted descending, size = k, sorted = true
  void softmax(bool do_sort);
  void apply_logit_bias();
  void apply_allowed(const uint32_t* allowed);
  void apply_penalties();
  void apply_top_n_sigma();
  void apply_top_k(int32_t k);
  void apply_typical();
  void apply_top_p();
  void apply_min_p();
  void apply_xtc();
  void apply_temp_ext();
  void apply_temp(float t);
  void apply_dist();
  void apply_mirostat();
  void apply_mirostat_v2();
  void reseed();

  SamplerParams params_;
  int n_vocab_;
  std::vector<SamplerType> chain_;  // enabled steps only
  std::vector<LogitBias> bias_;
  Cands c_;

  uint32_t seed_cur_ = 0;
  std::mt19937 rng_;      // dist / mirostat
  uint32_t xtc_seed_cur_ = 0;
  std::mt19937 rng_xtc_;  // llama.cpp's XTC owns a separately seeded RNG
  float mu_ = 0.0f;       // mirostat

  bool penalties_on_ = false;
  std::vector<int32_t> prev_;    // ring of the last penalty_last_n accepted tokens
  size_t prev_first_ = 0;
  std::vector<int32_t> count_;   // [n_vocab] occurrences in prev_
  std::vector<uint32_t> stamp_;  // [n_vocab] visit marks: each distinct token penalized once
  uint32_t epoch_ = 0;
};

}  // namespace pyllm
