// The MTP drafter (--spec-type draft-mtp, llamacpp-mtp.md section 3). The model's nextn block turns
// the pair (x_p, h_{p-1}) -- token at p, hidden state of p-1 -- into a guess for x_{p+1}; run
// recursively on its own output it drafts several tokens. The drafter owns the block's KV memory and,
// per sequence, pending_h: the target's hidden state of the position before the next row.
//
// Its memory mirrors the target's: positions < the target's length, all paired with the target's h
// (catch-up). A step is then
//   draft(): from (last, pending_h) at the target's length p0, one batched MTP forward per depth;
//            the first row is exactly the row catch-up would compute next (same token, position and
//            target h), so its KV stays; the deeper rows used the MTP's own h and are dropped;
//   catch_up(): after the target verified and kept [last, d1..da], the kept rows it does not hold yet
//            (p0+1..p0+a) are deferred (the decoding loop's runs) and the next draft() computes them in
//            its first forward, before its drafting row: one MTP forward a step fewer; pending_h becomes
//            h_{p0+a}. Prompt ubatches and eval() catch up at once.
// Nothing is computed twice and rejected rows are never caught up, so rollback() only shortens.
#pragma once
#include <cstdint>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "cpu/threadpool.h"
#include "memory/batch.h"
#include "memory/memory.h"
#include "model/model.h"
#include "sampling/token_sampler.h"
#include "speculative/draft_head.h"
#include "speculative/spec_params.h"

namespace pyllm {

class MtpDrafter {
 public:
  // Throws std::invalid_argument when the model has no (loaded) MTP layer.
  MtpDrafter(const Model& model, ThreadPool& tp, int n_seq, int n_ctx_seq, const SpecParams& spec);

  // seq restarts holding the target's positions < n_kept (prompt-cache reuse). pending_h is zero at
  // 0; otherwise it is kept: exact when the prompt extends what was evaluated, stale (as upstream)
  // when it does not, which may cost acceptance but never changes the output.
  void begin(int seq, int n_kept);
  // The target dropped seq's positions >= p0.
  void rollback(int seq, int p0);

  // Draft up to n_max tokens after `last`, which the target will read at position pos (its length);
  // n_min / p_min are the sequence's (the context's, or its request's speculative.n_min / p_min).
  // sampler / rng / dists: a sampled draft (DraftRequest's, --spec-accept rejection), else greedy.
  struct Request {
    int seq; int32_t last; int32_t pos; int n_max; int n_min; float p_min;
    TokenSampler* sampler = nullptr; std::mt19937* rng = nullptr; std::vector<std::vector<IdProb>>* dists = nullptr;
  };
  // One draft per request (empty for n_max <= 0): over the draft head (the model's MTP head, or the
  // cheap one of --spec-draft-head-type / --spec-draft-vocab) greedy, or drawn from the request's
  // drafting chain (then each token's distribution goes to *dists); stopped by p_min, dropped below n_min.
  std::vector<std::vector<int32_t>> draft(const std::vector<Request>& reqs);

  // Rows the target decoded and keeps: n rows of seq at pos0.., with their target hidden states h
  // ([n][n_embd], after output_norm). At most one run per sequence and call.
  // defer (the decoding loop's runs): the rows wait in the sequence's backlog and are computed in the
  // first forward of its next draft (or by the next undeferred catch-up / flush_seq); a sequence that
  // does not draft (auto at k = 0) costs plain decoding until then, and its rows' MTP forward once it
  // drafts again (nothing if its request ends first). rollback / begin cut the backlog like the memory.
  // A backlog of kMaxBacklog rows is computed at once (one batch), so a sequence that does not draft
  // for long holds at most that many hidden states ([rows][n_embd] floats, 20 KiB a row at 27B).
  struct Run { int seq; const int32_t* tokens; int32_t pos0; int n; const float* h; bool defer = false; };
  static constexpr int kMaxBacklog = 256;
  // Pairs each row with the hidden state before it and fills the MTP KV (rows already held from
  // drafting are skipped); pending_h <- each run's last h.
  void catch_up(const std::vector<Run>& runs);
  // computes seq's deferred rows now (a state being saved must hold them)
  void flush_seq(int seq) {
    if (!backlog_[seq].tok.empty()) flush({seq});
  }

