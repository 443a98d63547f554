#include "sampling/sampler.h"

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

// Total order: higher logit first, then lower id. Deterministic whatever the algorithm.
inline bool by_logit(const TokenData& a, const TokenData& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}
inline bool by_prob(const TokenData& a, const TokenData& b) {
  return a.p > b.p || (a.p == b.p && a.id < b.id);
}

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

// ---------------------------------------------------------------------------------------------
// steps

void Sampler::sort_desc(size_t k) {
  TokenData* d = c_.data();
  const size_t n = c_.size;
  k = std::min(k, n);
  if (k == n) {
    std::sort(d, d + n, by_logit);
  } else if (k <= 128) {
    std::partial_sort(d, d + k, d + n, by_logit);
  } else {
    std::nth_element(d, d + k, d + n, by_logit);  // O(n) selection, then sort only the head
    std::sort(d, d + k, by_logit);
  }
  c_.size = k;
  c_.sorted = true;
  c_.identity = false;
}

void Sampler::softmax(bool do_sort) {
  if (do_sort && !c_.sorted) sort_desc(c_.size);
  TokenData* d = c_.data();
  float max_l = d[0].logit;
  if (!c_.sorted)
    for (size_t i = 1; i < c_.size; i++) max_l = std::max(max_l, d[i].logit);
  float sum = 0.0f;
  for (size_t i = 0; i < c_.size; i++) {
    d[i].p = expf(d[i].logit - max_l);
    sum += d[i].p;
  }
  for (size_t i = 0; i < c_.size; i++) d[i].p /= sum;
}

void Sampler::apply_logit_bias() {
  TokenData* d = c_.data();  // identity layout: index = id
  for (const auto& b : bias_)
    if (b.token >= 0 && b.token < n_vocab_) d[b.token].logit += b.bias;
}

void Sampler::apply_allowed(const uint32_t* allowed) {
  TokenData* d = c_.data();  // identity layout: index = id
  bool any = false;
  for (int i = 0; i < n_vocab_; i++) {
    if ((allowed[i >> 5] >> (i & 31)) & 1u) any = true;
    else d[i].logit = -INFINITY;
  }
  if (!any) throw std::runtime_error("Sampler: the allowed-token mask excludes every token");
}

void Sampler::apply_penalties() {
  const float rep = params_.penalty_repeat, freq = params_.penalty_freq, pres = params_.penalty_present;
  auto penalize = [&](TokenData& t, int count) {
    // multiply negative logits: dividing would make a repeated token with a negative logit likelier
    if (t.logit <= 0) t.logit *= rep;
    else t.logit /= rep;
    t.logit -= float(count) * freq + float(count > 0) * pres;
  };
  TokenData* d = c_.data();
  if (c_.identity) {  // only the <= penalty_last_n distinct tokens of the history are touched
    if (++epoch_ == 0) {
      std::fill(stamp_.begin(), stamp_.end(), 0);
      epoch_ = 1;
    }
    for (int32_t tok : prev_) {
      if (stamp_[tok] == epoch_) continue;
      stamp_[tok] = epoch_;
      penalize(d[tok], count_[tok]);
    }
  } else {
    for (size_t i = 0; i < c_.size; i++) {
      const int cnt = count_[d[i].id];
      if (cnt > 0) penalize(d[i], cnt);
    }
  }
  c_.sorted = false;
}

void Sampler::apply_top_n_sigma() {
  if (c_.size <= 1) return;
  TokenData* d = c_.data();
  float max_l = d[0].logit, sum = 0.0f;
  size_t valid = 0;
  for (size_t i = 0; i < c_.size; i++) {
    if (d[i].logit != -INFINITY) {
      max_l = std::max(max_l, d[i].logit);
      sum += d[i].logit;
      valid++;
    }
  }
  const float mean = valid > 0 ? sum / valid : 0.0f;
  float acc = 0.0f;
  for (size_t i = 0; i < c_.size; i++)
    if (d[i].logit != -INFINITY) acc += (float)std::pow((double)(d[i].logit - mean), 2.0);
  const float sd = valid > 0 ? std::sqrt(acc / valid) : 0.0f;
  const float cut = max_l - params_.top_n_sigma * sd;
  for (size_t i = 0; i < c_.size; i++)
    if (d[i].logit < cut) d[i].logit = -INFINITY;
}

