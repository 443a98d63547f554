// --spec-type draft-simple with -md FILE (llama.cpp's common_speculative_impl_draft_simple): a small
// model with the target's vocabulary drafts greedily, n_max tokens one forward per depth, batched
// across the sequences. Its memory follows the target's history lazily: at each draft it keeps the
// longest prefix it holds that equals the sequence's history (a plane switch in its recurrent state,
// or a KV cut), evaluates the rest plus the sampled token in one batched forward, and drafts from
// there; the drafted tokens it fed stay, so an accepted prefix is never evaluated twice.
// Drafts stop when the top-1 probability (softmax of the top-10 logits, as upstream's top-k 10
// sampler) falls below p_min; a draft shorter than n_min is dropped.
#pragma once
#include <memory>
#include <vector>

#include "cpu/threadpool.h"
#include "memory/batch.h"
#include "memory/memory.h"
#include "model/model.h"
#include "speculative/drafter.h"
#include "speculative/spec_params.h"

namespace pyllm {

// Throws std::invalid_argument naming the difference when the draft model cannot draft for the
// target (llama.cpp's common_speculative_are_compatible: vocabulary type, BOS/EOS, size within 128,
// the same token texts from id 5 on).
void check_draft_vocab(const Model& target, const Model& draft);

class DraftModel : public Drafter {
 public:
  DraftModel(const Model& target, const Model& draft, int n_seq, int n_ctx_seq, const SpecParams& spec);
  const char* name() const override { return "draft-simple"; }
  int n_max() const override { return n_max_; }
  void begin(int, const std::vector<int32_t>&, int) override {}
  void draft(const std::vector<DraftRequest>& reqs, std::vector<std::vector<int32_t>>& out) override;
  void accept(int, int, bool) override {}
  size_t bytes() const { return mem_->bytes(); }

 private:
  // keeps the prefix of seq's memory that equals hist + last and appends the rest to batch_
  void sync(int seq, const std::vector<int32_t>& hist, int32_t last);

  const Model& m_;
  int n_max_, n_min_;
  float p_min_;
  ThreadPool tp_;
  std::unique_ptr<Memory> mem_;
  std::vector<std::vector<int32_t>> held_;  // per sequence: the tokens its memory holds
  Batch batch_;
  std::vector<float> logits_, top_;
};

}  // namespace pyllm
