// Matmul probe for kernel work (`tools/bench_matmul.py`): the time of one y = W x over B activation rows,
// outside any model, so a kernel change can be measured per type and batch size.
#pragma once
#include <cstdint>

#include "ggml/types.h"

namespace pyllm {

// w: N rows of `type` blocks (K elements each). Activations are random floats; they are quantized
// inside each timed call, as in a model's forward. grouped: the rows put into 16-row groups first, where a
// model's load would (can_group). Returns the best of `reps` calls, in seconds.
double bench_matmul(ggml_type type, const uint8_t* w, int64_t N, int64_t K, int B, int n_threads, int reps,
                    bool grouped = false);

}  // namespace pyllm
