#include "speculative/ngram_simple.h"

#include <algorithm>

namespace pyllm {

std::vector<int32_t> NgramSimple::lookup(const std::vector<int32_t>& hist, int32_t last) const {
  const size_t len = hist.size();
  std::vector<int32_t> d;
  if (len <= n_ + m_ + 1) return d;  // upstream's minimum history
  // key = hist[len-n+1 ..] + last; candidates start at j in [1, len-n-1] (0 is "no match"), newest first
  auto matches = [&](size_t j) {
    for (size_t k = 0; k + 1 < n_; k++)
      if (hist[j + k] != hist[len - n_ + 1 + k]) return false;
    return hist[j + n_ - 1] == last;
  };
  size_t at = 0;
  for (size_t j = len - n_ - 1; j > 0; j--)
    if (matches(j)) { at = j; break; }
  if (at == 0) return d;
  const size_t n_copy = std::min(m_, len - (at + n_));
  if (n_copy < n_) return d;  // upstream drops drafts shorter than the key
  d.assign(hist.begin() + (at + n_), hist.begin() + (at + n_ + n_copy));
  return d;
}

void NgramSimple::draft(const std::vector<DraftRequest>& reqs, std::vector<std::vector<int32_t>>& out) {
  for (size_t i = 0; i < reqs.size(); i++)
    if (out[i].empty() && reqs[i].n_max > 0) out[i] = lookup(*reqs[i].history, reqs[i].last);
}

}  // namespace pyllm
