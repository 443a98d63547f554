#include "ggml/quants.h"
namespace pyllm {
void quants_override_avx2(type_traits* table) { (void)table; }
}  // namespace pyllm
