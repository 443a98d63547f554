// --spec-type ngram-cache (llama.cpp's common_ngram_cache, common/ngram-cache.cpp): n-gram
// statistics. For every 1..4-gram of the sequence's history the tokens that followed it are
// counted; a draft token is the most frequent follower of the longest n-gram whose count is large
// and dominant enough, looked up in the context cache (lax thresholds), then in the dynamic cache
// -lcd (strict thresholds), then in the static cache -lcs alone (its 2-grams), the static counts
// weighting the others' candidates. Up to 8 tokens are drafted, each extending the n-grams.
// -lcs / -lcd are files in llama.cpp's lookup-cache format (llama-lookup-create / llama-lookup-merge):
// records of [4 x int32 n-gram (-1 padded)][int32 n][n x (int32 token, int32 count)]. Both are read
// only, as in llama-server.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "speculative/drafter.h"
#include "speculative/spec_params.h"

namespace pyllm {

class NgramCache : public Drafter {
 public:
  static constexpr int kMin = 1, kMax = 4, kStatic = 2, kDraft = 8;
  using Ngram = std::array<int32_t, kMax>;
  struct NgramHash { size_t operator()(const Ngram& g) const; };
  using Part = std::vector<std::pair<int32_t, int32_t>>;  // follower token -> count, in first-seen order
  using Cache = std::unordered_map<Ngram, Part, NgramHash>;

  // Throws std::invalid_argument when a cache file cannot be read, is malformed or holds token ids
  // outside [0, n_vocab).
  NgramCache(const NgramParams& p, int n_seq, int64_t n_vocab);
  const char* name() const override { return "ngram-cache"; }
  int n_max() const override { return kDraft; }
  void begin(int seq, const std::vector<int32_t>& prompt, int n_same) override;
  void draft(const std::vector<DraftRequest>& reqs, std::vector<std::vector<int32_t>>& out) override;
  void accept(int, int, bool) override {}

  static Cache load(const std::string& path, const char* flag, int64_t n_vocab);

 private:
  struct Seq { Cache ctx; size_t counted = 0; };  // n-grams ending before `counted` are in ctx
  std::vector<int32_t> draft_one(Seq& s, const std::vector<int32_t>& hist, int32_t last);

  std::shared_ptr<const Cache> static_, dynamic_;  // shared by every sequence, read only
  std::vector<Seq> seqs_;
  std::vector<int32_t> inp_;  // scratch: history + last + draft
};

}  // namespace pyllm
