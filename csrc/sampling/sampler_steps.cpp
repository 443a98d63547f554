// The sampler chain's steps (llama.cpp's samplers, one member each) and the mirostat draws. The chain's
// order, the seeds and the public calls are in sampler.cpp.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "sampling/sampler.h"
#include "sampling/token_order.h"

namespace pyllm {

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
