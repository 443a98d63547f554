// Helpers shared by the scalar reference files (quants.cpp: dequantize, quants_quantize.cpp:
// quantize): ggml's rounding and fp16 conversions. Internal to csrc/ggml.
#pragma once
#include <cstdint>
#include <cstring>

#include "ggml/fp16.h"
#include "ggml/quants.h"

namespace pyllm {
namespace ref {

static constexpr float GROUP_MAX_EPS = 1e-15f;

static inline float h2f(half h) { return fp16_to_fp32(h); }
static inline half f2h(float f) { return fp32_to_fp16(f); }

// Round to nearest, ties to even, valid for |f| <= 2^22 (ggml's trick: add 1.5*2^23).
static inline int nearest_int(float f) {
  const float v = f + 12582912.f;
  int i; std::memcpy(&i, &v, 4);
  return (i & 0x007fffff) - 0x00400000;
}

static inline uint32_t load_u32(const uint8_t* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }

}  // namespace ref
}  // namespace pyllm
