#include <memory>

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <nanobind/stl/unique_ptr.h>

#include "bindings/bindings.h"
#include "engine/context.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace pyllm {

namespace {
// The engine's sampler interface over the sampling module's llama.cpp chain.
struct ChainSampler : TokenSampler {
  Sampler s;
  std::unique_ptr<Sampler> draft;  // the drafting chain, made on first use
  std::vector<TokenData> cand;
  ChainSampler(const SamplerParams& p, int n_vocab) : s(p, n_vocab) {}
  int32_t sample(const float* logits, int, const uint32_t* allowed) override { return s.sample(logits, allowed); }
  void accept(int32_t t) override { s.accept(t); }
  bool stochastic() const override { return s.has_distribution(); }
  static void copy(const std::vector<TokenData>& c, std::vector<IdProb>& out) {
    out.clear();
    for (const TokenData& t : c) out.push_back({t.id, t.p});
  }
  void target_dist(const float* logits, int, std::vector<IdProb>& out) override { s.distribution(logits, cand); copy(cand, out); }
  void draft_dist(const float* logits, int, std::vector<IdProb>& out) override {
    if (!draft) draft = std::make_unique<Sampler>(Sampler::draft_params(s.params()), s.n_vocab());
    draft->distribution(logits, cand);
    copy(cand, out);
  }
};

// seq_begin's settings as plain fields (pyllm/sampling.py fills them); SeqParams proper holds a factory.
struct SeqArgs {
  uint32_t seed = 0xFFFFFFFFu;
  int n_predict = -1;
  bool ignore_eos = false;
  int n_probs = 0;
  SamplerParams sampler;
  int spec_n_max = -1, spec_n_min = -1;
  float spec_p_min = -1.0f;
};

SpecParams spec_params(const std::string& type, int n_max, int n_min, float p_min, double synth_len,
                       std::vector<double> synth_rates, bool n_max_auto, const std::string& head_type, int draft_vocab,
                       const std::string& accept) {
  SpecParams sp;
  sp.type = type; sp.n_max = n_max; sp.n_min = n_min; sp.p_min = p_min;
  sp.synth_len = synth_len; sp.synth_rates = std::move(synth_rates);
  sp.n_max_auto = n_max_auto; sp.draft_head_type = head_type; sp.draft_vocab = draft_vocab;
  sp.accept = accept;
  return sp;
}

struct PyModel {
  std::unique_ptr<Model> m;
};

struct PyDrafter {
  std::unique_ptr<Drafter> d;
  int n_seq;
  void check(int seq) const {
    if (seq < 0 || seq >= n_seq) throw std::out_of_range("sequence id " + std::to_string(seq) + " out of range [0, " + std::to_string(n_seq) + ")");
  }
};

nb::list drafters_list(const std::vector<DrafterStats>& ds) {
  nb::list l;
  for (const DrafterStats& x : ds) {
    nb::dict d;
    d["type"] = x.name; d["n_drafts"] = x.n_drafts; d["n_draft"] = x.n_draft; d["n_draft_accepted"] = x.n_accepted;
    d["n_drafts_accepted"] = x.n_drafts_accepted; d["n_accepted_per_pos"] = x.n_accepted_per_pos; d["t_draft_ms"] = x.t_draft_ms;
    l.append(d);
  }
  return l;
}

// the adaptive draft length's cost model (AdaptiveDraftLength.costs, Context.draft_costs)
nb::dict costs_dict(const DraftCosts& k) {
  nb::dict d;
  d["verify_base_ms"] = k.verify_base_ms; d["verify_row_ms"] = k.verify_row_ms; d["draft_ms"] = k.draft_ms;
  d["plain_ms"] = k.plain_ms; d["overhead_ms"] = k.overhead_ms;
  d["catch_up_row_ms"] = k.catch_up_row_ms;
  return d;
}

nb::dict stats_dict(const SeqStats& st) {
  nb::dict d;
  d["n_prompt"] = st.n_prompt; d["n_cached"] = st.n_cached; d["n_gen"] = st.n_gen;
  d["t_prompt_ms"] = st.t_prompt_ms; d["t_gen_ms"] = st.t_gen_ms;
  d["n_draft"] = st.n_draft; d["n_draft_accepted"] = st.n_draft_accepted; d["n_verif_steps"] = st.n_verif_steps;
  d["n_accepted_per_pos"] = st.n_accepted_per_pos;
  d["drafters"] = drafters_list(st.drafters);
  d["ckpt_restored"] = st.ckpt_restored;
  return d;
}
}  // namespace

