// The cheap draft head: what the MTP drafter multiplies its hidden state with to pick each draft token.
// It is used for drafting only; the target verifies every draft with its own full head, so any draft
// head is lossless by construction (a worse one only lowers acceptance). Two options, independent, made
// once when the Context is built:
//  - a lower-bit copy of the MTP head (--spec-draft-head-type q4_0 | iq4_xs | q8_0 | ...): every row
//    dequantized and requantized with the reference quantizer (ik_llama.cpp does the same at quantize
//    time with llama-quantize --extra-output-tensor; pyllm makes it at load, from any file);
//  - a reduced draft vocabulary (--spec-draft-vocab N): the N lowest token ids, plus every
//    end-of-generation id. The rule: BPE vocabularies (Qwen, GPT-2 / Llama-3 style) number tokens in
//    merge order, so the low ids are the bytes and the earliest, most frequent merges; they are also a
//    contiguous prefix of the matrix (a view of the mmap unless requantized). The EOG ids (often at the
//    top of the vocabulary) are added so a draft can still end a turn. Argmax runs over these rows only.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cpu/matmul.h"
#include "cpu/threadpool.h"
#include "memory/anon_memory.h"
#include "model/model.h"

namespace pyllm {

// GGML type by name, case-insensitive ("q4_0", "Q4_K", "iq4_xs", "f16"); throws std::invalid_argument
// naming --spec-draft-head-type for an unknown name or a type that cannot be a weight.
ggml_type draft_head_type(const std::string& name);

class DraftHead {
 public:
  // head: the model's MTP output matrix [n_embd][rows]; type "" keeps its type; n_vocab 0 keeps every row.
  // Throws std::invalid_argument naming the option when the type cannot hold a row of n_embd values.
  DraftHead(const Model& model, const Weight& head, ThreadPool& tp, const std::string& type, int n_vocab);

  int64_t size() const { return n_main_ + (int64_t)extra_ids_.size(); }  // rows drafted over
  int32_t id(int64_t i) const { return i < n_main_ ? (int32_t)i : extra_ids_[i - n_main_]; }
  // logits over the draft rows for n hidden states h [n][n_embd] -> out [n][size()]
  void logits(ThreadPool& tp, const float* h, int n, float* out) const;
  size_t bytes() const { return owned_.size() + extra_buf_.size(); }  // memory beyond the model's mmap
  const std::string& description() const { return desc_; }

 private:
  Weight main_, extra_;
  int64_t n_main_ = 0;
  std::vector<int32_t> extra_ids_;
  AnonBuffer owned_;                // the converted rows, streamed by every draft step: huge pages
  std::vector<uint8_t> extra_buf_;  // the few end-of-generation rows beyond them
  std::string desc_;
};

}  // namespace pyllm
