#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <nanobind/stl/shared_ptr.h>

#include <memory>

#include "bindings/bindings.h"
#include "gguf/gguf.h"

namespace pyllm {

nb::object value_to_py(const GGUFValue& v) {
  switch (v.type) {
    case GGUF_TYPE_STRING: return nb::str(v.str.data(), v.str.size());
    case GGUF_TYPE_BOOL: return nb::bool_(v.b);
    case GGUF_TYPE_FLOAT32: case GGUF_TYPE_FLOAT64: return nb::float_(v.f);
    case GGUF_TYPE_UINT64: return nb::int_(v.u);
    case GGUF_TYPE_ARRAY: {
      nb::list l;
      if (v.arr_type == GGUF_TYPE_STRING) {
        for (auto& s : v.arr_str) l.append(nb::str(s.data(), s.size()));
      } else if (v.arr_type == GGUF_TYPE_ARRAY) {
        for (auto& e : v.arr_arr) l.append(value_to_py(e));
      } else if (v.arr_type == GGUF_TYPE_FLOAT32 || v.arr_type == GGUF_TYPE_FLOAT64) {
        for (uint64_t k = 0; k < v.arr_n; k++) l.append(nb::float_(v.arr_f(k)));
      } else if (v.arr_type == GGUF_TYPE_BOOL) {
        for (uint64_t k = 0; k < v.arr_n; k++) l.append(nb::bool_(v.arr_i(k) != 0));
      } else {
        for (uint64_t k = 0; k < v.arr_n; k++) l.append(nb::int_(v.arr_i(k)));
      }
      return l;
    }
    default: return nb::int_(v.i);
  }
}

void bind_gguf(nb::module_& m) {
  static nb::object gguf_error = nb::exception<GGUFError>(m, "GGUFError", PyExc_ValueError);
  (void)gguf_error;

  m.def("type_name", [](int t) { return std::string(type_name((ggml_type)t)); });

  nb::class_<GGUFFile>(m, "GGUFFile")
      .def(nb::init<const std::string&>(), nb::arg("path"), nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("path", &GGUFFile::path)
      .def_prop_ro("version", &GGUFFile::version)
      .def_prop_ro("file_size", &GGUFFile::file_size)
      .def_prop_ro("alignment", &GGUFFile::alignment)
      .def_prop_ro("data_offset", &GGUFFile::data_offset)
      .def("keys", &GGUFFile::keys)
      .def("value_type", [](const GGUFFile& f, const std::string& k) {
        const auto& v = f.get(k);
        std::string t = gguf_type_name(v.type);
        if (v.type == GGUF_TYPE_ARRAY) t += std::string("[") + gguf_type_name(v.arr_type) + "]";
        return t;
      })
      .def("get", [](const GGUFFile& f, const std::string& k, nb::object def) -> nb::object {
        auto* v = f.find(k);
        return v ? value_to_py(*v) : def;
      }, nb::arg("key"), nb::arg("default") = nb::none())
      .def("metadata", [](const GGUFFile& f) {
        nb::dict d;
        for (auto& k : f.keys()) d[nb::str(k.c_str())] = value_to_py(*f.find(k));
        return d;
      })
      .def("tensors", [](const GGUFFile& f) {
        nb::list l;
        for (auto& t : f.tensors()) {
          nb::dict d;
          d["name"] = t.name;
          d["type"] = (int)t.type;
          d["type_name"] = std::string(type_name(t.type));
          nb::list shape;
          for (int k = 0; k < t.n_dims; k++) shape.append(t.ne[k]);
          d["shape"] = shape;
          d["offset"] = t.offset;
          d["nbytes"] = t.nbytes;
          l.append(d);
        }
        return l;
      })
      // raw bytes of a tensor as a read-only uint8 view into the mmap (keeps the file alive)
      .def("tensor_bytes", [](nb::handle self, const std::string& name) {
        const GGUFFile& f = nb::cast<const GGUFFile&>(self);
        const GGUFTensor* t = f.find_tensor(name);
        if (!t) throw nb::key_error(("no tensor named '" + name + "'").c_str());
        size_t shape[1] = {t->nbytes};
        return nb::ndarray<nb::numpy, const uint8_t, nb::ndim<1>>(t->data, 1, shape, self);
      }, nb::rv_policy::reference_internal);
}

}  // namespace pyllm
