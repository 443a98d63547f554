#include "speculative/spec_params.h"

#include <cmath>
#include <stdexcept>

#include "speculative/draft_head.h"

namespace pyllm {

namespace {
// --spec-synth-len / --spec-synth-rates -> per-position unconditional rates, validated as upstream's
// common_speculative_synth_rates_resolve does
std::vector<double> synth_rates(const SpecParams& p) {
  const bool has_len = p.synth_len != -1.0, has_rates = !p.synth_rates.empty();
  if (!has_len && !has_rates) return {};
  if (has_len && has_rates) throw std::invalid_argument("synthetic acceptance length and rates are mutually exclusive");
  const int n_max = p.enabled() ? p.n_max : 0;
  if (n_max <= 0) throw std::invalid_argument("synthetic acceptance requires at least one speculative token");
  if (has_rates) {
    const std::vector<double>& rates = p.synth_rates;
    if ((int)rates.size() != n_max)
      throw std::invalid_argument("synthetic acceptance rates must contain " + std::to_string(n_max) + " values, got " + std::to_string(rates.size()));
    for (size_t i = 0; i < rates.size(); i++) {
      if (!std::isfinite(rates[i]) || rates[i] < 0.0 || rates[i] > 1.0) throw std::invalid_argument("synthetic acceptance rates must be finite and within [0, 1]");
      if (i > 0 && rates[i] > rates[i - 1]) throw std::invalid_argument("synthetic acceptance rates must be monotonically non-increasing");
    }
    return rates;
  }
  const double L = p.synth_len, Lmax = n_max + 1.0;
  if (!std::isfinite(L) || L < 1.0 || L > Lmax)
    throw std::invalid_argument("synthetic acceptance length must be finite and within [1, " + std::to_string((int)Lmax) + "]");
  // geometric rates q, q^2, ... whose sum is L - 1 (bisection)
  double q = 0.0;
  if (L == Lmax) q = 1.0;
  else if (L > 1.0) {
    double lo = 0.0, hi = 1.0;
    for (int it = 0; it < 32; it++) {
      const double mid = 0.5 * (lo + hi);
      double sum = 0, term = mid;
      for (int j = 0; j < n_max; j++) { sum += term; term *= mid; }
      (sum < L - 1.0 ? lo : hi) = mid;
    }
    q = 0.5 * (lo + hi);
  }
  std::vector<double> rates;
  double r = q;
  for (int i = 0; i < n_max; i++) { rates.push_back(r); r *= q; }
  return rates;
}
}  // namespace

std::vector<double> check_spec_params(const SpecParams& p) {
  if (p.type != "none" && p.type != "draft-mtp")
    throw std::invalid_argument("speculative type '" + p.type + "' is not supported by pyllm");
  if (p.n_max < 0) throw std::invalid_argument("--spec-draft-n-max must be >= 0, got " + std::to_string(p.n_max));
  if (p.n_min < 0) throw std::invalid_argument("--spec-draft-n-min must be >= 0, got " + std::to_string(p.n_min));
  if (!std::isfinite(p.p_min) || p.p_min < 0.0f || p.p_min > 1.0f)
    throw std::invalid_argument("--spec-draft-p-min must be within [0, 1], got " + std::to_string(p.p_min));
  if (p.n_max_auto && p.type == "draft-mtp" && p.n_max < 1)
    throw std::invalid_argument("--spec-draft-n-max auto needs a cap >= 1, got " + std::to_string(p.n_max));
  if (p.draft_vocab < 0) throw std::invalid_argument("--spec-draft-vocab must be >= 0, got " + std::to_string(p.draft_vocab));
  if (!p.draft_head_type.empty()) draft_head_type(p.draft_head_type);  // throws naming the type
  // unconditional rates -> conditional keep probabilities, position by position
  std::vector<double> probs;
  double prev = 1.0;
  for (double r : synth_rates(p)) { probs.push_back(prev > 0.0 ? r / prev : 0.0); prev = r; }
  return probs;
}

}  // namespace pyllm
