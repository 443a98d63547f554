// Context: n_seq sequences over one model. step() advances every active sequence in batched
// forwards: prompt chunks, then all generating sequences together (plain decode, or MTP draft ->
// one batched verification -> sample_and_accept_n -> trim to the accepted prefix). The speculative
// parts live in csrc/speculative; this file is the recipe and the per-sequence bookkeeping.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cpu/threadpool.h"
#include "engine/seq_state.h"
#include "memory/batch.h"
#include "memory/memory.h"
#include "model/model.h"
#include "sampling/token_sampler.h"
#include "speculative/adaptive.h"
#include "speculative/draft_chain.h"
#include "speculative/mtp_drafter.h"
#include "speculative/rs_checkpoint.h"
#include "speculative/spec_params.h"

namespace pyllm {

struct TokenProb { int32_t id; float p; };
struct StepToken {
  int32_t id;
  float p;                       // probability of id under softmax(raw logits)
  std::vector<TokenProb> top;    // n_probs most likely
};
struct StepOutput {
  int seq;
  std::vector<StepToken> tokens;
  bool done = false;
  std::string stop;  // "eos" | "limit" | "ctx" | ""
};

struct SeqStats {
  int n_prompt = 0, n_cached = 0, n_gen = 0;
  double t_prompt_ms = 0, t_gen_ms = 0;
  int64_t n_draft = 0, n_draft_accepted = 0, n_verif_steps = 0;
  std::vector<int64_t> n_accepted_per_pos;
  std::vector<DrafterStats> drafters;  // per drafter of the chain, in its order
  int ckpt_restored = -1;  // position of the context checkpoint seq_begin restored, -1 none
};

struct GlobalStats {
  int64_t n_prompt_tokens = 0, n_gen_tokens = 0, n_decode_calls = 0;
  int64_t n_draft = 0, n_draft_accepted = 0, n_drafts = 0;
  std::vector<int64_t> n_accepted_per_pos;
  int64_t n_mtp_rows = 0;  // MTP rows evaluated (drafting + catch-up)
  int64_t n_replay_rows = 0;  // target rows replayed after a draft longer than the recurrent planes
  std::vector<DrafterStats> drafters;  // per drafter of the chain (with the time spent drafting)
  double t_prompt_ms = 0, t_gen_ms = 0;
  // the speculative step's parts: drafting forwards and their time (the draft-step cost), and the
  // generate steps (verification forward + accept + MTP catch-up) with their rows
  int64_t n_draft_forwards = 0, n_gen_steps = 0, n_gen_rows = 0;
  double t_draft_ms = 0, t_verify_ms = 0;
};

struct SeqParams {
  uint32_t seed = 0xFFFFFFFFu;  // synthetic acceptance RNG (random when default)
  int n_predict = -1;
  bool ignore_eos = false;
  int n_probs = 0;
  SamplerFactory sampler;  // empty = greedy
  // per-request speculative settings (llama-server's speculative.n_max / n_min / p_min; n_max 0 = off
  // for this request); negative = the context's. n_max may not exceed the context's (it sized the
  // recurrent state); a given n_max fixes the length even when the context's is auto.
  int spec_n_max = -1, spec_n_min = -1;
  float spec_p_min = -1.0f;
};

class Context {
 public:
  Context(const Model& model, int n_ctx, int n_seq, int n_batch, int n_ubatch, int n_threads, const SpecParams& spec);

  int n_ctx_seq() const { return n_ctx_seq_; }
  int n_seq() const { return (int)seqs_.size(); }

