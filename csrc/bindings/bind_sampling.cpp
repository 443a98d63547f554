#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <utility>
#include <vector>

#include "bindings/bindings.h"
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

using Biases = std::vector<std::pair<int32_t, float>>;  // LogitBias as (token, bias) tuples

static Biases biases_out(const std::vector<LogitBias>& v) {
  Biases out;
  for (auto& b : v) out.push_back({b.token, b.bias});
  return out;
}
static std::vector<LogitBias> biases_in(const Biases& v) {
  std::vector<LogitBias> out;
  for (auto& [t, b] : v) out.push_back({t, b});
  return out;
}

void bind_sampling(nb::module_& m) {
  // Plain fields with llama.cpp's common_params_sampling names and defaults; pyllm/sampling.py fills them
  // from request dicts (llama-server names, validation) and turns them back into generation_settings.
  nb::enum_<SamplerType>(m, "SamplerType")
      .value("PENALTIES", SamplerType::PENALTIES).value("DRY", SamplerType::DRY)
      .value("TOP_N_SIGMA", SamplerType::TOP_N_SIGMA).value("TOP_K", SamplerType::TOP_K)
      .value("TYPICAL_P", SamplerType::TYPICAL_P).value("TOP_P", SamplerType::TOP_P)
      .value("MIN_P", SamplerType::MIN_P).value("XTC", SamplerType::XTC)
      .value("TEMPERATURE", SamplerType::TEMPERATURE).value("INFILL", SamplerType::INFILL)
      .value("ADAPTIVE_P", SamplerType::ADAPTIVE_P);
  m.def("sampler_types_from_names", &sampler_types_from_names, nb::arg("names"));
  m.def("sampler_types_from_chars", &sampler_types_from_chars, nb::arg("chars"));
  m.def("sampler_type_name", &sampler_type_name, nb::arg("type"));

  nb::class_<SamplerParams>(m, "SamplerParams")
      .def(nb::init<>())
      .def_rw("seed", &SamplerParams::seed)
      .def_rw("n_probs", &SamplerParams::n_probs)
      .def_rw("min_keep", &SamplerParams::min_keep)
      .def_rw("top_k", &SamplerParams::top_k)
      .def_rw("top_p", &SamplerParams::top_p)
      .def_rw("min_p", &SamplerParams::min_p)
      .def_rw("xtc_probability", &SamplerParams::xtc_probability)
      .def_rw("xtc_threshold", &SamplerParams::xtc_threshold)
      .def_rw("typ_p", &SamplerParams::typ_p)
      .def_rw("temp", &SamplerParams::temp)
      .def_rw("dynatemp_range", &SamplerParams::dynatemp_range)
      .def_rw("dynatemp_exponent", &SamplerParams::dynatemp_exponent)
      .def_rw("penalty_last_n", &SamplerParams::penalty_last_n)
      .def_rw("penalty_repeat", &SamplerParams::penalty_repeat)
      .def_rw("penalty_freq", &SamplerParams::penalty_freq)
      .def_rw("penalty_present", &SamplerParams::penalty_present)
      .def_rw("dry_multiplier", &SamplerParams::dry_multiplier)
      .def_rw("dry_base", &SamplerParams::dry_base)
      .def_rw("dry_allowed_length", &SamplerParams::dry_allowed_length)
      .def_rw("dry_penalty_last_n", &SamplerParams::dry_penalty_last_n)
      .def_rw("dry_sequence_breakers", &SamplerParams::dry_sequence_breakers)
      .def_rw("adaptive_target", &SamplerParams::adaptive_target)
      .def_rw("adaptive_decay", &SamplerParams::adaptive_decay)
      .def_rw("mirostat", &SamplerParams::mirostat)
      .def_rw("top_n_sigma", &SamplerParams::top_n_sigma)
      .def_rw("mirostat_tau", &SamplerParams::mirostat_tau)
      .def_rw("mirostat_eta", &SamplerParams::mirostat_eta)
      .def_rw("ignore_eos", &SamplerParams::ignore_eos)
      .def_rw("samplers", &SamplerParams::samplers)
      .def_prop_rw("logit_bias", [](const SamplerParams& p) { return biases_out(p.logit_bias); },
                   [](SamplerParams& p, const Biases& v) { p.logit_bias = biases_in(v); })
      .def_prop_rw("logit_bias_eog", [](const SamplerParams& p) { return biases_out(p.logit_bias_eog); },
                   [](SamplerParams& p, const Biases& v) { p.logit_bias_eog = biases_in(v); });

  m.def("top_probs", [](Logits logits, int n, int32_t token) {
        float tp = 0.0f;
        auto top = top_probs(logits.data(), (int)logits.shape(0), n, token, &tp);
        return nb::make_tuple(nb::cast(top), tp);
      }, nb::arg("logits"), nb::arg("n"), nb::arg("token") = -1,
      "Softmax of raw logits: ([(id, p)] for the n most likely, p of `token`)");

  nb::class_<Sampler>(m, "Sampler")
      .def(nb::init<const SamplerParams&, int>(), nb::arg("params"), nb::arg("n_vocab"))
      .def("sample", [](Sampler& s, Logits logits, std::optional<Mask> allowed) {
        const float* p = check_logits(logits, s.n_vocab());
        const uint32_t* m = check_mask(allowed, s.n_vocab());
        nb::gil_scoped_release rel;
        return s.sample(p, m);
      }, nb::arg("logits"), nb::arg("allowed") = nb::none(),
      "Run the chain and draw a token (does not accept it). allowed: int32 bitmask (llguidance layout) of "
      "the ids that may be drawn; the others get -inf before the chain")
      .def_prop_ro("has_distribution", &Sampler::has_distribution)
      .def("distribution", [](Sampler& s, Logits logits, std::optional<Mask> allowed) {
        const float* p = check_logits(logits, s.n_vocab());
        const uint32_t* m = check_mask(allowed, s.n_vocab());
        std::vector<TokenData> out;
        {
          nb::gil_scoped_release rel;
          s.distribution(p, out, m);
        }
        nb::list l;
        for (auto& t : out) l.append(nb::make_tuple(t.id, t.p));
        return l;
      }, nb::arg("logits"), nb::arg("allowed") = nb::none(),
      "[(id, p)]: the chain's final distribution (p > 0), without drawing; only when has_distribution")
      .def_static("draft_params", &Sampler::draft_params, nb::arg("params"),
                  "The drafting chain's settings for a request's (penalties and XTC removed)")
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
      .def_prop_ro("params", [](const Sampler& s) { return s.params(); });
}

}  // namespace pyllm
