// Machine probes for `pyllm bench`.
#include "bindings/bindings.h"
#include "cpu/membw.h"

namespace pyllm {

void bind_bench(nb::module_& m) {
  m.def("read_bandwidth", &read_bandwidth, nb::arg("n_threads"), nb::arg("bytes"), nb::arg("passes") = 5,
        nb::call_guard<nb::gil_scoped_release>(),
        "Best of `passes` multithreaded reads of a `bytes` buffer, in bytes per second.");
}

}  // namespace pyllm
