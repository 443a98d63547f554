#include "bindings/bindings.h"

namespace pyllm {
void bind_tokenizer(nb::module_& m) { (void)m; }
}  // namespace pyllm
