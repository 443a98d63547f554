#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "bindings/bindings.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace pyllm {

// UTF-8 that may end inside a character (detokenized pieces): invalid bytes become U+FFFD
static nb::str utf8_str(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), (Py_ssize_t)s.size(), "replace");
  if (!o) throw nb::python_error();
  return nb::steal<nb::str>(o);
}

void bind_tokenizer(nb::module_& m) {
  static nb::object tokenizer_error = nb::exception<TokenizerError>(m, "TokenizerError", PyExc_ValueError);
  (void)tokenizer_error;

  nb::class_<Tokenizer>(m, "Tokenizer",
                        "Tokenizer from a GGUF file's tokenizer.ggml.* metadata (llama.cpp-compatible).")
      .def(nb::init<const GGUFFile&>(), nb::arg("gguf"), nb::call_guard<nb::gil_scoped_release>())
      .def_static("from_file", [](const std::string& path) {
        nb::gil_scoped_release release;
        GGUFFile f(path);
        return Tokenizer::from_gguf(f);
      }, nb::arg("path"))
      .def("tokenize", &Tokenizer::tokenize, nb::arg("text"), nb::arg("add_special") = true,
           nb::arg("parse_special") = false, nb::call_guard<nb::gil_scoped_release>())
      .def("token_to_piece", [](const Tokenizer& t, int32_t id, bool special) {
        std::string p = t.token_to_piece(id, special);
        return nb::bytes(p.data(), p.size());
      }, nb::arg("id"), nb::arg("special") = true)
      .def("detokenize", [](const Tokenizer& t, const std::vector<int32_t>& ids, bool special) {
        std::string s;
        {
          nb::gil_scoped_release release;
          s = t.detokenize(ids, special);
        }
        return utf8_str(s);
      }, nb::arg("ids"), nb::arg("special") = false)
      .def("detokenize_bytes", [](const Tokenizer& t, const std::vector<int32_t>& ids, bool special) {
        std::string s;
        {
          nb::gil_scoped_release release;
          s = t.detokenize(ids, special);
        }
        return nb::bytes(s.data(), s.size());
      }, nb::arg("ids"), nb::arg("special") = false)
      .def("token_text", [](const Tokenizer& t, int32_t id) { return utf8_str(t.token_text(id)); }, nb::arg("id"))
      .def("token_type", &Tokenizer::token_type, nb::arg("id"))
      .def("token_score", &Tokenizer::token_score, nb::arg("id"))
      .def("token_attr", &Tokenizer::token_attr, nb::arg("id"))
      .def("text_to_token", &Tokenizer::text_to_token, nb::arg("text"))
      .def("is_eog", &Tokenizer::is_eog, nb::arg("id"))
      .def("is_control", &Tokenizer::is_control, nb::arg("id"))
      .def("is_byte", &Tokenizer::is_byte, nb::arg("id"))
      .def_prop_ro("eog_ids", [](const Tokenizer& t) {
        return std::vector<int32_t>(t.eog_ids().begin(), t.eog_ids().end());
      })
      .def_prop_ro("n_vocab", &Tokenizer::n_vocab)
      .def_prop_ro("bos", &Tokenizer::bos)
      .def_prop_ro("eos", &Tokenizer::eos)
      .def_prop_ro("eot", &Tokenizer::eot)
      .def_prop_ro("eom", &Tokenizer::eom)
      .def_prop_ro("pad", &Tokenizer::pad)
      .def_prop_ro("unk", &Tokenizer::unk)
      .def_prop_ro("nl", &Tokenizer::nl)
      .def_prop_ro("add_bos", &Tokenizer::add_bos)
      .def_prop_ro("add_eos", &Tokenizer::add_eos)
      .def_prop_ro("add_space_prefix", &Tokenizer::add_space_prefix)
      .def_prop_ro("model", &Tokenizer::model_name)
      .def_prop_ro("pre", &Tokenizer::pre_name)
      .def_prop_ro("vocab_type", [](const Tokenizer& t) {
        return std::string(t.type() == VocabType::SPM ? "spm" : "bpe");
      })
      .def("__len__", &Tokenizer::n_vocab);

  // The word split of a BPE pre-tokenizer (testing/debugging): pre is a tokenizer.ggml.pre value.
  m.def("pretokenize", [](const std::string& pre, const std::string& text, bool byte_encode) {
    std::vector<std::string> words;
    {
      nb::gil_scoped_release release;
      words = pretokenize(pre_type_from_name(pre), text, byte_encode);
    }
    nb::list l;
    for (auto& w : words) l.append(utf8_str(w));
    return l;
  }, nb::arg("pre"), nb::arg("text"), nb::arg("byte_encode") = false);
}

}  // namespace pyllm
