#include "bindings/bindings.h"

namespace pyllm {
void bind_model(nb::module_& m) { (void)m; }
}  // namespace pyllm
