#include "speculative/ngram_map.h"

#include <algorithm>

namespace pyllm {

NgramMap::NgramMap(const NgramParams::Map& p, bool four_values, int n_seq)
    : n_(p.size_n), m_(p.size_m), min_hits_(p.min_hits), k4v_(four_values), seqs_(n_seq) {
  for (State& st : seqs_) st.hash.assign(kHashSize, 0);
}

// upstream's LCG hash of an n-gram (32-bit wrap-around)
uint32_t NgramMap::hash_of(const int32_t* t) const {
  uint32_t h = 0;
  for (size_t i = 0; i < n_; i++) h = h * 2654435761u + (uint32_t)t[i];
  return h;
}

bool NgramMap::key_at(const std::vector<int32_t>& h, size_t j, const int32_t* key) const {
  if (j + n_ > h.size()) return false;
  return std::equal(key, key + n_, h.begin() + j);
}

// Entries pointing at history positions >= from are stale (the history changed there).
void NgramMap::forget_from(State& st, size_t from) {
  for (uint32_t& e : st.hash)
    if (e != 0 && e >= from) e = 0;
  st.hashed_to = from > 0 ? from - 1 : 0;
  for (size_t i = st.keys.size(); i-- > 0;) {
    Key& k = st.keys[i];
    if (k.idx >= from) { st.keys.erase(st.keys.begin() + i); continue; }
    if (!k4v_) continue;
    auto keep = std::remove_if(k.values.begin(), k.values.end(), [&](const Value& v) { return v.idx != 0 && v.idx >= from; });
    std::fill(keep, k.values.end(), Value{});
    if (k.values[0].idx == 0) st.keys.erase(st.keys.begin() + i);
  }
}

void NgramMap::begin(int seq, const std::vector<int32_t>& prompt, int n_same) {
  State& st = seqs_[seq];
  const size_t len = prompt.size();
  // upstream cleans what followed the previous begin when the history shrank; what differs from the
  // previous history (n_same) is stale too
  size_t from = st.begin_len;
  if (from > len) from = len > n_ + m_ ? len - n_ - m_ : 0;
  from = std::min(from, (size_t)n_same);
  if ((size_t)n_same < st.checked_len) forget_from(st, from);
  st.checked_len = st.begin_len = len;
  st.drafted = false;
}

std::vector<int32_t> NgramMap::draft_one(State& st, const std::vector<int32_t>& hist, int32_t last) {
  st.drafted = false;
  const size_t len = hist.size(), n = n_, m = m_;
  if (len < 2 * n + m) return {};
  st.checked_len = len;
  std::vector<int32_t> key(hist.end() - (n - 1), hist.end());
  key.push_back(last);
  // 1. the hash of earlier n-grams, 2. a scan of what the hash does not hold yet, newest first
  // (the prompt's part, then the generated part)
  size_t at = 0;
  const size_t e = st.hash[hash_of(key.data()) % kHashSize];
  if (e != 0 && e < len - n - m - 1 && key_at(hist, e, key.data())) at = e;
  const size_t top_prompt = st.begin_len > n + m + 1 ? st.begin_len - n - m - 1 : 0;
  for (size_t j = top_prompt; at == 0 && j > st.hashed_to; j--)
    if (key_at(hist, j, key.data())) at = j;
  for (size_t j = len - n - m - 1; at == 0 && j > st.begin_len && j > st.hashed_to; j--)
    if (key_at(hist, j, key.data())) at = j;
  // hash the n-grams scanned (the first index seen for a hash stays)
  auto add = [&](size_t j) {
    uint32_t& slot = st.hash[hash_of(hist.data() + j) % kHashSize];
    if (slot == 0) slot = (uint32_t)j;
  };
  for (size_t j = top_prompt; j > st.hashed_to; j--) add(j);
  for (size_t j = len - n - m - 1; j > st.begin_len && j > st.hashed_to; j--) add(j);
  st.hashed_to = std::max(st.hashed_to, len - n - m - 1);
  if (at == 0) return {};

  size_t ki = 0;
  while (ki < st.keys.size() && !key_at(hist, st.keys[ki].idx, key.data())) ki++;
  if (ki == st.keys.size()) {
    Key k;
    k.idx = at;
    for (Value& v : k.values) v.n_accepted = (int)m;
    st.keys.push_back(k);
  }
  Key& k = st.keys[ki];
  k.hits = std::min(k.hits + 1, kMaxCount);
  int vi = 0;
  if (k4v_) {
    if (k.hits < min_hits_) return {};
    // count the m-grams after every occurrence of the key since the last count
    for (size_t i = k.stat_idx; i <= at; i++) {
      if (!key_at(hist, i, key.data())) continue;
      const size_t v0 = i + n;
      for (Value& v : k.values) {
        const bool same = v.idx != 0 && v.idx + m <= hist.size() && v0 + m <= hist.size() &&
                          std::equal(hist.begin() + v0, hist.begin() + v0 + m, hist.begin() + v.idx);
        if (v.idx == 0) v = Value{v0, 0, (int)m};
        else if (!same) continue;
        v.count = std::min(v.count + 1, kMaxCount);
        break;
      }
    }
    k.stat_idx = at;
    int others = 0;
    for (int v = 1; v < kValues; v++)
      if (k.values[v].count > k.values[vi].count) vi = v;
    for (int v = 0; v < kValues; v++)
      if (v != vi) others += k.values[v].count;
    if (others > 0 && k.values[vi].count < 2 * others) return {};  // no clear favourite
  }
  // as upstream, the draft is what followed this occurrence, at most what was accepted last time
  const size_t nd = std::min(m, (size_t)std::max(0, k.values[vi].n_accepted));
  st.drafted = true;
  st.draft_key = ki;
  st.draft_value = vi;
  return std::vector<int32_t>(hist.begin() + (at + n), hist.begin() + (at + n + nd));
}

void NgramMap::draft(const std::vector<DraftRequest>& reqs, std::vector<std::vector<int32_t>>& out) {
  for (size_t i = 0; i < reqs.size(); i++) {
    if (!out[i].empty() || reqs[i].n_max <= 0) continue;
    State& st = seqs_[reqs[i].seq];
    // the history was cut without a begin (Context::seq_rm): start over rather than read past it
    if (reqs[i].history->size() < st.checked_len) forget_from(st, 0), st.checked_len = st.begin_len = 0;
    out[i] = draft_one(st, *reqs[i].history, reqs[i].last);
  }
}

void NgramMap::accept(int seq, int n_accepted, bool mine) {
  State& st = seqs_[seq];
  if (!mine || !st.drafted) return;
  st.keys[st.draft_key].values[st.draft_value].n_accepted = n_accepted;
}

}  // namespace pyllm