  size_t bytes() const { return mem_->bytes() + (head_ ? head_->bytes() : 0); }
  const DraftHead* draft_head() const { return head_.get(); }  // null: the model's own head
  // Wall time of one drafting forward of one row (MTP block + head), on a scratch memory: the
  // adaptive draft length's start-up cost measurement. Best of `reps`.
  double measure_step_ms(int reps) const;
  // the deferred rows draft() computed in its first forwards (part of t_draft_ms) since the last take:
  // sequences, rows (zeros when none)
  struct CatchUp { int seqs = 0, rows = 0; };
  CatchUp take_catch_up() { return std::exchange(last_catch_up_, CatchUp{}); }
  // drafting forwards run so far and their wall time (the draft-step cost, for stats)
  int64_t n_draft_forwards() const { return n_forwards_; }
  double t_draft_ms() const { return t_draft_ms_; }
  // The prompt cache (engine/seq_state.h) copies and restores the MTP memory and pending_h.
  Memory& memory() { return *mem_; }
  const Memory& memory() const { return *mem_; }
  std::vector<float> get_pending(int seq) const { return {pending_h(seq), pending_h(seq) + model_.n_embd}; }
  void set_pending(int seq, const std::vector<float>& h);
  // MTP rows evaluated so far (drafting + catch-up): tests read it to check no row runs twice.
  int64_t n_rows() const { return n_rows_; }

 private:
  const float* pending_h(int seq) const { return pending_h_.data() + (size_t)seq * model_.n_embd; }
  // one drafting forward of in's rows on mem: hidden -> hidden, logits over the draft head -> logits
  // ([n][head_size()]); returns the head's size
  int64_t forward_draft(Memory& mem, ForwardIn in, float* hidden, float* logits) const;
  int64_t head_size() const { return head_ ? head_->size() : model_.n_vocab; }
  void compact_rows(float* hidden, const int32_t* rows, int n_out) const;
  void check_length(int seq, int32_t pos, const char* what) const;
  // positions the MTP memory holds or will hold once the backlog is computed
  int32_t held(int seq) const { return mem_->seq_pos(seq) + (int32_t)backlog_[seq].tok.size(); }
  void cut_backlog(int seq, int32_t p0);     // drop backlog rows at positions >= p0
  void flush(const std::vector<int>& seqs);  // compute these sequences' backlogs, one batch
  int take_backlog(int seq);                 // seq's backlog onto batch_ / hin_; returns its rows

  const Model& model_;
  ThreadPool& tp_;
  SpecParams spec_;
  std::unique_ptr<Memory> mem_;
  std::unique_ptr<DraftHead> head_;  // the cheap draft head, or null
  std::vector<float> pending_h_;  // [n_seq][n_embd]
  // per sequence: the drafting row whose KV is kept, (kept_tok_ at kept_pos_), or kept_pos_ -1
  std::vector<int32_t> kept_pos_, kept_tok_;
  struct Backlog { int32_t pos0 = 0; std::vector<int32_t> tok; std::vector<float> h; };  // h: each row's pair
  std::vector<Backlog> backlog_;
  int64_t n_rows_ = 0, n_forwards_ = 0;
  double t_draft_ms_ = 0;
  CatchUp last_catch_up_;
  // scratch reused across steps
  Batch batch_, next_;
  std::vector<float> hin_, next_h_, logits_, hidden_, top_, full_;
  std::vector<IdProb> dist_;
  std::vector<int32_t> rows_;
};

}  // namespace pyllm
