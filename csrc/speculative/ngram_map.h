// --spec-type ngram-map-k and ngram-map-k4v (llama.cpp's common_ngram_map, common/ngram-map.cpp):
// prompt lookup with per-sequence statistics. A key n-gram (the last size_n tokens, ending with the
// sampled one) is found in the history through a hash of every earlier n-gram; the draft is the
// size_m tokens that followed it.
//  - map-k drafts whenever the key occurred before;
//  - map-k4v keeps up to 4 distinct m-grams seen after each key with their counts, and drafts only
//    when the key was hit min_hits times and the most frequent m-gram is at least twice as frequent
//    as the others together.
// Each (key, m-gram) remembers how many of its last draft's tokens were accepted and drafts no more
// than that next time (upstream's rule: a draft rejected outright is not offered again).
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "speculative/drafter.h"
#include "speculative/spec_params.h"

namespace pyllm {

class NgramMap : public Drafter {
 public:
  NgramMap(const NgramParams::Map& p, bool four_values, int n_seq);
  const char* name() const override { return k4v_ ? "ngram-map-k4v" : "ngram-map-k"; }
  int n_max() const override { return m_; }
  void begin(int seq, const std::vector<int32_t>& prompt, int n_same) override;
  void draft(const std::vector<DraftRequest>& reqs, std::vector<std::vector<int32_t>>& out) override;
  void accept(int seq, int n_accepted, bool mine) override;

 private:
  static constexpr int kValues = 4;        // m-grams kept per key
  static constexpr int kMaxCount = 16380;  // counters saturate here
  static constexpr size_t kHashSize = 262144;
  struct Value { size_t idx = 0; int count = 0; int n_accepted = 0; };  // idx 0: unused slot
  struct Key {
    size_t idx = 0;       // where the key n-gram occurs in the history
    size_t stat_idx = 0;  // statistics are counted up to here
    int hits = 0;
    std::array<Value, kValues> values;
  };
  struct State {
    std::vector<Key> keys;
    std::vector<uint32_t> hash;  // hash of an n-gram -> its (first hashed) start index, 0 = none
    size_t hashed_to = 0;        // n-grams starting at <= this index are in `hash`
    size_t begin_len = 0;        // history length at the last begin
    size_t checked_len = 0;      // history length at the last draft / begin
    bool drafted = false;        // the last draft(): key and value it used
    size_t draft_key = 0;
    int draft_value = 0;
  };

  std::vector<int32_t> draft_one(State& st, const std::vector<int32_t>& hist, int32_t last);
  bool key_at(const std::vector<int32_t>& h, size_t j, const int32_t* key) const;
  uint32_t hash_of(const int32_t* t) const;
  void forget_from(State& st, size_t from);

  size_t n_, m_;
  int min_hits_;
  bool k4v_;
  std::vector<State> seqs_;
};

}  // namespace pyllm
