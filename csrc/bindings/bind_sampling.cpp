#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <string>

#include "bindings/bindings.h"
#include "bindings/sampling_params.h"
#include "sampling/sampler.h"

namespace pyllm {

using Logits = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Mask = nb::ndarray<const int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;  // llguidance's bitmask

static const uint32_t* check_mask(const std::optional<Mask>& m, int n_vocab) {
  if (!m) return nullptr;
  const size_t words = ((size_t)n_vocab + 31) / 32;
  if (m->shape(0) != words)
    throw std::invalid_argument("Sampler: allowed mask has " + std::to_string(m->shape(0)) + " words, n_vocab " +
                                std::to_string(n_vocab) + " needs " + std::to_string(words));
  return reinterpret_cast<const uint32_t*>(m->data());
}

static const float* check_logits(const Logits& a, int n_vocab) {
  if ((int64_t)a.shape(0) != n_vocab)
    throw std::invalid_argument("Sampler: logits has " + std::to_string(a.shape(0)) + " entries, n_vocab is " +
                                std::to_string(n_vocab));
  return a.data();
}

// SamplerParams -> dict with llama-server names (generation_settings style).
static nb::dict params_to_dict(const SamplerParams& p) {
  nb::dict d;
  d["seed"] = p.seed;
  d["temperature"] = p.temp;
  d["dynatemp_range"] = p.dynatemp_range;
  d["dynatemp_exponent"] = p.dynatemp_exponent;
  d["top_k"] = p.top_k;
  d["top_p"] = p.top_p;
  d["min_p"] = p.min_p;
  d["top_n_sigma"] = p.top_n_sigma;
  d["xtc_probability"] = p.xtc_probability;
  d["xtc_threshold"] = p.xtc_threshold;
  d["typical_p"] = p.typ_p;
  d["repeat_last_n"] = p.penalty_last_n;
  d["repeat_penalty"] = p.penalty_repeat;
  d["presence_penalty"] = p.penalty_present;
  d["frequency_penalty"] = p.penalty_freq;
  d["dry_multiplier"] = p.dry_multiplier;
  d["dry_base"] = p.dry_base;
  d["dry_allowed_length"] = p.dry_allowed_length;
  d["dry_penalty_last_n"] = p.dry_penalty_last_n;
  d["dry_sequence_breakers"] = p.dry_sequence_breakers;
  d["mirostat"] = p.mirostat;
  d["mirostat_tau"] = p.mirostat_tau;
  d["mirostat_eta"] = p.mirostat_eta;
  d["adaptive_target"] = p.adaptive_target;
  d["adaptive_decay"] = p.adaptive_decay;
  d["ignore_eos"] = p.ignore_eos;
  d["n_probs"] = p.n_probs;
  d["min_keep"] = p.min_keep;
  nb::list lb;
  auto add_bias = [&](const LogitBias& b) {
    nb::dict e;
    e["token"] = b.token;
    if (std::isinf(b.bias) && b.bias < 0) e["bias"] = nb::none();  // llama-server shows bans as null
    else e["bias"] = b.bias;
    lb.append(e);
  };
  for (auto& b : p.logit_bias) add_bias(b);
  if (p.ignore_eos) for (auto& b : p.logit_bias_eog) add_bias(b);
  d["logit_bias"] = lb;
  nb::list names;
  for (auto t : p.samplers) names.append(nb::str(sampler_type_name(t).c_str()));
  d["samplers"] = names;
  return d;
}

void bind_sampling(nb::module_& m) {
  m.def("sampler_defaults", []() { return params_to_dict(SamplerParams{}); },
        "llama.cpp's default sampling params, with llama-server names");
  m.def("sampler_params", [](nb::dict d) { return params_to_dict(params_from_dict(d)); }, nb::arg("params"),
        "Normalize a request dict the way Sampler reads it (defaults filled in)");
  m.def("top_probs", [](Logits logits, int n, int32_t token) {
        float tp = 0.0f;
        auto top = top_probs(logits.data(), (int)logits.shape(0), n, token, &tp);
        return nb::make_tuple(nb::cast(top), tp);
      }, nb::arg("logits"), nb::arg("n"), nb::arg("token") = -1,
      "Softmax of raw logits: ([(id, p)] for the n most likely, p of `token`)");

  nb::class_<Sampler>(m, "Sampler")
      .def("__init__", [](Sampler* self, nb::dict params, int n_vocab) {
        new (self) Sampler(params_from_dict(params), n_vocab);
      }, nb::arg("params"), nb::arg("n_vocab"))
      .def("sample", [](Sampler& s, Logits logits, std::optional<Mask> allowed) {
        const float* p = check_logits(logits, s.n_vocab());
        const uint32_t* m = check_mask(allowed, s.n_vocab());
        nb::gil_scoped_release rel;
        return s.sample(p, m);
      }, nb::arg("logits"), nb::arg("allowed") = nb::none(),
      "Run the chain and draw a token (does not accept it). allowed: int32 bitmask (llguidance layout) of "
      "the ids that may be drawn; the others get -inf before the chain")
      .def("accept", &Sampler::accept, nb::arg("token"))
      .def("accept_many", [](Sampler& s, const std::vector<int32_t>& toks) { for (auto t : toks) s.accept(t); },
           nb::arg("tokens"), "accept() each token in order (e.g. the prompt, as llama-server does)")
      .def("reset", &Sampler::reset)
      .def("top_probs", [](const Sampler& s, Logits logits, int n) {
        return s.top_probs(check_logits(logits, s.n_vocab()), n);
      }, nb::arg("logits"), nb::arg("n"), "[(id, p)]: the n most likely tokens under the softmax of the raw logits")
      .def("token_prob", [](const Sampler& s, Logits logits, int32_t token) {
        float tp = 0.0f;
        top_probs(check_logits(logits, s.n_vocab()), s.n_vocab(), 0, token, &tp);
        return tp;
      }, nb::arg("logits"), nb::arg("token"), "p of token under the softmax of the raw logits")
      .def("post_sampling_probs", &Sampler::post_sampling_probs, nb::arg("n"),
           "After sample(): [(id, p)] of the chain's final distribution, highest first, zeros dropped")
      .def_prop_ro("selected_prob", &Sampler::selected_prob)
      .def("candidates", [](const Sampler& s) {
        nb::list l;
        for (auto& t : s.candidates()) l.append(nb::make_tuple(t.id, t.logit, t.p));
        return l;
      }, "After sample(): [(id, logit, p)] left by the chain, in chain order")
      .def_prop_ro("seed", &Sampler::seed)
      .def_prop_ro("n_vocab", &Sampler::n_vocab)
      .def_prop_ro("history", &Sampler::history)
      .def_prop_ro("params", [](const Sampler& s) { return params_to_dict(s.params()); });
}

}  // namespace pyllm
