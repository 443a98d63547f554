// One bind_* function per area; module.cpp calls them all. Bindings stay thin: convert, release
// the GIL around long calls, no logic.
#pragma once
#include <nanobind/nanobind.h>

namespace nb = nanobind;

namespace pyllm {
void bind_gguf(nb::module_& m);
void bind_quants(nb::module_& m);
void bind_tokenizer(nb::module_& m);
void bind_sampling(nb::module_& m);
void bind_model(nb::module_& m);
void bind_bench(nb::module_& m);
void bind_state(nb::module_& m);
class Context;
void def_context_cache(nb::class_<Context>& c);  // Context's prompt-cache methods (bind_state.cpp)
struct GGUFValue;
nb::object value_to_py(const GGUFValue& v);  // GGUF metadata value -> Python object
}  // namespace pyllm
