#include "sampling/sampler.h"
#include "sampling/token_order.h"

#include <algorithm>
#include <cctype>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <unordered_map>

namespace pyllm {

namespace {

uint32_t resolve_seed(uint32_t seed) {
  if (seed != SAMPLER_DEFAULT_SEED) return seed;
  static const bool rd_is_prng = std::random_device().entropy() == 0;
  if (rd_is_prng) return (uint32_t)std::chrono::system_clock::now().time_since_epoch().count();
  std::random_device rd;
  return rd();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// sampler names

std::string sampler_type_name(SamplerType t) {
  switch (t) {
    case SamplerType::DRY: return "dry";
    case SamplerType::TOP_K: return "top_k";
    case SamplerType::TYPICAL_P: return "typ_p";
    case SamplerType::TOP_P: return "top_p";
    case SamplerType::TOP_N_SIGMA: return "top_n_sigma";
    case SamplerType::MIN_P: return "min_p";
    case SamplerType::TEMPERATURE: return "temperature";
    case SamplerType::XTC: return "xtc";
    case SamplerType::INFILL: return "infill";
    case SamplerType::PENALTIES: return "penalties";
    case SamplerType::ADAPTIVE_P: return "adaptive_p";
  }
  return "";
}

std::vector<SamplerType> sampler_types_from_names(const std::vector<std::string>& names) {
  static const std::unordered_map<std::string, SamplerType> table = [] {
    const SamplerType all[] = {SamplerType::DRY,   SamplerType::TOP_K,       SamplerType::TOP_P,
                               SamplerType::TOP_N_SIGMA, SamplerType::TYPICAL_P, SamplerType::MIN_P,
                               SamplerType::TEMPERATURE, SamplerType::XTC,   SamplerType::INFILL,
                               SamplerType::PENALTIES,   SamplerType::ADAPTIVE_P};
    std::unordered_map<std::string, SamplerType> m;
    for (SamplerType t : all) {
      std::string name = sampler_type_name(t);
      m[name] = t;
      if (name.find('_') != std::string::npos) {
        std::string kebab = name, bare;
        std::replace(kebab.begin(), kebab.end(), '_', '-');
        for (char ch : name) if (ch != '_') bare += ch;
        m.emplace(kebab, t);
        m.emplace(bare, t);
      }
    }
    m.emplace("nucleus", SamplerType::TOP_P);
    m.emplace("temp", SamplerType::TEMPERATURE);
    m.emplace("typ", SamplerType::TYPICAL_P);
    return m;
  }();
  std::vector<SamplerType> out;
  for (const auto& n : names) {
    std::string low = n;
    for (auto& ch : low) ch = (char)std::tolower((unsigned char)ch);
    auto it = table.find(low);
    if (it != table.end()) out.push_back(it->second);
  }
  return out;
}

std::vector<SamplerType> sampler_types_from_chars(const std::string& chars) {
  std::vector<SamplerType> out;
  for (char ch : chars) {
    switch (ch) {
      case 'd': out.push_back(SamplerType::DRY); break;
      case 'k': out.push_back(SamplerType::TOP_K); break;
      case 'y': out.push_back(SamplerType::TYPICAL_P); break;
      case 'p': out.push_back(SamplerType::TOP_P); break;
      case 's': out.push_back(SamplerType::TOP_N_SIGMA); break;
      case 'm': out.push_back(SamplerType::MIN_P); break;
      case 't': out.push_back(SamplerType::TEMPERATURE); break;
      case 'x': out.push_back(SamplerType::XTC); break;
      case 'i': out.push_back(SamplerType::INFILL); break;
      case 'e': out.push_back(SamplerType::PENALTIES); break;
      case 'a': out.push_back(SamplerType::ADAPTIVE_P); break;
      default: break;  // llama.cpp warns and skips
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// raw probabilities

std::vector<std::pair<int32_t, float>> top_probs(const float* logits, int n_vocab, int n, int32_t token,
                                                 float* token_prob) {
  n = std::max(0, std::min(n, n_vocab));
  float max_l = -INFINITY;
  for (int i = 0; i < n_vocab; i++) max_l = std::max(max_l, logits[i]);
  double sum = 0.0;
  for (int i = 0; i < n_vocab; i++) sum += expf(logits[i] - max_l);
  auto prob = [&](int i) { return (float)(expf(logits[i] - max_l) / sum); };

  std::vector<std::pair<int32_t, float>> out;
  if (n > 0) {
    std::vector<TokenData> cand(n_vocab);
    for (int i = 0; i < n_vocab; i++) cand[i] = {i, logits[i], 0.0f};
    std::partial_sort(cand.begin(), cand.begin() + n, cand.end(), by_logit);
    out.reserve(n);
    for (int i = 0; i < n; i++) out.emplace_back(cand[i].id, prob(cand[i].id));
  }
  if (token_prob) *token_prob = (token >= 0 && token < n_vocab) ? prob(token) : 0.0f;
  return out;
}

// ---------------------------------------------------------------------------------------------
// Sampler

Sampler::Sampler(const SamplerParams& params, int n_vocab) : params_(params), n_vocab_(n_vocab) {
  if (n_vocab <= 0) throw std::invalid_argument("Sampler: n_vocab must be > 0, got " + std::to_string(n_vocab));
  const auto& p = params_;
  if (p.mirostat != 0 && p.mirostat != 1 && p.mirostat != 2)
    throw std::invalid_argument("Sampler: mirostat must be 0, 1 or 2, got " + std::to_string(p.mirostat));
  params_.penalty_last_n = std::max(p.penalty_last_n, 0);
  penalties_on_ = !(p.penalty_last_n == 0 ||
                    (p.penalty_repeat == 1.0f && p.penalty_freq == 0.0f && p.penalty_present == 0.0f));

  if (p.mirostat == 0) {
    for (SamplerType t : p.samplers) {
      bool on = false;
      switch (t) {
        case SamplerType::PENALTIES: on = penalties_on_; break;
        case SamplerType::DRY:
          if (p.dry_multiplier != 0.0f && p.dry_base >= 1.0f && p.dry_penalty_last_n != 0)
            throw std::invalid_argument(
                "Sampler: the DRY sampler is not implemented in pyllm (dry_multiplier = " +
                std::to_string(p.dry_multiplier) + "); set dry_multiplier to 0");
          break;
        case SamplerType::TOP_N_SIGMA: on = p.top_n_sigma > 0.0f; break;
        case SamplerType::TOP_K: on = p.top_k > 0; break;
        case SamplerType::TYPICAL_P: on = p.typ_p < 1.0f; break;
        case SamplerType::TOP_P: on = p.top_p < 1.0f; break;
        case SamplerType::MIN_P: on = p.min_p > 0.0f; break;
        case SamplerType::XTC: on = p.xtc_probability > 0.0f && p.xtc_threshold <= 0.5f; break;
        case SamplerType::TEMPERATURE: on = !(p.temp == 1.0f && p.dynatemp_range <= 0.0f); break;
        case SamplerType::INFILL:
          throw std::invalid_argument("Sampler: the infill sampler is not implemented in pyllm");
        case SamplerType::ADAPTIVE_P:
          throw std::invalid_argument("Sampler: the adaptive_p sampler is not implemented in pyllm");
      }
      if (on) chain_.push_back(t);
    }
  }

  bias_ = p.logit_bias;
  if (p.ignore_eos) bias_.insert(bias_.end(), p.logit_bias_eog.begin(), p.logit_bias_eog.end());

  if (params_.penalty_last_n > 0) {
    count_.assign(n_vocab, 0);
    stamp_.assign(n_vocab, 0);
    prev_.reserve(std::min(params_.penalty_last_n, 1 << 16));
  }
  reseed();
}

void Sampler::reseed() {
  seed_cur_ = resolve_seed(params_.seed);
  rng_.seed(seed_cur_);
  xtc_seed_cur_ = resolve_seed(params_.seed);
  rng_xtc_.seed(xtc_seed_cur_);
  mu_ = 2.0f * params_.mirostat_tau;
}

void Sampler::reset() {
  prev_.clear();
  prev_first_ = 0;
  std::fill(count_.begin(), count_.end(), 0);
  reseed();
}

void Sampler::accept(int32_t token) {
  const int32_t cap = params_.penalty_last_n;
  if (cap == 0 || token < 0 || token >= n_vocab_) return;
  count_[token]++;
  if ((int32_t)prev_.size() < cap) {
    prev_.push_back(token);
  } else {
    count_[prev_[prev_first_]]--;
    prev_[prev_first_] = token;
    prev_first_ = (prev_first_ + 1) % prev_.size();
  }
}

std::vector<int32_t> Sampler::history() const {
  std::vector<int32_t> out;
  out.reserve(prev_.size());
  for (size_t i = 0; i < prev_.size(); i++) out.push_back(prev_[(prev_first_ + i) % prev_.size()]);
  return out;
}

void Sampler::run_chain(const float* logits, const uint32_t* allowed) {
  c_.buf.resize(n_vocab_);
  TokenData* d = c_.buf.data();
  for (int i = 0; i < n_vocab_; i++) d[i] = {i, logits[i], 0.0f};
  c_.off = 0;
  c_.size = n_vocab_;
  c_.sorted = false;
  c_.identity = true;
  c_.selected = -1;

  apply_logit_bias();
  if (allowed) apply_allowed(allowed);
  if (params_.mirostat != 0) return;
  for (SamplerType t : chain_) {
    switch (t) {
      case SamplerType::PENALTIES: apply_penalties(); break;
      case SamplerType::TOP_N_SIGMA: apply_top_n_sigma(); break;
      case SamplerType::TOP_K: apply_top_k(params_.top_k); break;
      case SamplerType::TYPICAL_P: apply_typical(); break;
      case SamplerType::TOP_P: apply_top_p(); break;
      case SamplerType::MIN_P: apply_min_p(); break;
      case SamplerType::XTC: apply_xtc(); break;
      case SamplerType::TEMPERATURE: apply_temp_ext(); break;
      default: break;
    }
  }
}

int32_t Sampler::sample(const float* logits, const uint32_t* allowed) {
  run_chain(logits, allowed);
  if (params_.mirostat == 0) {
    apply_dist();
  } else {
    if (params_.temp != 1.0f) apply_temp(params_.temp);
    if (params_.mirostat == 1) apply_mirostat();
    else apply_mirostat_v2();
  }
  if (c_.selected < 0 || (size_t)c_.selected >= c_.size)
    throw std::runtime_error("Sampler: no token selected (empty candidate set)");
  return c_.data()[c_.selected].id;
}

bool Sampler::has_distribution() const { return params_.mirostat == 0 && params_.temp > 0.0f; }

void Sampler::distribution(const float* logits, std::vector<TokenData>& out, const uint32_t* allowed) {
  if (!has_distribution())
    throw std::logic_error("Sampler::distribution: the chain has no distribution to draw from (greedy or mirostat)");
  run_chain(logits, allowed);
  out.clear();
  if (c_.size == 0) throw std::runtime_error("Sampler: no token selected (empty candidate set)");
  // apply_dist's probabilities, without its draw
  const TokenData* d = c_.data();
  float max_l = d[0].logit;
  for (size_t i = 1; i < c_.size; i++) max_l = std::max(max_l, d[i].logit);
  double sum = 0.0;
  for (size_t i = 0; i < c_.size; i++) sum += expf(d[i].logit - max_l);
  for (size_t i = 0; i < c_.size; i++) {
    const float p = (float)(expf(d[i].logit - max_l) / sum);
    if (p > 0.0f) out.push_back({d[i].id, d[i].logit, p});
  }
}

SamplerParams Sampler::draft_params(const SamplerParams& p) {
  SamplerParams d = p;
  d.samplers.erase(std::remove_if(d.samplers.begin(), d.samplers.end(),
                                  [](SamplerType t) { return t == SamplerType::PENALTIES || t == SamplerType::XTC; }),
                   d.samplers.end());
  d.penalty_last_n = 0;
  d.xtc_probability = 0.0f;
  return d;
}

std::vector<std::pair<int32_t, float>> Sampler::post_sampling_probs(int n) const {
  std::vector<std::pair<int32_t, float>> out;
  if (c_.selected < 0) return out;
  n = std::max(0, std::min<int>(n, (int)c_.size));
  std::vector<TokenData> cand(c_.data(), c_.data() + c_.size);
  std::partial_sort(cand.begin(), cand.begin() + n, cand.end(), by_prob);
  for (int i = 0; i < n && cand[i].p != 0.0f; i++) out.emplace_back(cand[i].id, cand[i].p);
  return out;
}

float Sampler::selected_prob() const {
  if (c_.selected < 0) return 0.0f;
  return c_.data()[c_.selected].p;
}

std::vector<TokenData> Sampler::candidates() const {
  if (c_.selected < 0) return {};
  return std::vector<TokenData>(c_.data(), c_.data() + c_.size);
}

}  // namespace pyllm
