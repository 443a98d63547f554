// Faster quantizers that write exactly the reference's bytes, for tools that quantize whole models
// (tools/make_tiny_gguf.py); the runtime itself never quantizes weights.
#pragma once
#include <cstdint>

#include "ggml/types.h"

namespace pyllm {

// Quantizes n values (whole blocks) of type t into y with the bytes ref::quantize_row_<t> writes. Q4_K and Q5_K
// run the 8 sub-block searches of a super-block side by side (one lane each, every lane doing the reference's
// scalar float operations in the reference's order, so vectorising across lanes changes no result); every other
// type is the reference itself. Throws std::invalid_argument for a type without a quantizer.
void quantize_row_lanes(ggml_type t, const float* x, void* y, int64_t n);

}  // namespace pyllm
