// --spec-type ngram-simple (llama.cpp's common_ngram_simple_draft): prompt lookup without any state.
// The last size_n tokens (ending with the sampled one) are searched backwards in the history; the
// size_m tokens that followed the most recent earlier occurrence are the draft.
#pragma once
#include "speculative/drafter.h"
#include "speculative/spec_params.h"

namespace pyllm {

class NgramSimple : public Drafter {
 public:
  explicit NgramSimple(const NgramParams::Map& p) : n_(p.size_n), m_(p.size_m) {}
  const char* name() const override { return "ngram-simple"; }
  int n_max() const override { return m_; }
  void begin(int, const std::vector<int32_t>&, int) override {}
  void draft(const std::vector<DraftRequest>& reqs, std::vector<std::vector<int32_t>>& out) override;
  void accept(int, int, bool) override {}

  // the draft for one history + sampled token (empty when there is no match)
  std::vector<int32_t> lookup(const std::vector<int32_t>& hist, int32_t last) const;

 private:
  size_t n_, m_;
};

}  // namespace pyllm
