#include "bindings/bindings.h"

namespace pyllm {
void bind_quants(nb::module_& m) { (void)m; }
}  // namespace pyllm
