// Speculative decoding settings (llama.cpp's --spec-type, --spec-draft-n-max/-n-min/-p-min and the
// benchmark-only --spec-synth-len/--spec-synth-rates) and their one validation, check_spec_params.
#pragma once
#include <string>
#include <vector>

namespace pyllm {

struct SpecParams {
  std::string type = "none";  // "none" | "draft-mtp"
  int n_max = 3, n_min = 0;   // draft length bounds (a draft shorter than n_min is dropped)
  float p_min = 0.0f;         // stop drafting below this top-1 probability (softmax of the top-10 logits)
  double synth_len = -1.0;    // synthetic acceptance: target mean length (-1: unset, upstream's sentinel)
  std::vector<double> synth_rates;  // ... or per-position unconditional acceptance rates
  // --spec-draft-n-max auto: each sequence's draft length is chosen per step (0..n_max) from its running
  // acceptance and the measured step costs (speculative/adaptive.h); n_max is then the cap
  bool n_max_auto = false;
  // the cheap draft head (speculative/draft_head.h): drafting only, the target verifies with its own head
  std::string draft_head_type;  // --spec-draft-head-type: "" = the model's head, else a GGML type name
  int draft_vocab = 0;          // --spec-draft-vocab N: draft over N ids (0 = the whole vocabulary)
  bool enabled() const { return type == "draft-mtp" && n_max > 0; }
};

// Validates p; throws std::invalid_argument naming the setting (the synthetic-acceptance messages are
// upstream's). Returns the synthetic acceptance's conditional probability of keeping draft i given
// drafts < i were kept, or an empty vector when synthetic acceptance is off.
std::vector<double> check_spec_params(const SpecParams& p);

}  // namespace pyllm