  // Starts generation for seq from prompt; reuses the longest common prefix it holds. Returns n_cached.
  int seq_begin(int seq, const std::vector<int32_t>& prompt, SeqParams params);
  void seq_end(int seq);
  void seq_clear(int seq);
  // Constrained decoding (grammars, forced tokens): the allowed-token bitmask for seq's NEXT token.
  // From the first call until the next seq_begin the sequence is constrained: a step decodes it only
  // after a fresh mask was set (a step without one skips it). Its drafts go through the draft check
  // (none without one): cut at the first token the grammar refuses, each verification row sampled
  // under that row's mask, so the output equals plain decoding. An empty mask lifts the constraint.
  void seq_set_allowed(int seq, std::vector<uint32_t> mask);
  // The draft check of constrained sequences (pyllm.structured through the bindings): given seq's
  // draft, returns k, how many leading tokens its grammar accepts, and fills masks with k rows of
  // n_vocab/32 words, the allowed tokens after each kept token. Called inside step().
  using DraftCheck = std::function<int(int seq, const std::vector<int32_t>& draft, std::vector<uint32_t>& masks)>;
  void set_draft_check(DraftCheck f) { draft_check_ = std::move(f); }
  std::vector<StepOutput> step();
  int n_active() const;
  const SeqStats& seq_stats(int seq) const { check_seq(seq); return seqs_[seq].stats; }
  const GlobalStats& stats() const { return gstats_; }
  // the target's thread-pool dispatches so far, and the time spent waiting in them (ThreadPool)
  uint64_t n_dispatches() const { return tp_.n_dispatches(); }
  uint64_t dispatch_wait_ns() const { return tp_.wait_ns(); }
  std::string acceptance_line(int seq) const;  // llama.cpp's "draft acceptance = ..." line
  // one line per drafter of the chain for seq, in llama.cpp's "statistics <type>: ..." format
  std::vector<std::string> drafter_lines(int seq) const;
  std::vector<std::string> drafter_names() const { return chain_ ? chain_->names() : std::vector<std::string>{}; }
  int n_draft_max() const { return n_draft_max_; }  // the longest draft of any drafter (0: none)
  int n_planes() const { return n_planes_; }

  // Low-level: evaluate tokens appended to seq; returns logits for every row (or the last) [rows][n_vocab].
  std::vector<float> eval(int seq, const std::vector<int32_t>& tokens, bool all_logits);
  void seq_rm(int seq, int p0);
  int seq_pos(int seq) const { check_seq(seq); return mem_->seq_pos(seq); }
  size_t memory_bytes() const { return mem_->bytes() + (drafter_ ? drafter_->bytes() : 0); }
  const SpecParams& spec() const { return spec_; }
  const DraftHead* draft_head() const { return drafter_ ? drafter_->draft_head() : nullptr; }
  // the adaptive draft length's current cost model (zeros unless --spec-draft-n-max auto)
  DraftCosts draft_costs() const { return adaptive_ ? adaptive_->costs() : DraftCosts{}; }

  // Prompt cache (context_cache.cpp). Context checkpoints (--ctx-checkpoints n_max, 0 = off;
  // --checkpoint-min-step): recurrent-state copies taken during prefill at the prompt's last token,
  // at hinted positions (message starts) and every min_step tokens (also while generating), so that
  // seq_begin can reuse a prefix the recurrent state has moved past.
  void set_checkpoints(int n_max, int min_step);
  // Positions of seq's current prompt worth a checkpoint (message starts); call after seq_begin.
  void seq_set_checkpoint_hints(int seq, std::vector<int32_t> pos);
  std::vector<std::pair<int32_t, size_t>> seq_checkpoints(int seq) const;  // (position, bytes)
  // KV cache types (-ctk / -ctv, the MTP layer's --spec-draft-type-k / -v): "f16", "bf16", "q8_0", "q4_0".
  // Only while no sequence holds anything (right after construction).
  void set_cache_types(const std::string& k, const std::string& v, const std::string& draft_k, const std::string& draft_v);
  // Everything an idle seq holds, and putting such a state back (shapes checked, clear errors). Taking it first
  // computes the MTP catch-up the adaptive draft length deferred (the state's MTP memory covers every position).
  SeqState seq_state_get(int seq);
  void seq_state_set(int seq, const SeqState& st);

