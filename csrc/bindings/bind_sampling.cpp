#include "bindings/bindings.h"

namespace pyllm {
void bind_sampling(nb::module_& m) { (void)m; }
}  // namespace pyllm