void bind_model(nb::module_& m) {
  static nb::object model_error = nb::exception<ModelError>(m, "ModelError", PyExc_ValueError);
  (void)model_error;

  // the one validation of the speculative settings (ValueError naming the setting); returns the
  // synthetic acceptance's per-position keep probabilities ([] when off)
  // the ngram drafters' settings (--spec-ngram-*, -lcs/-lcd) as plain fields, llama.cpp's defaults
  nb::class_<NgramParams::Map>(m, "SpecNgramMap")
      .def(nb::init<>())
      .def_rw("size_n", &NgramParams::Map::size_n)
      .def_rw("size_m", &NgramParams::Map::size_m)
      .def_rw("min_hits", &NgramParams::Map::min_hits);
  nb::class_<NgramParams>(m, "SpecNgramParams")
      .def(nb::init<>())
      .def_rw("simple", &NgramParams::simple)
      .def_rw("map_k", &NgramParams::map_k)
      .def_rw("map_k4v", &NgramParams::map_k4v)
      .def_rw("mod_n_match", &NgramParams::mod_n_match)
      .def_rw("mod_n_min", &NgramParams::mod_n_min)
      .def_rw("mod_n_max", &NgramParams::mod_n_max)
      .def_rw("lookup_cache_static", &NgramParams::lookup_cache_static)
      .def_rw("lookup_cache_dynamic", &NgramParams::lookup_cache_dynamic);
  m.attr("SPEC_TYPES_SUPPORTED") = spec_types_supported();

  // testing aid: one ngram drafter over given token histories (the Drafter interface as it is)
  nb::class_<PyDrafter>(m, "NgramDrafter")
      .def("__init__", [](PyDrafter* self, const std::string& type, const NgramParams& g, int n_seq, int64_t n_vocab) {
        std::unique_ptr<Drafter> d = make_ngram_drafter(type, g, n_seq, n_vocab);
        if (!d) throw std::invalid_argument("not an ngram drafter: '" + type + "'");
        new (self) PyDrafter{std::move(d), n_seq};
      }, nb::arg("type"), nb::arg("ngram") = NgramParams{}, nb::arg("n_seq") = 1, nb::arg("n_vocab") = 1 << 20)
      .def_prop_ro("n_max", [](const PyDrafter& p) { return p.d->n_max(); })
      .def("begin", [](PyDrafter& p, int seq, const std::vector<int32_t>& prompt, int n_same) { p.check(seq); p.d->begin(seq, prompt, n_same); },
           nb::arg("seq"), nb::arg("prompt"), nb::arg("n_same") = 0)
      .def("draft", [](PyDrafter& p, int seq, const std::vector<int32_t>& history, int32_t last, int n_max) {
        p.check(seq);
        std::vector<std::vector<int32_t>> out(1);
        p.d->draft({{seq, &history, last, (int32_t)history.size(), n_max}}, out);
        return out[0];
      }, nb::arg("seq"), nb::arg("history"), nb::arg("last"), nb::arg("n_max") = 1 << 20)
      .def("accept", [](PyDrafter& p, int seq, int n_accepted, bool mine) { p.check(seq); p.d->accept(seq, n_accepted, mine); },
           nb::arg("seq"), nb::arg("n_accepted"), nb::arg("mine") = true);

  // the one validation of the speculative settings (ValueError naming the setting); returns the
  // synthetic acceptance's per-position keep probabilities ([] when off)
  m.def("check_spec_params", [](const std::string& spec_type, int n_max, int n_min, float p_min, double synth_len,
                                std::vector<double> synth_rates, const NgramParams& ngram, bool n_max_auto,
                                const std::string& draft_head_type, int draft_vocab, const std::string& accept) {
    SpecParams sp = spec_params(spec_type, n_max, n_min, p_min, synth_len, std::move(synth_rates), n_max_auto,
                                draft_head_type, draft_vocab, accept);
    sp.ngram = ngram;
    return check_spec_params(sp);
  }, nb::arg("spec_type") = "none", nb::arg("n_max") = 3, nb::arg("n_min") = 0, nb::arg("p_min") = 0.0f,
     nb::arg("synth_len") = -1.0, nb::arg("synth_rates") = std::vector<double>{}, nb::arg("ngram") = NgramParams{},
     nb::arg("n_max_auto") = false, nb::arg("draft_head_type") = "", nb::arg("draft_vocab") = 0,
     nb::arg("accept") = "match");

  // the adaptive draft length's policy alone (tests drive it with chosen costs and outcomes)
  nb::class_<AdaptiveDraftLength>(m, "AdaptiveDraftLength")
      .def("__init__", [](AdaptiveDraftLength* self, int n_seq, int cap, double base_ms, double row_ms, double draft_ms,
                          double plain_ms) {
        new (self) AdaptiveDraftLength(n_seq, cap, DraftCosts{base_ms, row_ms, draft_ms, plain_ms});
      }, nb::arg("n_seq"), nb::arg("cap"), nb::arg("verify_base_ms"), nb::arg("verify_row_ms"), nb::arg("draft_ms"),
         nb::arg("plain_ms") = 0.0)
      .def("begin", &AdaptiveDraftLength::begin)
      .def("choose", &AdaptiveDraftLength::choose, nb::arg("seq"), nb::arg("n_generating") = 1)
      .def("observe_accept", &AdaptiveDraftLength::observe_accept, nb::arg("seq"), nb::arg("n_drafted"),
           nb::arg("n_accepted"), nb::arg("own") = true)
      .def("observe_step", &AdaptiveDraftLength::observe_step, nb::arg("rows"), nb::arg("n_seqs"), nb::arg("ms"))
      .def("observe_draft", &AdaptiveDraftLength::observe_draft, nb::arg("forwards"), nb::arg("ms"), nb::arg("seqs") = 0,
           nb::arg("caught_up") = 0)
      .def("observe_gap", &AdaptiveDraftLength::observe_gap, nb::arg("n_seqs"), nb::arg("ms"))
      .def("rates", &AdaptiveDraftLength::rates)
      .def_prop_ro("costs", [](const AdaptiveDraftLength& a) { return costs_dict(a.costs()); })
      .def_ro_static("probe_every", &AdaptiveDraftLength::kProbe)
      .def_ro_static("idle_probe", &AdaptiveDraftLength::kIdleProbe)
      .def_ro_static("idle_probe_max", &AdaptiveDraftLength::kIdleProbeMax)
      .def_ro_static("probe_burst", &AdaptiveDraftLength::kProbeBurst)
      .def_ro_static("batch_plain", &AdaptiveDraftLength::kBatchPlain);

  nb::class_<SeqArgs>(m, "SeqParams")
      .def(nb::init<>())
      .def_rw("seed", &SeqArgs::seed)
      .def_rw("n_predict", &SeqArgs::n_predict)
      .def_rw("ignore_eos", &SeqArgs::ignore_eos)
      .def_rw("n_probs", &SeqArgs::n_probs)
      .def_rw("sampler", &SeqArgs::sampler)
      .def_rw("spec_n_max", &SeqArgs::spec_n_max)
      .def_rw("spec_n_min", &SeqArgs::spec_n_min)
      .def_rw("spec_p_min", &SeqArgs::spec_p_min);

  nb::class_<PyModel>(m, "Model")
      .def("__init__", [](PyModel* self, const std::string& path, bool load_mtp, int mmap, bool repack) {
        LoadOptions opt; opt.load_mtp = load_mtp; opt.repack = repack;
        opt.weights = mmap < 0 ? Residency::Auto : mmap ? Residency::Map : Residency::Copy;
        std::unique_ptr<Model> mdl;
        {
          nb::gil_scoped_release rel;
          mdl = Model::load(path, opt);
        }
        new (self) PyModel{std::move(mdl)};
      }, nb::arg("path"), nb::arg("load_mtp") = false, nb::arg("mmap") = -1, nb::arg("repack") = true)
      .def_prop_ro("n_grouped", [](const PyModel& p) { return p.m->n_grouped(); })
      .def_prop_ro("grouped_bytes", [](const PyModel& p) { return p.m->grouped_bytes(); })
      .def_prop_ro("grouped_copied_bytes", [](const PyModel& p) { return p.m->grouped_copied_bytes(); })
      .def_prop_ro("weights_copied", [](const PyModel& p) { return p.m->gguf().copied(); })
      .def_prop_ro("arch", [](const PyModel& p) { return p.m->arch(); })
      .def_prop_ro("path", [](const PyModel& p) { return p.m->gguf().path(); })
      .def_prop_ro("n_vocab", [](const PyModel& p) { return p.m->n_vocab; })
      .def_prop_ro("n_embd", [](const PyModel& p) { return p.m->n_embd; })
      .def_prop_ro("n_layer", [](const PyModel& p) { return p.m->n_layer; })
      .def_prop_ro("n_ctx_train", [](const PyModel& p) { return p.m->n_ctx_train; })
      .def_prop_ro("has_mtp", [](const PyModel& p) { return p.m->has_mtp(); })
      .def_prop_ro("recurrent", [](const PyModel& p) { return p.m->recurrent; })
      .def_prop_ro("file_has_mtp", [](const PyModel& p) { return p.m->file_has_mtp(); })
      .def_prop_ro("desc", [](const PyModel& p) { return p.m->desc; })
      .def_prop_ro("size_bytes", [](const PyModel& p) { return p.m->size_bytes; })
      .def_prop_ro("n_params", [](const PyModel& p) { return p.m->n_params; })
      .def_prop_ro("eog_ids", [](const PyModel& p) { return p.m->eog_ids; })
      .def("is_eog", [](const PyModel& p, int32_t id) { return p.m->is_eog(id); })
      .def_prop_ro("tokenizer", [](const PyModel& p) -> const Tokenizer& { return *p.m->tokenizer(); }, nb::rv_policy::reference_internal)
      .def("tokenize", [](const PyModel& p, const std::string& text, bool add_special, bool parse_special) {
        nb::gil_scoped_release rel;
        return p.m->tokenizer()->tokenize(text, add_special, parse_special);
      }, nb::arg("text"), nb::arg("add_special") = true, nb::arg("parse_special") = false)
      .def("token_to_piece", [](const PyModel& p, int32_t id, bool special) {
        if (id < 0 || id >= p.m->tokenizer()->n_vocab()) throw nb::index_error("token id out of range");
        std::string s = p.m->tokenizer()->token_to_piece(id, special);
        return nb::bytes(s.data(), s.size());
      }, nb::arg("id"), nb::arg("special") = true)
      .def("detokenize", [](const PyModel& p, const std::vector<int32_t>& ids, bool special) {
        std::string s;
        {
          nb::gil_scoped_release rel;
          s = p.m->tokenizer()->detokenize(ids, special);
        }
        return nb::str(PyUnicode_DecodeUTF8(s.data(), (Py_ssize_t)s.size(), "replace"), nb::detail::steal_t{});
      }, nb::arg("ids"), nb::arg("special") = false)
      .def_prop_ro("bos", [](const PyModel& p) { return p.m->tokenizer()->bos(); })
      .def_prop_ro("eos", [](const PyModel& p) { return p.m->tokenizer()->eos(); })
      .def_prop_ro("eot", [](const PyModel& p) { return p.m->tokenizer()->eot(); })
      .def_prop_ro("add_bos", [](const PyModel& p) { return p.m->tokenizer()->add_bos(); })
      .def_prop_ro("vocab_type", [](const PyModel& p) { return p.m->tokenizer()->model_name() == "llama" ? 1 : 2; })
      .def_prop_ro("ftype", [](const PyModel& p) { return p.m->ftype_name(); })
      .def("metadata", [](const PyModel& p) {
        nb::dict d;
        for (auto& k : p.m->gguf().keys()) d[nb::str(k.c_str())] = value_to_py(*p.m->gguf().find(k));
        return d;
      })
      .def_prop_ro("chat_template", [](const PyModel& p) -> nb::object {
        const GGUFValue* v = p.m->gguf().find("tokenizer.chat_template");
        if (!v || v->type != GGUF_TYPE_STRING) return nb::none();
        return nb::str(v->str.data(), v->str.size());
      });

  nb::class_<Context> ctx_cls(m, "Context");
  def_context_cache(ctx_cls);
  ctx_cls
      .def("__init__", [](Context* self, PyModel& model, int n_ctx, int n_seq, int n_batch, int n_ubatch, int n_threads,
                          const std::string& spec_type, int n_max, int n_min, float p_min, double synth_len, std::vector<double> synth_rates,
                          const NgramParams& ngram, const PyModel* draft_model, int draft_threads, int max_planes,
                          bool n_max_auto, const std::string& draft_head_type, int draft_vocab, const std::string& accept) {
        SpecParams sp = spec_params(spec_type, n_max, n_min, p_min, synth_len, std::move(synth_rates), n_max_auto,
                                    draft_head_type, draft_vocab, accept);
        sp.ngram = ngram;
        sp.draft_model = draft_model ? draft_model->m.get() : nullptr; sp.draft_threads = draft_threads;
        sp.max_planes = max_planes;
        nb::gil_scoped_release rel;
        new (self) Context(*model.m, n_ctx, n_seq, n_batch, n_ubatch, n_threads, sp);
      }, nb::arg("model"), nb::arg("n_ctx"), nb::arg("n_seq") = 1, nb::arg("n_batch") = 2048, nb::arg("n_ubatch") = 512,
         nb::arg("n_threads") = 2, nb::arg("spec_type") = "none", nb::arg("n_max") = 3, nb::arg("n_min") = 0,
         nb::arg("p_min") = 0.0f, nb::arg("synth_len") = -1.0, nb::arg("synth_rates") = std::vector<double>{},
         nb::arg("ngram") = NgramParams{}, nb::arg("draft_model").none() = nb::none(), nb::arg("draft_threads") = 0,
         nb::arg("max_planes") = 0, nb::arg("n_max_auto") = false, nb::arg("draft_head_type") = "",
         nb::arg("draft_vocab") = 0, nb::arg("accept") = "match", nb::keep_alive<1, 2>(), nb::keep_alive<1, 15>())
      .def_prop_ro("n_planes", &Context::n_planes)
      .def_prop_ro("drafters", &Context::drafter_names)
      .def_prop_ro("n_draft_max", &Context::n_draft_max)
      .def("drafter_lines", &Context::drafter_lines)
      // the cheap draft head's one-line description (type, rows, memory), "" when drafting uses the model's head
      .def_prop_ro("draft_head_info", [](const Context& c) { return c.draft_head() ? c.draft_head()->description() : std::string(); })
      .def_prop_ro("draft_head_bytes", [](const Context& c) { return c.draft_head() ? c.draft_head()->bytes() : (size_t)0; })
      .def_prop_ro("draft_costs", [](const Context& c) { return costs_dict(c.draft_costs()); })
      .def_prop_ro("n_ctx_seq", &Context::n_ctx_seq)
      .def_prop_ro("n_seq", &Context::n_seq)
      .def("seq_begin", [](Context& c, PyModel&, int seq, std::vector<int32_t> prompt, const SeqArgs& a) {
        SeqParams sp;
        sp.seed = a.seed; sp.n_predict = a.n_predict; sp.ignore_eos = a.ignore_eos; sp.n_probs = a.n_probs;
        sp.spec_n_max = a.spec_n_max; sp.spec_n_min = a.spec_n_min; sp.spec_p_min = a.spec_p_min;
        SamplerParams spar = a.sampler;
        sp.sampler = [spar](int n_vocab) { return std::unique_ptr<TokenSampler>(new ChainSampler(spar, n_vocab)); };
        nb::gil_scoped_release rel;
        return c.seq_begin(seq, prompt, std::move(sp));
      }, nb::arg("model"), nb::arg("seq"), nb::arg("prompt"), nb::arg("params") = SeqArgs{})
      .def("seq_set_allowed", [](Context& c, int seq, nb::ndarray<const int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> mask) {
        const uint32_t* m = reinterpret_cast<const uint32_t*>(mask.data());
        c.seq_set_allowed(seq, std::vector<uint32_t>(m, m + mask.shape(0)));
      }, nb::arg("seq"), nb::arg("mask"),
      "Constrain seq's next token to the int32 bitmask (llguidance layout); see Context::seq_set_allowed.")
      .def("set_draft_check", [](Context& c, nb::object fn) {
        if (fn.is_none()) { c.set_draft_check(nullptr); return; }
        // called from step() without the GIL; the callable is only touched with it (it is set and
        // dropped by Python calls, which hold it)
        auto f = std::make_shared<nb::object>(std::move(fn));
        c.set_draft_check([f](int seq, const std::vector<int32_t>& draft, std::vector<uint32_t>& masks) -> int {
          nb::gil_scoped_acquire gil;
          try {
            nb::tuple r = nb::cast<nb::tuple>((*f)(seq, draft));
            const int k = nb::cast<int>(r[0]);
            if (k > 0) {
              auto a = nb::cast<nb::ndarray<const int32_t, nb::c_contig, nb::device::cpu>>(r[1]);
              const uint32_t* p = reinterpret_cast<const uint32_t*>(a.data());
              masks.assign(p, p + a.size());
            }
            return k;
          } catch (nb::python_error& e) {
            throw std::runtime_error(std::string("draft check: ") + e.what());
          } catch (nb::cast_error&) {
            throw std::runtime_error("draft check: must return (k, int32 masks [k][n_words])");
          }
        });
      }, nb::arg("fn").none(),
      "fn(seq, draft) -> (k, int32 masks [k][n_words]): the grammar check of constrained sequences' drafts "
      "(Context::set_draft_check); None: they are not drafted. fn must not reference what owns the Context "
      "(a cycle through it is never collected).")
      .def("seq_end", &Context::seq_end)
      .def("seq_clear", &Context::seq_clear)
      .def("n_dispatches", &Context::n_dispatches, "Thread-pool dispatches of the target model's forwards so far.")
      .def("dispatch_wait_ns", &Context::dispatch_wait_ns,
           "Nanoseconds the calling thread waited in those dispatches for the workers (after its own share).")
      .def("seq_rm", &Context::seq_rm)
      .def("seq_pos", &Context::seq_pos)
      .def("n_active", &Context::n_active)
      .def("step", [](Context& c) {
        std::vector<StepOutput> outs;
        {
          nb::gil_scoped_release rel;
          outs = c.step();
        }
        nb::list res;
        for (auto& o : outs) {
          nb::dict d;
          d["seq"] = o.seq;
          nb::list toks, probs;
          bool any_probs = false;
          for (auto& t : o.tokens) {
            toks.append(t.id);
            nb::dict pd;
            pd["id"] = t.id; pd["p"] = t.p;
            nb::list top;
            for (auto& tp : t.top) top.append(nb::make_tuple(tp.id, tp.p));
            any_probs = any_probs || !t.top.empty();
            pd["top"] = top;
            probs.append(pd);
          }
          d["tokens"] = toks;
          d["probs"] = any_probs ? nb::object(probs) : nb::none();
          d["done"] = o.done;
          d["stop"] = o.stop.empty() ? nb::none() : nb::object(nb::str(o.stop.c_str()));
          res.append(d);
        }
        return res;
      })
      .def("seq_stats", [](const Context& c, int seq) { return stats_dict(c.seq_stats(seq)); })
      .def("acceptance_line", &Context::acceptance_line)
      .def("global_stats", [](const Context& c) {
        const GlobalStats& g = c.stats();
        nb::dict d;
        d["n_prompt_tokens"] = g.n_prompt_tokens; d["n_gen_tokens"] = g.n_gen_tokens; d["n_decode_calls"] = g.n_decode_calls;
        d["n_draft"] = g.n_draft; d["n_draft_accepted"] = g.n_draft_accepted; d["n_drafts"] = g.n_drafts;
        d["n_accepted_per_pos"] = g.n_accepted_per_pos;
        d["n_mtp_rows"] = g.n_mtp_rows;
        d["n_draft_forwards"] = g.n_draft_forwards; d["t_draft_ms"] = g.t_draft_ms;
        d["n_gen_steps"] = g.n_gen_steps; d["n_gen_rows"] = g.n_gen_rows; d["t_verify_ms"] = g.t_verify_ms;
        d["drafters"] = drafters_list(g.drafters);
        d["n_replay_rows"] = g.n_replay_rows;
        return d;
      })
      .def_prop_ro("memory_bytes", &Context::memory_bytes)
      // testing aid: evaluate tokens appended to seq, logits [rows][n_vocab]
      .def("eval", [](Context& c, int seq, std::vector<int32_t> tokens, bool all_logits) {
        std::vector<float> lg;
        {
          nb::gil_scoped_release rel;
          lg = c.eval(seq, tokens, all_logits);
        }
        size_t rows = tokens.empty() ? 0 : (all_logits ? tokens.size() : 1);
        size_t V = rows ? lg.size() / rows : 0;
        float* buf = new float[lg.size()];
        std::copy(lg.begin(), lg.end(), buf);
        nb::capsule owner(buf, [](void* p) noexcept { delete[] (float*)p; });
        size_t shape[2] = {rows, V};
        return nb::ndarray<nb::numpy, float, nb::ndim<2>>(buf, 2, shape, owner);
      }, nb::arg("seq"), nb::arg("tokens"), nb::arg("all_logits") = false);
}

}  // namespace pyllm