void Sampler::apply_top_k(int32_t k) {
  if (k <= 0) return;
  const size_t kk = std::min<size_t>(k, c_.size);
  if (!c_.sorted) sort_desc(kk);
  c_.size = kk;
  c_.identity = false;
}

void Sampler::apply_typical() {
  softmax(true);
  TokenData* d = c_.data();
  const size_t n = c_.size;
  float entropy = 0.0f;
  for (size_t i = 0; i < n; i++) entropy += -d[i].p * logf(d[i].p);
  std::vector<float> score(n);
  for (size_t i = 0; i < n; i++) score[i] = fabsf(-logf(d[i].p) - entropy);
  std::vector<size_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return score[a] < score[b]; });

  const size_t min_keep = params_.min_keep;
  float cum = 0.0f;
  size_t last = n;
  for (size_t i = 0; i < n; i++) {
    cum += d[idx[i]].p;
    if (cum > params_.typ_p && (min_keep == 0 || i >= min_keep - 1)) {
      last = i + 1;
      break;
    }
  }
  std::vector<TokenData> kept(last);
  for (size_t i = 0; i < last; i++) kept[i] = d[idx[i]];
  std::copy(kept.begin(), kept.end(), d);
  c_.size = last;
  c_.sorted = false;
  c_.identity = false;
}

void Sampler::apply_top_p() {
  softmax(false);
  TokenData* d = c_.data();
  const size_t n = c_.size;
  const size_t min_keep = params_.min_keep;
  // Sort lazily: a big unsorted set usually reaches p within its 256 most likely tokens.
  size_t head = n;
  if (!c_.sorted) {
    if (n > 1024) {
      head = 256;
      std::nth_element(d, d + head, d + n, by_logit);
      std::sort(d, d + head, by_logit);
    } else {
      std::sort(d, d + n, by_logit);
    }
  }
  float cum = 0.0f;
  size_t last = n;
  for (size_t i = 0; i < n; i++) {
    cum += d[i].p;
    if (cum >= params_.top_p && i + 1 >= min_keep) {
      last = i + 1;
      break;
    }
    if (i + 1 == head && head < n) {  // grow the sorted head 8x; the rest is all below it
      const size_t next = std::min(n, head * 8);
      if (next < n) std::nth_element(d + head, d + next, d + n, by_logit);
      std::sort(d + head, d + next, by_logit);
      head = next;
    }
  }
  c_.size = last;
  c_.sorted = true;
  c_.identity = false;
}

void Sampler::apply_min_p() {
  if (c_.size == 0) return;
  TokenData* d = c_.data();
  const size_t min_keep = params_.min_keep;
  if (!c_.sorted) {
    // unsorted: keep the survivors in their current order
    float max_l = -FLT_MAX;
    for (size_t i = 0; i < c_.size; i++) max_l = std::max(max_l, d[i].logit);
    const float min_logit = max_l + logf(params_.min_p);
    size_t w = 0;
    for (size_t i = 0; i < c_.size; i++)
      if (d[i].logit >= min_logit) w++;
    if (w > 0 && w >= min_keep) {
      size_t j = 0;
      for (size_t i = 0; i < c_.size; i++)
        if (d[i].logit >= min_logit) d[j++] = d[i];
      c_.size = w;
      c_.identity = false;
      return;
    }
    sort_desc(c_.size);
  }
  const float min_logit = d[0].logit + logf(params_.min_p);
  size_t i = 1;
  for (; i < c_.size; i++)
    if (d[i].logit < min_logit && i >= min_keep) break;
  c_.size = i;
  c_.identity = false;
}

void Sampler::apply_xtc() {
  if (c_.size < 2) return;
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  if (uni(rng_xtc_) > params_.xtc_probability) return;
  softmax(true);
  const TokenData* d = c_.data();
  size_t pos_last = 0;
  for (size_t i = 0; i < c_.size; i++) {
    if (d[i].p >= params_.xtc_threshold) pos_last = i;
    else break;
  }
  // drop every token above the threshold except the least likely of them
  if (c_.size - pos_last >= (size_t)params_.min_keep && pos_last > 0) {
    c_.off += pos_last;
    c_.size -= pos_last;
    c_.identity = false;
  }
}

void Sampler::apply_temp(float t) {
  if (c_.size == 0) return;
  TokenData* d = c_.data();
  if (t <= 0.0f) {  // greedy: keep the first maximum (lowest id among ties), mask the rest
    size_t best = 0;
    for (size_t i = 1; i < c_.size; i++)
      if (d[i].logit > d[best].logit) best = i;
    for (size_t i = 0; i < c_.size; i++)
      if (i != best) d[i].logit = -INFINITY;
    return;
  }
  for (size_t i = 0; i < c_.size; i++) d[i].logit /= t;
}

