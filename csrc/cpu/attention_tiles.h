// Many-query schedule of attention.cpp's f16 flash-attention row kernel (AVX-512): same bits per
// (row, head), K/V converted once per key tile and shared by the queries of a kv head.
#pragma once
#include <cstdint>
#include <vector>

#include "memory/memory.h"

namespace pyllm {

struct FaTiles {
  Memory* mem;
  int il;
  const int* seq;  // [n] rows' sequences
  const int* pos;  // [n] rows' positions
  const float* q;  // [n][H*Dk]
  float* out;      // [n][H*Dv]
  int H, Hkv, Dk, Dv, n_swa;
  float kq_scale;
};

// One task: batch rows [r0, r1) (one sequence) x heads [h0, h1) (one kv head).
struct FaTask {
  int r0, r1, h0, h1;
};

// The CPU and the shapes this schedule handles (else attention.cpp's per-row loop)
bool fa_tiles_supported(int Dk, int Dv, float softcap);
// Tasks for n rows: blocks of consecutive same-sequence rows, per kv head; heads split further when there
// are fewer tasks than 2 per thread. The split changes no numbers.
std::vector<FaTask> fa_tiles_plan(const int* seq, int n, int H, int Hkv, int n_threads);
void fa_tiles_run(const FaTiles& a, const FaTask& t);

}  // namespace pyllm
