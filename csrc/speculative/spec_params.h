// Speculative decoding settings (llama.cpp's --spec-type list, --spec-draft-n-max/-n-min/-p-min, the
// ngram drafters' --spec-ngram-* and -lcs/-lcd, and the benchmark-only --spec-synth-len/-rates) and
// their one validation, check_spec_params.
#pragma once
#include <string>
#include <vector>

namespace pyllm {

class Model;

// The ngram drafters' settings, with llama.cpp's defaults (common/common.h).
struct NgramParams {
  struct Map { int size_n = 12, size_m = 48, min_hits = 1; };  // key n-gram, drafted m-gram, hits needed
  Map simple, map_k, map_k4v;
  int mod_n_match = 24, mod_n_min = 48, mod_n_max = 64;        // ngram-mod
  std::string lookup_cache_static, lookup_cache_dynamic;       // ngram-cache: -lcs / -lcd files
};

struct SpecParams {
  // "none", one type, or a comma list ("draft-mtp,ngram-mod"); every type in it is used, in
  // llama.cpp's priority order (see speculative/draft_chain.h)
  std::string type = "none";
  int n_max = 3, n_min = 0;   // draft-model length bounds (a draft shorter than n_min is dropped)
  float p_min = 0.0f;         // stop drafting below this top-1 probability (softmax of the top-10 logits)
  NgramParams ngram;
  const Model* draft_model = nullptr;  // draft-simple: -md FILE (not owned), same vocabulary as the target
  int draft_threads = 0;               // its threads (-td; 0: one)
  int max_planes = 0;                  // cap on the recurrent planes for verification (0: auto; tests)
  double synth_len = -1.0;    // synthetic acceptance: target mean length (-1: unset, upstream's sentinel)
  std::vector<double> synth_rates;  // ... or per-position unconditional acceptance rates
  // --spec-draft-n-max auto: each sequence's draft length is chosen per step (0..n_max) from its running
  // acceptance and the measured step costs (speculative/adaptive.h); n_max is then the cap
  bool n_max_auto = false;
  // the cheap draft head (speculative/draft_head.h): drafting only, the target verifies with its own head
  std::string draft_head_type;  // --spec-draft-head-type: "" = the model's head, else a GGML type name
  int draft_vocab = 0;          // --spec-draft-vocab N: draft over N ids (0 = the whole vocabulary)
  // --spec-accept: "match" (llama.cpp's sample-and-accept-n: output == plain sampling with the same seed)
  // or "rejection" (speculative sampling against sampled drafts: output == plain sampling in distribution,
  // higher acceptance at temperature > 0; speculative/accept.h)
  std::string accept = "match";
  bool rejection() const { return accept == "rejection"; }

  std::vector<std::string> types() const;   // the list, without "none" (empty when a "none" is in it)
  bool has(const std::string& t) const;
  bool mtp() const { return has("draft-mtp") && n_max > 0; }
  // the longest draft any configured drafter makes (llama.cpp's common_speculative_n_max)
  int n_max_all() const;
  bool enabled() const { return n_max_all() > 0; }
};

// The speculative types pyllm implements, in llama.cpp's priority order (the first drafter that
// returns a draft for a sequence wins the step).
const std::vector<std::string>& spec_types_supported();

// Validates p; throws std::invalid_argument naming the setting (the flag checks' and the synthetic
// acceptance's messages are upstream's). Returns the synthetic acceptance's conditional probability
// of keeping draft i given drafts < i were kept, or an empty vector when synthetic acceptance is off.
std::vector<double> check_spec_params(const SpecParams& p);

}  // namespace pyllm
