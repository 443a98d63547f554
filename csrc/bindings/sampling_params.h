// dict -> SamplerParams, with llama-server request field names (server-schema.cpp). Shared by
// bind_sampling.cpp and any binding that builds a sampler from a request dict (the engine).
// Unknown keys are ignored (a whole request dict can be passed); a value of None means "default".
// logit_bias must already hold token ids: text keys are resolved by the caller (needs a tokenizer).
#pragma once

#include <nanobind/nanobind.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "sampling/sampler.h"

namespace pyllm {

namespace sampling_detail {
namespace nb = nanobind;

inline bool get(const nb::dict& d, const char* key, nb::object& out) {
  if (!d.contains(key)) return false;
  out = d[key];
  return !out.is_none();
}

inline double as_number(const nb::object& v, const char* key) {
  if (nb::isinstance<nb::bool_>(v)) return nb::cast<bool>(v) ? 1.0 : 0.0;
  if (nb::isinstance<nb::int_>(v)) return (double)nb::cast<int64_t>(v);
  if (nb::isinstance<nb::float_>(v)) return nb::cast<double>(v);
  throw std::invalid_argument(std::string("sampling param '") + key + "' must be a number");
}

inline void set_f(const nb::dict& d, const char* key, float& dst) {
  nb::object v;
  if (get(d, key, v)) dst = (float)as_number(v, key);
}
inline void set_i(const nb::dict& d, const char* key, int32_t& dst) {
  nb::object v;
  if (get(d, key, v)) dst = (int32_t)as_number(v, key);
}

// bias: a number, or false = ban (-inf); None (generation_settings' EOG form) also bans.
inline bool parse_bias(const nb::handle& v, float& bias) {
  if (v.is_none()) { bias = -INFINITY; return true; }
  if (nb::isinstance<nb::bool_>(v)) {
    if (nb::cast<bool>(v)) return false;
    bias = -INFINITY;
    return true;
  }
  if (nb::isinstance<nb::int_>(v) || nb::isinstance<nb::float_>(v)) { bias = (float)nb::cast<double>(v); return true; }
  return false;
}

inline int32_t parse_token(const nb::handle& k) {
  if (nb::isinstance<nb::int_>(k) && !nb::isinstance<nb::bool_>(k)) return (int32_t)nb::cast<int64_t>(k);
  if (nb::isinstance<nb::str>(k)) {
    std::string s = nb::cast<std::string>(k);
    char* end = nullptr;
    long t = std::strtol(s.c_str(), &end, 10);
    if (!s.empty() && end && *end == 0) return (int32_t)t;
    throw std::invalid_argument("logit_bias: text key '" + s +
                                "' must be tokenized to token ids before building the sampler");
  }
  throw std::invalid_argument("logit_bias: token must be an int or a numeric string");
}

inline std::vector<LogitBias> parse_logit_bias(const nb::handle& lb) {
  std::vector<LogitBias> out;
  float bias;
  if (nb::isinstance<nb::dict>(lb)) {  // OAI form {"15043": -1.5}
    for (auto item : nb::borrow<nb::dict>(lb))
      if (parse_bias(item.second, bias)) out.push_back({parse_token(item.first), bias});
  } else if (nb::isinstance<nb::list>(lb) || nb::isinstance<nb::tuple>(lb)) {
    for (nb::handle el : lb) {
      if (nb::isinstance<nb::dict>(el)) {  // generation_settings form {"token": t, "bias": b}
        nb::dict e = nb::borrow<nb::dict>(el);
        if (!e.contains("token")) continue;
        if (parse_bias(e.contains("bias") ? e["bias"] : nb::none(), bias))
          out.push_back({parse_token(e["token"]), bias});
      } else if ((nb::isinstance<nb::list>(el) || nb::isinstance<nb::tuple>(el)) && nb::len(el) == 2) {
        if (parse_bias(el[1], bias)) out.push_back({parse_token(el[0]), bias});
      }
    }
  } else if (!lb.is_none()) {
    throw std::invalid_argument("logit_bias must be a list of [token, bias] pairs or a {token: bias} object");
  }
  return out;
}
}  // namespace sampling_detail

inline SamplerParams params_from_dict(const nanobind::dict& d) {
  namespace nb = nanobind;
  using namespace sampling_detail;
  SamplerParams p;
  nb::object v;

  set_f(d, "temperature", p.temp);
  set_f(d, "dynatemp_range", p.dynatemp_range);
  set_f(d, "dynatemp_exponent", p.dynatemp_exponent);
  set_i(d, "top_k", p.top_k);
  set_f(d, "top_p", p.top_p);
  set_f(d, "min_p", p.min_p);
  set_f(d, "typical_p", p.typ_p);
  set_f(d, "xtc_probability", p.xtc_probability);
  set_f(d, "xtc_threshold", p.xtc_threshold);
  set_f(d, "top_n_sigma", p.top_n_sigma);
  set_i(d, "repeat_last_n", p.penalty_last_n);
  set_f(d, "repeat_penalty", p.penalty_repeat);
  set_f(d, "frequency_penalty", p.penalty_freq);
  set_f(d, "presence_penalty", p.penalty_present);
  set_f(d, "dry_multiplier", p.dry_multiplier);
  {
    float base = p.dry_base;
    set_f(d, "dry_base", base);
    if (base >= 1.0f) p.dry_base = base;  // < 1 -> default, as llama-server does
  }
  set_i(d, "dry_allowed_length", p.dry_allowed_length);
  set_i(d, "dry_penalty_last_n", p.dry_penalty_last_n);
  if (get(d, "dry_sequence_breakers", v)) {
    p.dry_sequence_breakers.clear();
    for (nb::handle s : v) p.dry_sequence_breakers.push_back(nb::cast<std::string>(s));
  }
  set_i(d, "mirostat", p.mirostat);
  set_f(d, "mirostat_tau", p.mirostat_tau);
  set_f(d, "mirostat_eta", p.mirostat_eta);
  set_f(d, "adaptive_target", p.adaptive_target);
  set_f(d, "adaptive_decay", p.adaptive_decay);
  if (get(d, "seed", v)) {
    const double s = as_number(v, "seed");
    p.seed = s < 0 ? SAMPLER_DEFAULT_SEED : (uint32_t)(uint64_t)s;
  }
  if (d.contains("n_probs") && !d["n_probs"].is_none()) {
    set_i(d, "n_probs", p.n_probs);
  } else if (get(d, "logprobs", v) && !nb::isinstance<nb::bool_>(v)) {
    p.n_probs = (int32_t)as_number(v, "logprobs");  // /completion alias; chat's bool is not a count
  }
  set_i(d, "min_keep", p.min_keep);
  if (get(d, "ignore_eos", v)) p.ignore_eos = nb::cast<bool>(v);
  if (get(d, "logit_bias", v)) p.logit_bias = parse_logit_bias(v);
  // EOG ids for ignore_eos (the engine knows them): a list of ids or of {token,bias} / pairs
  for (const char* key : {"eog_tokens", "logit_bias_eog"}) {
    if (!get(d, key, v)) continue;
    for (nb::handle t : v) {
      if (nb::isinstance<nb::int_>(t)) p.logit_bias_eog.push_back({(int32_t)nb::cast<int64_t>(t), -INFINITY});
    }
    if (std::string(key) == "logit_bias_eog" && p.logit_bias_eog.empty())
      p.logit_bias_eog = parse_logit_bias(v);
  }
  if (get(d, "samplers", v)) {
    if (nb::isinstance<nb::str>(v)) {
      p.samplers = sampler_types_from_chars(nb::cast<std::string>(v));
    } else {
      std::vector<std::string> names;
      for (nb::handle s : v) names.push_back(nb::cast<std::string>(s));
      p.samplers = sampler_types_from_names(names);
    }
  }
  return p;
}

}  // namespace pyllm
