// Causal multi-head attention over a sequence's KV cache (f16, or the -ctk/-ctv types), with GQA (kv head = h / (H/Hkv))
// and an optional sliding window. The new rows' K/V are written to the cache first.
#pragma once
#include <cstdint>

#include "cpu/threadpool.h"
#include "memory/batch.h"
#include "memory/memory.h"

namespace pyllm {

struct AttnParams {
  int H = 1, Hkv = 1, Dk = 64, Dv = 64;
  float scale = 0.125f;
  int n_swa = 0;         // > 0: row at pos p sees keys j with p - j < n_swa
  float softcap = 0.f;   // > 0: scores = softcap * tanh(scores / softcap)
};

// q: [n][H*Dk], k: [n][Hkv*Dk], v: [n][Hkv*Dv] for the rows of `in`; out: [n][H*Dv]
void attention(ThreadPool& tp, Memory& mem, int il, const ForwardIn& in, const float* q, const float* k,
               const float* v, float* out, const AttnParams& p);

// Only the cache writes of attention(): rows whose output nobody reads (the MTP block's catch-up rows)
void store_kv(Memory& mem, int il, const ForwardIn& in, const float* k, const float* v, const AttnParams& p);

// The same over KV caches of other types (Memory::set_kv_types: bf16, q8_0, q4_0); attention() calls it.
void attention_typed(ThreadPool& tp, Memory& mem, int il, const ForwardIn& in, const float* q, const float* k,
                     const float* v, float* out, const AttnParams& p);

// f32 row -> f16 (F16C when the CPU has it), the KV-cache store
void store_f16(uint16_t* dst, const float* src, int n);

}  // namespace pyllm
