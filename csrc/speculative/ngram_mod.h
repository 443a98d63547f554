// --spec-type ngram-mod (llama.cpp's common_ngram_mod, common/ngram-mod.cpp, and its driver): one
// hash table shared by all sequences maps the hash of every n_match-gram of the histories to the
// token that followed it (the latest write wins). A draft follows the chain from the last n_match
// tokens for up to n_max tokens; it is dropped when it stops before n_min.
// As upstream: the table is cleared when more than a quarter of it is used after adding a prompt,
// and when one sequence's drafts are mostly rejected (< 25% accepted) five times in a row.
#pragma once
#include <cstdint>
#include <vector>

#include "speculative/drafter.h"
#include "speculative/spec_params.h"

namespace pyllm {

class NgramMod : public Drafter {
 public:
  NgramMod(const NgramParams& p, int n_seq);
  const char* name() const override { return "ngram-mod"; }
  int n_max() const override { return n_max_; }
  void begin(int seq, const std::vector<int32_t>& prompt, int n_same) override;
  void draft(const std::vector<DraftRequest>& reqs, std::vector<std::vector<int32_t>>& out) override;
  void accept(int seq, int n_accepted, bool mine) override;

  size_t used() const { return used_; }

 private:
  static constexpr size_t kSize = 4 * 1024 * 1024;  // upstream's table size (16 MiB)
  static constexpr int32_t kEmpty = -1;
  size_t slot(const int32_t* t) const;
  void add(const int32_t* t);  // t[0..n) -> t[n]
  void reset();
  void add_history(size_t& from, const std::vector<int32_t>& h);

  struct Seq { size_t added_to = 0; size_t n_draft_last = 0; int n_low = 0; };
  size_t n_;
  int n_min_, n_max_;
  std::vector<int32_t> table_;
  size_t used_ = 0;
  std::vector<Seq> seqs_;
  std::vector<int32_t> win_;  // scratch: key + draft
};

}  // namespace pyllm