void Sampler::apply_temp_ext() {
  const float temp = params_.temp, delta = params_.dynatemp_range;
  if (delta <= 0.0f) {
    apply_temp(temp);
    return;
  }
  if (c_.size <= 1) return;
  const float min_t = std::max(0.0f, temp - delta), max_t = temp + delta;
  const float max_entropy = -logf(1.0f / c_.size);
  softmax(true);
  TokenData* d = c_.data();
  float entropy = 0.0f;
  for (size_t i = 0; i < c_.size; i++)
    if (d[i].p > 0.0f) entropy -= d[i].p * logf(d[i].p);
  const float dyn_t = min_t + (max_t - min_t) * powf(entropy / max_entropy, params_.dynatemp_exponent);
  apply_temp(dyn_t);
  const double max_l = d[0].logit;
  double sum = 0.0;
  for (size_t i = 0; i < c_.size; i++) {
    const double p = exp(d[i].logit - max_l);
    d[i].p = (float)p;
    sum += p;
  }
  for (size_t i = 0; i < c_.size; i++) d[i].p /= sum;
}

void Sampler::apply_dist() {
  if (c_.size == 0) {
    c_.selected = -1;
    return;
  }
  TokenData* d = c_.data();
  c_.selected = 0;
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  if (c_.size == 1) {
    uni(rng_);  // one draw per token whatever the candidate count: keeps streams aligned
    d[0].p = 1.0f;
    return;
  }
  float max_l = d[0].logit;
  if (!c_.sorted)
    for (size_t i = 1; i < c_.size; i++) max_l = std::max(max_l, d[i].logit);
  double sum = 0.0;
  for (size_t i = 0; i < c_.size; i++) {
    d[i].p = expf(d[i].logit - max_l);
    sum += d[i].p;
  }
  const double target = sum * uni(rng_);
  double run = 0.0;
  bool found = false;
  for (size_t i = 0; i < c_.size; i++) {
    if (!found && d[i].p > 0.0f) {  // p > 0: a draw of exactly 0 must not pick a masked token
      run += d[i].p;
      if (run >= target) {
        c_.selected = (int)i;
        found = true;
      }
    }
    d[i].p /= sum;
  }
  if (!found) c_.selected = (int)c_.size - 1;
}

namespace {
int draw_discrete(const TokenData* d, size_t n, std::mt19937& rng) {
  std::vector<float> w(n);
  for (size_t i = 0; i < n; i++) w[i] = d[i].p;
  std::discrete_distribution<int> dist(w.begin(), w.end());
  return dist(rng);
}
}  // namespace

void Sampler::apply_mirostat() {
  softmax(true);
  const TokenData* d = c_.data();
  const int m = 100;
  float sum_tb = 0.0f, sum_tt = 0.0f;
  for (size_t i = 0; i < size_t(m - 1) && i + 1 < c_.size; i++) {
    const float t_i = logf(float(i + 2) / float(i + 1));
    const float b_i = logf(d[i].p / d[i + 1].p);
    sum_tb += t_i * b_i;
    sum_tt += t_i * t_i;
  }
  const float s_hat = sum_tb / sum_tt;
  const float eps_hat = s_hat - 1;
  const float k = powf((eps_hat * powf(2, mu_)) / (1 - powf((float)n_vocab_, -eps_hat)), 1 / s_hat);
  apply_top_k(std::max(int(k), 1));
  softmax(true);
  const int idx = draw_discrete(c_.data(), c_.size, rng_);
  c_.selected = idx;
  mu_ -= params_.mirostat_eta * (-log2f(c_.data()[idx].p) - params_.mirostat_tau);
}

void Sampler::apply_mirostat_v2() {
  softmax(true);
  const TokenData* d = c_.data();
  size_t keep = 0;
  while (keep < c_.size && !(-log2f(d[keep].p) > mu_)) keep++;
  c_.size = std::max<size_t>(keep, 1);
  softmax(true);
  const int idx = draw_discrete(c_.data(), c_.size, rng_);
  c_.selected = idx;
  mu_ -= params_.mirostat_eta * (-log2f(c_.data()[idx].p) - params_.mirostat_tau);
}

}  // namespace pyllm
