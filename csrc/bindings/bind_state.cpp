// The prompt cache's bindings: SeqState (an opaque copy of one sequence: tokens, KV, recurrent
// state, checkpoints, MTP memory) with its file format, and Context's checkpoint / state methods.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings/bindings.h"
#include "engine/context.h"
#include "engine/seq_state.h"

namespace pyllm {

void bind_state(nb::module_& m) {
  nb::class_<SeqState>(m, "SeqState", "One sequence's saved memory (Context.seq_state_get / seq_state_set).")
      .def_prop_ro("n_tokens", [](const SeqState& s) { return s.tokens.size(); })
      .def_prop_ro("tokens", [](const SeqState& s) { return s.tokens; })
      .def_prop_ro("nbytes", &SeqState::bytes)
      .def_prop_ro("has_mtp", [](const SeqState& s) { return s.has_mtp; })
      .def_prop_ro("checkpoints", [](const SeqState& s) {
        std::vector<std::pair<int32_t, size_t>> out;
        for (const Checkpoint& c : s.ckpts.list()) out.push_back({c.pos(), c.bytes()});
        return out;
      })
      .def("write", [](const SeqState& s, const std::string& path, const std::string& header) {
        nb::gil_scoped_release rel;
        s.write(path, header);
      }, nb::arg("path"), nb::arg("header"), "Write atomically (path.tmp, then rename) with a header string.")
      .def_static("read", [](const std::string& path) {
        std::string header;
        SeqState s;
        {
          nb::gil_scoped_release rel;
          s = SeqState::read(path, &header);
        }
        return std::make_pair(std::move(s), nb::bytes(header.data(), header.size()));
      }, nb::arg("path"), "(state, header bytes) from a file written by write(); ValueError-free: RuntimeError on a bad file.");
}

void def_context_cache(nb::class_<Context>& c) {
  c.def("set_checkpoints", &Context::set_checkpoints, nb::arg("n_max"), nb::arg("min_step"))
      .def("set_cache_types", &Context::set_cache_types, nb::arg("k"), nb::arg("v"), nb::arg("draft_k"), nb::arg("draft_v"))
      .def("seq_set_checkpoint_hints", &Context::seq_set_checkpoint_hints, nb::arg("seq"), nb::arg("positions"))
      .def("seq_checkpoints", &Context::seq_checkpoints, nb::arg("seq"))
      .def("seq_state_get", [](Context& ctx, int seq) {
        nb::gil_scoped_release rel;
        return ctx.seq_state_get(seq);
      }, nb::arg("seq"))
      .def("seq_state_set", [](Context& ctx, int seq, const SeqState& st) {
        nb::gil_scoped_release rel;
        ctx.seq_state_set(seq, st);
      }, nb::arg("seq"), nb::arg("state"));
}

}  // namespace pyllm
