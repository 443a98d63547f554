// --spec-draft-n-max auto: each step, per sequence, the draft length k in 0..cap that maximises the
// expected tokens per second,
//   E(k) = 1 + sum_{j=1..k} prod_{i<=j} a_i     a_i: the sequence's running conditional acceptance of
//                                                draft position i (given 1..i-1 were accepted)
//   T(k) = (O + V0) / n + Vr (k + 1) + D k / n  a speculative step over R verification rows costs
//                                                V0 + Vr R (the target forward with its recurrent
//                                                snapshots, accept); one drafting forward costs D (the
//                                                first one also computes the MTP rows the last step
//                                                kept); O: the caller's loop between two
//                                                steps (detokenising, streaming; per step, whatever
//                                                it drafted: on a 12M model it is 10% of a plain
//                                                step); n sequences decode together and share the
//                                                per-forward costs
//   T(0) = (O + P(n)) / n                        a step without drafts is plain decoding of n rows,
//                                                measured on its own: it has no snapshots, catch-up or
//                                                draft, and on a small model those fixed costs are most
//                                                of a speculative step, so a line through the
//                                                speculative steps' costs says nothing about it. P(n)
//                                                is timed per n (a plain step of 8 rows costs well over
//                                                one of 1 row: taking P(1) for it made 8 sequences stay
//                                                plain where drafting paid); an n not timed yet is the
//                                                nearest timed one plus Vr per row between them
// k = 0 (plain decoding) is chosen when drafting does not pay. Costs are measured at start-up
// (measure_verify_ms, MtpDrafter::measure_step_ms) and then refined from every step's timings
// (exponentially weighted least squares for V0, Vr; running means for P, D and O), so the numbers of the
// machine as it runs are the ones used. D is learnt from drafts that caught up at most one step's rows
// per sequence: the first draft after a stretch at k = 0 catches up all of it, a cost of that probe and
// not of a drafting step (counted into D, it made the 12M trained model, whose drafts pay 6-15% on code,
// stop drafting after its first draft). a_i starts from the context-wide running rate and follows
// the sequence's own outcomes. Every kProbe-th step a drafting sequence drafts one more (or, every
// other time, one fewer) than its choice, so the rate of the next position and the cost of a row stay
// measured (and until the context has timed 3 plain steps, every other step is one). The context's
// rates learn from every drafting sequence (fixed lengths too); a sequence at k = 0 beside others
// learns nothing of its own, so its rates drift back to the context's. At k = 0 it probes with one token after kIdleProbe steps, and each probe that leaves it at
// 0 doubles the wait (up to kIdleProbeMax; the context-wide wait carries over to the next request), so
// a model where drafting never pays loses at most about one probe in kIdleProbeMax steps. Its
// sequences defer their MTP catch-up to their next draft (MtpDrafter::Run::defer), so k = 0 costs
// what plain decoding costs.
// Lossless whatever it picks: the draft length never changes the output.
#pragma once
#include <vector>

#include "cpu/threadpool.h"
#include "model/model.h"

namespace pyllm {

struct DraftCosts {
  double verify_base_ms = 0, verify_row_ms = 0, draft_ms = 0;
  double plain_ms = 0;  // a 1-row step without drafts; 0 at construction: verify_base_ms + verify_row_ms
  double overhead_ms = 0;  // O: the caller's time between two decoding steps
};

// Best-of-reps wall time of one target forward over rows = 2 and rows = n_rows (all logits and hidden
// states, a recurrent plane per row, as a verification) -> (base, per row), and of a plain 1-row
// decode (no planes) -> plain, on a scratch memory.
DraftCosts measure_verify_ms(const Model& model, ThreadPool& tp, int n_rows, int reps);

class AdaptiveDraftLength {
 public:
  AdaptiveDraftLength(int n_seq, int cap, const DraftCosts& start);

  void begin(int seq);                        // a new request on seq: its rates restart from the context's
  int choose(int seq, int n_generating);      // this step's draft length, 0..cap
  // own = false: a sequence with a fixed draft length, whose outcomes only teach the context's rates
  void observe_accept(int seq, int n_drafted, int n_accepted, bool own = true);
  // a decoding step of `rows` rows over n_seqs sequences (rows == n_seqs: nobody drafted, a plain step)
  void observe_step(int rows, int n_seqs, double ms);
  // the drafting forwards of a step; the first also computed caught_up deferred rows of seqs sequences
  void observe_draft(int forwards, double ms, int seqs = 0, int caught_up = 0);
  void observe_gap(int n_seqs, double ms);  // the time from one decoding step of n_seqs to the next

  const DraftCosts& costs() const { return costs_; }
  const std::vector<double>& rates(int seq) const { check(seq); return rate_[seq]; }
  static constexpr int kProbe = 8, kIdleProbe = 32, kIdleProbeMax = 512;

 private:
  double expected_rate(int seq, int k, int n) const;  // E(k) / T(k)
  double plain_cost(int n) const;                     // P(n)
  void check(int seq) const;
  int cap_;
  DraftCosts costs_;
  std::vector<std::vector<double>> rate_;  // [seq][position]
  std::vector<double> global_;             // [position], across sequences
  std::vector<int> steps_;                 // [seq] steps since begin
  std::vector<int> idle_wait_, idle_next_;  // [seq] the k = 0 probe wait and the step of the next probe
  int idle_wait_global_ = kIdleProbe;
  std::vector<double> plain_;             // [n] P(n), the running mean of the plain steps of n sequences
  std::vector<int> n_plain_at_;            // [n] observations in plain_[n] (0: not timed)
  int n_plain_ = 0, n_draft_ = 0, n_gap_ = 0;  // observations in the running means (plain: over every n)
  double s0_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;  // weighted sums of (rows, ms)
};

}  // namespace pyllm
