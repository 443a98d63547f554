#include "speculative/ngram_cache.h"

#include <fstream>
#include <stdexcept>

namespace pyllm {

namespace {
// a candidate must be seen this often and make up this share of the followers (upstream's tables,
// per n-gram size 1..4)
constexpr int kLaxCount[4] = {2, 2, 1, 1}, kLaxPct[4] = {66, 50, 50, 50};
constexpr int kStrictCount[4] = {4, 3, 2, 2}, kStrictPct[4] = {75, 66, 66, 66};
}  // namespace

size_t NgramCache::NgramHash::operator()(const Ngram& g) const {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (int32_t t : g) h = (h ^ (uint32_t)t) * 0x100000001b3ULL;
  return (size_t)h;
}

NgramCache::Cache NgramCache::load(const std::string& path, const char* flag, int64_t n_vocab) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::invalid_argument(std::string(flag) + ": failed to open lookup cache '" + path + "'");
  Cache c;
  auto bad = [&](const std::string& why) {
    return std::invalid_argument(std::string(flag) + ": '" + path + "' is not a lookup cache (" + why + ")");
  };
  auto check_tok = [&](int32_t t, bool pad_ok) {
    if ((t == -1 && pad_ok) || (t >= 0 && t < n_vocab)) return;
    throw bad("token id " + std::to_string(t) + " outside the model's vocabulary of " + std::to_string(n_vocab));
  };
  Ngram g;
  while (f.read(reinterpret_cast<char*>(g.data()), sizeof g)) {
    int32_t n = 0;
    if (!f.read(reinterpret_cast<char*>(&n), sizeof n)) throw bad("truncated record");
    if (n <= 0) throw bad("a record with " + std::to_string(n) + " tokens");
    for (int32_t t : g) check_tok(t, true);
    Part& part = c[g];
    for (int32_t i = 0; i < n; i++) {
      int32_t tc[2];
      if (!f.read(reinterpret_cast<char*>(tc), sizeof tc)) throw bad("truncated record");
      if (tc[1] <= 0) throw bad("a count of " + std::to_string(tc[1]));
      check_tok(tc[0], false);
      part.emplace_back(tc[0], tc[1]);
    }
  }
  if (f.gcount() != 0) throw bad("trailing bytes");
  return c;
}

NgramCache::NgramCache(const NgramParams& p, int n_seq, int64_t n_vocab) : seqs_(n_seq) {
  static_ = std::make_shared<Cache>(p.lookup_cache_static.empty() ? Cache{} : load(p.lookup_cache_static, "--lookup-cache-static", n_vocab));
  dynamic_ = std::make_shared<Cache>(p.lookup_cache_dynamic.empty() ? Cache{} : load(p.lookup_cache_dynamic, "--lookup-cache-dynamic", n_vocab));
}

void NgramCache::begin(int seq, const std::vector<int32_t>&, int n_same) {
  Seq& s = seqs_[seq];
  // counts cannot be taken back: a history that changed is counted again from the start
  if ((size_t)n_same < s.counted) { s.ctx.clear(); s.counted = 0; }
}

namespace {
NgramCache::Ngram gram(const std::vector<int32_t>& v, size_t end, int k) {
  NgramCache::Ngram g;
  g.fill(-1);
  for (int i = 0; i < k; i++) g[i] = v[end - k + i];
  return g;
}

// the most frequent follower of the longest n-gram (of grams[k-1], k = 4..1) that passes the
// thresholds; the static cache's counts for the same followers weight the choice
int32_t pick(const NgramCache::Cache& c, const std::vector<NgramCache::Ngram>& grams, const NgramCache::Part* stat,
             const int* min_count, const int* min_pct) {
  for (int k = (int)grams.size(); k-- > 0;) {
    auto it = c.find(grams[k]);
    if (it == c.end()) continue;
    int64_t best_c = 0, best_s = 0, sum = 0;
    int32_t best = -1;
    for (const auto& [tok, cnt] : it->second) {
      int64_t w = 1;
      if (stat)
        for (const auto& [st, sc] : *stat)
          if (st == tok) { w = 100 * (int64_t)sc; break; }
      if (cnt * w > best_c * best_s) { best = tok; best_c = cnt; best_s = w; }
      sum += cnt;
    }
    if (sum < min_count[k] || 100 * best_c < min_pct[k] * sum) continue;
    return best;
  }
  return -1;
}
}  // namespace

std::vector<int32_t> NgramCache::draft_one(Seq& s, const std::vector<int32_t>& hist, int32_t last) {
  inp_.assign(hist.begin(), hist.end());
  inp_.push_back(last);
  if (inp_.size() < s.counted) { s.ctx.clear(); s.counted = 0; }  // cut without a begin (seq_rm)
  // count every n-gram ending at a token not counted yet (the sampled one included)
  for (size_t i = s.counted; i < inp_.size(); i++)
    for (int k = kMin; k <= kMax && (size_t)k <= i; k++) {
      Part& part = s.ctx[gram(inp_, i, k)];
      auto it = part.begin();
      while (it != part.end() && it->first != inp_[i]) ++it;
      if (it == part.end()) part.emplace_back(inp_[i], 1);
      else it->second++;
    }
  s.counted = inp_.size();
  std::vector<int32_t> d;
  if (inp_.size() < (size_t)kStatic) return d;
  std::vector<Ngram> grams(kMax - kMin + 1);
  while ((int)d.size() < kDraft) {
    const size_t end = inp_.size();
    const Ngram g_static = gram(inp_, end, kStatic);
    auto st = static_->find(g_static);
    const Part* stat = st == static_->end() ? nullptr : &st->second;
    for (int k = kMin; k <= kMax; k++) grams[k - kMin] = (size_t)k <= end ? gram(inp_, end, k) : Ngram{-2, -2, -2, -2};
    int32_t t = pick(s.ctx, grams, stat, kLaxCount, kLaxPct);
    if (t < 0) t = pick(*dynamic_, grams, stat, kStrictCount, kStrictPct);
    if (t < 0 && stat) {  // the static cache alone: its most frequent follower, lax 2-gram thresholds
      int64_t best_c = 0, sum = 0;
      for (const auto& [tok, cnt] : *stat) {
        if (cnt > best_c) { best_c = cnt; t = tok; }
        sum += cnt;
      }
      if (sum < kLaxCount[kStatic - 1] || 100 * best_c < kLaxPct[kStatic - 1] * sum) t = -1;
    }
    if (t < 0) break;
    d.push_back(t);
    inp_.push_back(t);
  }
  return d;
}

void NgramCache::draft(const std::vector<DraftRequest>& reqs, std::vector<std::vector<int32_t>>& out) {
  for (size_t i = 0; i < reqs.size(); i++)
    if (out[i].empty() && reqs[i].n_max > 0) out[i] = draft_one(seqs_[reqs[i].seq], *reqs[i].history, reqs[i].last);
}

}  // namespace pyllm
