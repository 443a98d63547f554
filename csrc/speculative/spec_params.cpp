#include "speculative/spec_params.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "speculative/draft_head.h"

namespace pyllm {

const std::vector<std::string>& spec_types_supported() {
  // llama.cpp's order (common_speculative_init): the ngram family first, then the draft models
  static const std::vector<std::string> t = {"ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache", "draft-simple", "draft-mtp"};
  return t;
}

std::vector<std::string> SpecParams::types() const {
  std::vector<std::string> out;
  std::stringstream ss(type);
  std::string t;
  while (std::getline(ss, t, ',')) {
    if (t == "none") return {};  // a list holding none is {none}, as upstream
    if (!t.empty() && std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  }
  return out;
}

bool SpecParams::has(const std::string& t) const {
  const std::vector<std::string> ts = types();
  return std::find(ts.begin(), ts.end(), t) != ts.end();
}

int SpecParams::n_max_all() const {
  int m = 0;
  for (const std::string& t : types()) {
    if (t == "draft-mtp" || t == "draft-simple") m = std::max(m, n_max);
    else if (t == "ngram-simple") m = std::max(m, ngram.simple.size_m);
    else if (t == "ngram-map-k") m = std::max(m, ngram.map_k.size_m);
    else if (t == "ngram-map-k4v") m = std::max(m, ngram.map_k4v.size_m);
    else if (t == "ngram-mod") m = std::max(m, ngram.mod_n_max);
    else if (t == "ngram-cache") m = std::max(m, 8);  // upstream's fixed n_draft
  }
  return std::max(m, 0);
}

namespace {
void check_range(int v, int lo, int hi, const char* flag, const char* what) {
  if (v < lo || v > hi)
    throw std::invalid_argument(std::string(flag) + ": " + what + " must be between " + std::to_string(lo) + " and " +
                                std::to_string(hi) + " inclusive, got " + std::to_string(v));
}

void check_map(const NgramParams::Map& m, const std::string& name) {
  const std::string f = "--spec-" + name;
  check_range(m.size_n, 1, 1024, (f + "-size-n").c_str(), "ngram size N");
  check_range(m.size_m, 1, 1024, (f + "-size-m").c_str(), "ngram size M");
  if (m.min_hits < 1) throw std::invalid_argument(f + "-min-hits: ngram min hits must be at least 1, got " + std::to_string(m.min_hits));
}

// --spec-synth-len / --spec-synth-rates -> per-position unconditional rates, validated as upstream's
// common_speculative_synth_rates_resolve does
std::vector<double> synth_rates(const SpecParams& p) {
  const bool has_len = p.synth_len != -1.0, has_rates = !p.synth_rates.empty();
  if (!has_len && !has_rates) return {};
  if (has_len && has_rates) throw std::invalid_argument("synthetic acceptance length and rates are mutually exclusive");
  const int n_max = p.n_max_all();
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
  const auto& ok = spec_types_supported();
  for (const std::string& t : p.types())
    if (std::find(ok.begin(), ok.end(), t) == ok.end()) throw std::invalid_argument("speculative type '" + t + "' is not supported by pyllm");
  if (p.has("draft-simple") && !p.draft_model)
    throw std::invalid_argument("--spec-type draft-simple needs a draft model (--spec-draft-model FILE)");
  if (p.draft_model && !p.has("draft-simple"))
    throw std::invalid_argument("--spec-draft-model needs --spec-type draft-simple (pyllm's draft-mtp uses the target's own MTP layer)");
  if (p.draft_threads < 0) throw std::invalid_argument("--spec-draft-threads must be >= 0, got " + std::to_string(p.draft_threads));
  if (p.n_max < 0) throw std::invalid_argument("--spec-draft-n-max must be >= 0, got " + std::to_string(p.n_max));
  if (p.n_min < 0) throw std::invalid_argument("--spec-draft-n-min must be >= 0, got " + std::to_string(p.n_min));
  if (!std::isfinite(p.p_min) || p.p_min < 0.0f || p.p_min > 1.0f)
    throw std::invalid_argument("--spec-draft-p-min must be within [0, 1], got " + std::to_string(p.p_min));
  check_map(p.ngram.simple, "ngram-simple");
  check_map(p.ngram.map_k, "ngram-map-k");
  check_map(p.ngram.map_k4v, "ngram-map-k4v");
  check_range(p.ngram.mod_n_min, 0, 1024, "--spec-ngram-mod-n-min", "ngram n-min");
  check_range(p.ngram.mod_n_max, 0, 1024, "--spec-ngram-mod-n-max", "ngram n-max");
  check_range(p.ngram.mod_n_match, 1, 1024, "--spec-ngram-mod-n-match", "ngram size N");
  if (p.n_max_auto && p.has("draft-mtp") && p.n_max < 1)
    throw std::invalid_argument("--spec-draft-n-max auto needs a cap >= 1, got " + std::to_string(p.n_max));
  if (p.accept != "match" && p.accept != "rejection")
    throw std::invalid_argument("--spec-accept must be 'match' or 'rejection', got '" + p.accept + "'");
  if (p.draft_vocab < 0) throw std::invalid_argument("--spec-draft-vocab must be >= 0, got " + std::to_string(p.draft_vocab));
  if (!p.draft_head_type.empty()) draft_head_type(p.draft_head_type);  // throws naming the type
  // unconditional rates -> conditional keep probabilities, position by position
  std::vector<double> probs;
  double prev = 1.0;
  for (double r : synth_rates(p)) { probs.push_back(prev > 0.0 ? r / prev : 0.0); prev = r; }
  return probs;
}

}  // namespace pyllm
