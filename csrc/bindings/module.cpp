#include "bindings/bindings.h"

NB_MODULE(_core, m) {
  m.doc() = "pyllm C++ core";
  pyllm::bind_gguf(m);
  pyllm::bind_quants(m);
  pyllm::bind_tokenizer(m);
  pyllm::bind_sampling(m);
  pyllm::bind_state(m);
  pyllm::bind_model(m);
  pyllm::bind_bench(m);
}
