// Machine probes for `pyllm bench`.
#include "bindings/bindings.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include "cpu/membw.h"
#include "cpu/mmbench.h"
#include "cpu/prefetch_tune.h"
#include "ggml/types.h"

#include <stdexcept>
#include <string>

namespace pyllm {

void bind_bench(nb::module_& m) {
  m.def("read_bandwidth", &read_bandwidth, nb::arg("n_threads"), nb::arg("bytes"), nb::arg("passes") = 5,
        nb::call_guard<nb::gil_scoped_release>(),
        "Best of `passes` multithreaded reads of a `bytes` buffer, in bytes per second.");
  m.def("x16_prefetch", &x16_prefetch_summary, nb::arg("n_threads") = 0,
        "The group kernels' read mode this process keeps (none, l1, l2, streams; per weight type, class and thread "
        "count, 'q4_K decode -t 2 l2, q4_K batch -t 2 none', where they differ), or 'measuring' "
        "(cpu/prefetch_tune.h); n_threads > 0: only the tuners of pools of that size.");
  m.def("x16_prefetch_force", [](const std::string& mode) {
    int m = mode == "auto" ? -1 : -2;
    for (int i = 0; i < kX16PfModes; i++) if (mode == x16_prefetch_name(i)) m = i;
    if (m == -2) throw std::invalid_argument("x16_prefetch_force: '" + mode + "' (auto, none, l1, l2, streams)");
    x16_prefetch_force(m);
  }, nb::arg("mode"), "Fix the group kernels' read mode (none, l1, l2, streams), or 'auto' to measure again.");
  using u8_in = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
  m.def("bench_matmul", [](int type, u8_in w, int64_t N, int64_t K, int B, int n_threads, int reps, bool grouped) {
    if (!type_id_valid(type) || !get_type_traits((ggml_type)type).compute)
      throw std::invalid_argument("bench_matmul: type " + std::to_string(type) + " has no matmul kernel");
    if (K % get_type_traits((ggml_type)type).blck_size != 0)
      throw std::invalid_argument("bench_matmul: K = " + std::to_string(K) + " is not a multiple of the block size");
    const size_t need = row_size((ggml_type)type, K) * (size_t)N;
    if (w.shape(0) < need)
      throw std::invalid_argument("bench_matmul: " + std::to_string(N) + " rows need " + std::to_string(need) +
                                  " bytes, got " + std::to_string(w.shape(0)));
    nb::gil_scoped_release rel;
    return bench_matmul((ggml_type)type, w.data(), N, K, B, n_threads, reps, grouped);
  }, nb::arg("type"), nb::arg("w"), nb::arg("N"), nb::arg("K"), nb::arg("B"), nb::arg("n_threads"), nb::arg("reps") = 5,
  nb::arg("grouped") = true,
  "Best time in seconds of one matmul of N x K weights (`type` blocks) by B random activation rows; grouped: "
  "in 16-row groups where a model's load would put them (--no-repack: False).");
}

}  // namespace pyllm
