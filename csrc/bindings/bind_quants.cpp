// Quant-type kernels for Python (tests, tools that write GGUF files). Thin: check sizes, call the
// traits table, release the GIL for large arrays.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "bindings/bindings.h"
#include "cpu/matmul.h"
#include "ggml/repack.h"
#include "ggml/quants.h"
#include "cpu/threadpool.h"
#include "ggml/quants_lanes.h"
#include "ggml/types.h"

namespace pyllm {

using u8_in = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using f32_in = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using f32_in2 = nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

static constexpr size_t kReleaseGilBytes = 1 << 16;

static const type_traits& traits_for(int type) {
  if (!type_id_valid(type)) throw std::invalid_argument("invalid ggml type id " + std::to_string(type));
  return get_type_traits((ggml_type)type);
}

static void check_len(const type_traits& t, int64_t n) {
  if (n < 0 || n % t.blck_size)
    throw std::invalid_argument(std::string(t.name) + ": n=" + std::to_string(n) +
                                " is not a multiple of the block size " + std::to_string(t.blck_size));
}

template <typename T>
static nb::ndarray<nb::numpy, T, nb::ndim<1>> owned_array(std::vector<T>&& v) {
  auto* p = new std::vector<T>(std::move(v));
  nb::capsule owner(p, [](void* q) noexcept { delete (std::vector<T>*)q; });
  return nb::ndarray<nb::numpy, T, nb::ndim<1>>(p->data(), {p->size()}, owner);
}

// Quantize a float row to type `vt` (needs its from_float).
static std::vector<uint8_t> quantize_row(ggml_type vt, const float* x, int64_t n, bool act = false) {
  const type_traits& t = get_type_traits(vt);
  const from_float_fn f = act ? t.from_float_act : t.from_float;
  if (!f) throw std::invalid_argument(std::string(t.name) + ": no " + (act ? "activation " : "") + "quantizer");
  check_len(t, n);
  std::vector<uint8_t> out(row_size(vt, n));
  f(x, out.data(), n);
  return out;
}

void bind_quants(nb::module_& m) {
  m.def("dequantize", [](int type, u8_in data, int64_t n) {
    const type_traits& t = traits_for(type);
    if (!t.to_float) throw std::invalid_argument(std::string(t.name) + ": no dequantizer");
    check_len(t, n);
    const size_t need = row_size((ggml_type)type, n);
    if (data.shape(0) < need)
      throw std::invalid_argument(std::string(t.name) + ": " + std::to_string(n) + " elements need " +
                                  std::to_string(need) + " bytes, got " + std::to_string(data.shape(0)));
    std::vector<float> out(n);
    {
      std::unique_ptr<nb::gil_scoped_release> rel;
      if (need >= kReleaseGilBytes) rel.reset(new nb::gil_scoped_release);
      t.to_float(data.data(), out.data(), n);
    }
    return owned_array(std::move(out));
  }, nb::arg("type"), nb::arg("data"), nb::arg("n"),
  "Dequantize the first n elements of `data` (raw block bytes) to float32.");

  m.def("quantize", [](int type, f32_in x, bool act) {
    traits_for(type);
    const int64_t n = (int64_t)x.shape(0);
    std::vector<uint8_t> out;
    {
      std::unique_ptr<nb::gil_scoped_release> rel;
      if (n * 4 >= (int64_t)kReleaseGilBytes) rel.reset(new nb::gil_scoped_release);
      out = quantize_row((ggml_type)type, x.data(), n, act);
    }
    return owned_array(std::move(out));
  }, nb::arg("type"), nb::arg("x"), nb::arg("act") = false,
  "Quantize a float32 row to `type` (the table's quantizer at the current SIMD level; act=True: the "
  "activation quantizer matmul uses); returns block bytes.");

  m.def("quantize_fast", [](int type, f32_in x) {
    const type_traits& t = traits_for(type);
    const int64_t n = (int64_t)x.shape(0);
    check_len(t, n);
    std::vector<uint8_t> out(row_size((ggml_type)type, n));
    {
      nb::gil_scoped_release rel;
      quantize_row_lanes((ggml_type)type, x.data(), out.data(), n);
    }
    return owned_array(std::move(out));
  }, nb::arg("type"), nb::arg("x"),
  "quantize() with the same bytes, faster for Q4_K/Q5_K (lane-parallel search); for tools writing whole models.");

  m.def("vec_dot", [](int type, u8_in w, f32_in x, bool act) {
    const type_traits& t = traits_for(type);
    if (!t.vec_dot) throw std::invalid_argument(std::string(t.name) + ": no vec_dot");
    const int64_t n = (int64_t)x.shape(0);
    check_len(t, n);
    if (w.shape(0) != row_size((ggml_type)type, n))
      throw std::invalid_argument(std::string(t.name) + ": weight row has " + std::to_string(w.shape(0)) +
                                  " bytes, expected " + std::to_string(row_size((ggml_type)type, n)));
    float s = 0;
    {
      std::unique_ptr<nb::gil_scoped_release> rel;
      if (n * 4 >= (int64_t)kReleaseGilBytes) rel.reset(new nb::gil_scoped_release);
      std::vector<uint8_t> q = quantize_row(t.vec_dot_type, x.data(), n, act);
      t.vec_dot((int)n, &s, w.data(), q.data());
    }
    return s;
  }, nb::arg("type"), nb::arg("w"), nb::arg("x"), nb::arg("act") = false,
  "Dot of one weight row (block bytes) with float32 x, quantized to the type's vec_dot_type first (act=True: "
  "with matmul's activation quantizer).");

  m.def("vec_dot_k", [](int type, u8_in w, f32_in2 x, bool repacked) {
    const type_traits& t = traits_for(type);
    const vec_dot_k_fn fk = repacked ? t.vec_dot_rp_k : t.vec_dot_k;
    if (!fk) throw std::invalid_argument(std::string(t.name) + ": no " + (repacked ? "vec_dot_rp_k" : "vec_dot_k") + " at SIMD level " + simd_level());
    const int64_t k = (int64_t)x.shape(0), n = (int64_t)x.shape(1);
    if (k < 1 || k > kMaxRowsK) throw std::invalid_argument("vec_dot_k: x must have 1.." + std::to_string(kMaxRowsK) + " rows, got " + std::to_string(k));
    check_len(t, n);
    if (w.shape(0) != row_size((ggml_type)type, n)) throw std::invalid_argument("vec_dot_k: weight row size mismatch");
    const size_t by = row_size(t.vec_dot_type, n);
    std::vector<uint8_t> q(k * by);
    for (int r = 0; r < k; r++) {
      std::vector<uint8_t> qr = quantize_row(t.vec_dot_type, x.data() + r * n, n);
      std::memcpy(q.data() + r * by, qr.data(), by);
    }
    std::vector<float> s(k);
    fk((int)n, s.data(), w.data(), q.data(), by, (int)k);
    return owned_array(std::move(s));
  }, nb::arg("type"), nb::arg("w"), nb::arg("x"), nb::arg("repacked") = false,
  "One weight row against k <= 8 float32 rows (shape (k, n)) via the traits' vec_dot_k, or with repacked=True "
  "vec_dot_rp_k (llama.cpp's repacked-weight arithmetic); raises when it is null.");

  m.def("matmul", [](int type, u8_in w, int64_t N, f32_in2 x, int n_threads, bool grouped) {
    const type_traits& t = traits_for(type);
    if (!t.compute) throw std::invalid_argument(std::string(t.name) + ": no matmul kernel");
    const int64_t B = (int64_t)x.shape(0), K = (int64_t)x.shape(1);
    check_len(t, K);
    if (N < 1 || w.shape(0) != row_size((ggml_type)type, K) * (size_t)N)
      throw std::invalid_argument("matmul: w must hold N = " + std::to_string(N) + " rows of " + std::to_string(K) +
                                  " elements (" + std::to_string(row_size((ggml_type)type, K) * (size_t)N) + " bytes)");
    if (n_threads < 1) throw std::invalid_argument("matmul: n_threads must be >= 1");
    Weight W;
    W.name = "matmul"; W.type = (ggml_type)type; W.ne[0] = K; W.ne[1] = N;
    W.nb1 = row_size((ggml_type)type, K); W.nb2 = W.nb1 * N; W.data = w.data();
    std::vector<uint8_t> groups;
    if (grouped) {
      if (!interleave_supported(W.type) || N % kGroupRows)  // any SIMD level: each has a group kernel
        throw std::invalid_argument(std::string("matmul: ") + t.name + " rows cannot go into 16-row groups (N = " + std::to_string(N) + ")");
      groups.resize(W.nb2);
      group_rows(W, groups.data());
    }
    std::vector<float> y((size_t)B * N);
    {
      nb::gil_scoped_release rel;
      ThreadPool tp(n_threads);
      matmul(tp, W, x.data(), K, (int)B, y.data(), N);
    }
    size_t shape[2] = {(size_t)B, (size_t)N};
    auto* heap = new std::vector<float>(std::move(y));
    nb::capsule owner(heap, [](void* p) noexcept { delete (std::vector<float>*)p; });
    return nb::ndarray<nb::numpy, float, nb::ndim<2>>(heap->data(), 2, shape, owner);
  }, nb::arg("type"), nb::arg("w"), nb::arg("N"), nb::arg("x"), nb::arg("n_threads") = 1, nb::arg("grouped") = false,
  "Y = x W^T as a model's forward computes it (activations quantized to the vec_dot_type, the batch path "
  "matmul picks for x's row count); x has shape (B, K), w holds N rows; returns (B, N) float32. grouped: "
  "the rows put into 16-row groups first, as a model's load does (ggml/repack.h).");

  m.def("matmul_multi", [](std::vector<std::tuple<int, u8_in, int64_t>> ws, f32_in2 x, int n_threads) {
    const int64_t B = (int64_t)x.shape(0), K = (int64_t)x.shape(1);
    if (ws.empty() || (int)ws.size() > kMaxMatmulMulti)
      throw std::invalid_argument("matmul_multi: 1.." + std::to_string(kMaxMatmulMulti) + " weights");
    if (n_threads < 1) throw std::invalid_argument("matmul_multi: n_threads must be >= 1");
    std::vector<Weight> W(ws.size());
    int64_t ld = 0;
    for (size_t i = 0; i < ws.size(); i++) {
      const int type = std::get<0>(ws[i]);
      const int64_t N = std::get<2>(ws[i]);
      const type_traits& t = traits_for(type);
      check_len(t, K);
      const size_t rb = row_size((ggml_type)type, K);
      if (N < 1 || std::get<1>(ws[i]).shape(0) != rb * (size_t)N)
        throw std::invalid_argument("matmul_multi: weight " + std::to_string(i) + " must hold N = " + std::to_string(N) + " rows of " + std::to_string(K) + " elements");
      W[i].name = "matmul_multi." + std::to_string(i); W[i].type = (ggml_type)type; W[i].ne[0] = K; W[i].ne[1] = N;
      W[i].nb1 = rb; W[i].nb2 = rb * N; W[i].data = std::get<1>(ws[i]).data();
      ld += N;
    }
    std::vector<float> y((size_t)B * ld);
    {
      nb::gil_scoped_release rel;
      std::vector<MatmulOut> outs;
      int64_t col = 0;
      for (auto& w : W) { outs.push_back({&w, y.data() + col, ld}); col += w.ne[1]; }
      ThreadPool tp(n_threads);
      matmul_multi(tp, outs.data(), (int)outs.size(), x.data(), K, (int)B);
    }
    size_t shape[2] = {(size_t)B, (size_t)ld};
    auto* heap = new std::vector<float>(std::move(y));
    nb::capsule owner(heap, [](void* p) noexcept { delete (std::vector<float>*)p; });
    return nb::ndarray<nb::numpy, float, nb::ndim<2>>(heap->data(), 2, shape, owner);
  }, nb::arg("weights"), nb::arg("x"), nb::arg("n_threads") = 1,
  "Several Y = x W^T of the same x in one dispatch, as a model's forward computes Q/K/V or gate/up: weights is "
  "a list of (type, w, N); returns (B, sum of N) float32, the outputs side by side.");

  m.def("type_traits", [](int type) {
    const type_traits& t = traits_for(type);
    nb::dict d;
    d["name"] = t.name;
    d["blck_size"] = t.blck_size;
    d["type_size"] = t.type_size;
    d["vec_dot_type"] = (int)t.vec_dot_type;
    d["compute"] = t.compute;
    d["has_to_float"] = t.to_float != nullptr;
    d["has_from_float"] = t.from_float != nullptr;
    d["has_vec_dot"] = t.vec_dot != nullptr;
    d["has_vec_dot_k"] = t.vec_dot_k != nullptr;
    d["has_vec_dot_rp_k"] = t.vec_dot_rp_k != nullptr;
    d["has_gemm_tile"] = t.gemm_tile != nullptr;
    d["has_vec_dot_rows"] = t.vec_dot_rows != nullptr;
    d["has_vec_dot_dec"] = t.vec_dot_dec_k != nullptr;
    d["has_amx"] = t.amx_tile != nullptr;
    d["has_dec_tile"] = t.dec_tile != nullptr;
    return d;
  }, nb::arg("type"));

  m.def("simd_level", []() { return std::string(simd_level()); });
  m.def("amx_available", &amx_usable, "Whether the amx SIMD level exists here: AMX-INT8 in the CPU, the tile state granted by the OS, PYLLM_AMX != 0.");
  m.def("set_simd_level", [](const std::string& level) { set_simd_level(level.c_str()); }, nb::arg("level"),
        "'scalar', 'avx2', 'avx512' or 'auto'; raises RuntimeError for a level this CPU/build lacks.");
  m.def("simd_level_supported", [](const std::string& level) { return simd_level_supported(level.c_str()); },
        nb::arg("level"));
}

}  // namespace pyllm