 private:
  struct Seq {
    bool active = false, generating = false;
    std::vector<int32_t> cache;     // tokens whose state is in memory
    std::vector<int32_t> pending;   // prompt tokens still to evaluate
    int32_t last = -1;              // sampled, not yet fed
    SeqParams params;
    std::unique_ptr<TokenSampler> sampler;
    bool constrained = false, mask_ready = false;
    // constrained sequences: the mask of the next token, then one row per draft token it kept
    std::vector<uint32_t> allowed;
    SeqStats stats;
    std::chrono::steady_clock::time_point t_start, t_gen_start;
    std::mt19937 synth_rng;
    Checkpoints ckpts;                 // context checkpoints of what cache holds
    std::vector<int32_t> ckpt_hints;   // of the current prompt, ascending
    int n_max = 0, n_min = 0;  // this request's speculative settings (SeqParams over the context's)
    float p_min = 0;
    bool auto_len = false;     // the adaptive draft length chooses n_max each step
    // --spec-accept rejection and a stochastic sampler: drafts are sampled and verified by rejection
    // sampling (speculative/accept.h) with spec_rng; dists: each drafted token's draft distribution
    bool reject = false;
    std::mt19937 spec_rng;
    std::vector<std::vector<IdProb>> dists;
    // this step drafts and verifies by rejection: a constrained step keeps the match rule under its masks
    bool rejects() const { return reject && !constrained; }
  };

  void check_seq(int seq) const;
  void prefill_step(std::vector<StepOutput>& outs, int& budget);
  void generate_step(std::vector<StepOutput>& outs);
  // target forward of every row of b, logits for every row into logits_buf_ (hidden_buf_ for MTP)
  void verify(const Batch& b, int n_seqs);  // n_seqs: the sequences in b
  std::vector<std::vector<int32_t>> draft(const std::vector<int>& gen, std::vector<int>& which);
  void count_drafts(Seq& s, int n_draft, int n_accepted, int who);
  // the fed rows join the cache; emits acc (with n_probs from logits [acc.size()][n_vocab]) up to a stop
  StepOutput emit(int seq, const std::vector<int32_t>& acc, const float* logits);
  StepToken make_token(int32_t id, const float* logits, int n_probs) const;
  bool finish_token(Seq& s, StepOutput& out, int32_t id);
  // the masks of this step's rows (constrained) or null; one mask set, one step
  const uint32_t* take_mask(Seq& s);
  void check_draft(int seq, std::vector<int32_t>& draft);  // cut a constrained draft, its masks into allowed
  // checkpoints (context_cache.cpp)
  bool ckpt_on() const { return ckpt_n_max_ > 0 && mem_->has_recurrent(); }
  int32_t ckpt_split(const Seq& s, int32_t p0) const;  // the next prefill position wanting a checkpoint
  bool ckpt_wanted(const Seq& s, int32_t pos, bool prefill) const;
  void ckpt_take(int seq);
  int32_t ckpt_restore(int seq, int32_t n);  // the restored position, 0 when none fits

  const Model& model_;
  ThreadPool tp_;
  SpecParams spec_;
  std::vector<double> synth_probs_;  // synthetic acceptance (benchmark only), empty when off
  int n_ctx_seq_, n_batch_, n_ubatch_;
  int ckpt_n_max_ = 0, ckpt_min_step_ = 0;
  std::unique_ptr<Memory> mem_;
  std::unique_ptr<MtpDrafter> drafter_;  // draft-mtp only
  std::unique_ptr<AdaptiveDraftLength> adaptive_;  // --spec-draft-n-max auto only
  // the end of the last decoding step, when nothing but the caller's loop ran since (auto: its overhead)
  std::chrono::steady_clock::time_point t_gen_end_;
  bool gen_end_valid_ = false;
  std::unique_ptr<DraftChain> chain_;    // every configured drafter, in llama.cpp's order (null: none)
  int n_draft_max_ = 0;
  int n_planes_ = 1;                    // recurrent planes of the target memory (rs_checkpoint.h)
  std::vector<RsCheckpoint> ckpt_;      // per sequence: the state before a verification longer than them
  DraftCheck draft_check_;              // null: constrained sequences are not drafted
  std::vector<Seq> seqs_;
  GlobalStats gstats_;
  // per-step scratch, reused: logits [rows][n_vocab] and target hidden states [rows][n_embd]
  Batch batch_;
  std::vector<float> logits_buf_, hidden_buf_;
};

}  // namespace pyllm
