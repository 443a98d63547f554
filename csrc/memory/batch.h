// The description of one forward call: which token rows, at which positions of which sequences,
// and where their outputs go. It sits beside Memory (whose sequences and positions the rows
// continue) so that kernels (cpu/), models (model/) and drivers (engine/, speculative/) share it
// without kernels knowing any model.
#pragma once
#include <cstdint>
#include <vector>

namespace pyllm {

// n rows; rows of one sequence are contiguous with consecutive positions that continue what the
// sequence holds.
struct ForwardIn {
  int n = 0;
  const int32_t* tokens = nullptr;  // [n]
  const int32_t* pos = nullptr;     // [n]
  const int32_t* seq = nullptr;     // [n]
  const int32_t* out_rows = nullptr;  // rows whose logits are wanted (ascending)
  int n_out = 0;
  float* logits = nullptr;          // [n_out][n_vocab]
  float* hidden = nullptr;          // optional [n][n_embd]: the state after output_norm (MTP input)
  bool snapshot = false;            // recurrent layers keep one plane per row (verification batch)
  const float* embd_in = nullptr;   // MTP: [n][n_embd] hidden rows paired with tokens
};

// The rows of a batch being built: token, position and sequence per row (a ForwardIn points into it).
struct Batch {
  std::vector<int32_t> tokens, pos, seq;
  int n() const { return (int)tokens.size(); }
  void add(int32_t token, int32_t p, int32_t s) { tokens.push_back(token); pos.push_back(p); seq.push_back(s); }
  void clear() { tokens.clear(); pos.clear(); seq.clear(); }
  void swap(Batch& o) { tokens.swap(o.tokens); pos.swap(o.pos); seq.swap(o.seq); }
  ForwardIn rows() const {
    ForwardIn in;
    in.n = n(); in.tokens = tokens.data(); in.pos = pos.data(); in.seq = seq.data();
    return in;
  }
};

}  // namespace pyllm
