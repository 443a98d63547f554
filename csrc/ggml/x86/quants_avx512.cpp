#include "ggml/quants.h"
namespace pyllm {
void quants_override_avx512(type_traits* table) { (void)table; }
}  // namespace pyllm
