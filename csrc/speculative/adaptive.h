// --spec-draft-n-max auto: each step, per sequence, the draft length k in 0..cap that maximises the
// expected tokens per second,
//   E(k) = 1 + sum_{j=1..k} prod_{i<=j} a_i     a_i: the sequence's running conditional acceptance of
//                                                draft position i (given 1..i-1 were accepted)
//   T(k) = V0 / n + Vr (k + 1) + D k / n        a step over R verification rows costs V0 + Vr R (the
//                                                target forward, accept, MTP catch-up); one drafting
//                                                forward costs D; n sequences decode together and share
//                                                the per-forward costs
// k = 0 (plain decoding) is chosen when drafting does not pay. Costs are measured at start-up
// (measure_verify_ms + MtpDrafter::measure_step_ms) and then refined from every step's timings
// (exponentially weighted least squares), so the numbers of the machine as it runs are the ones used.
// a_i starts from the context-wide running rate and follows the sequence's own outcomes. Every
// kProbe-th step (4 kProbe while k = 0) a sequence drafts one more (or, every other time, one fewer)
// than its choice, so the rate of the next position and the cost of a row stay measured. Its sequences defer their MTP
// catch-up to their next draft (MtpDrafter::Run::defer), so k = 0 costs what plain decoding costs.
// Lossless whatever it picks: the draft length never changes the output.
#pragma once
#include <vector>

#include "cpu/threadpool.h"
#include "model/model.h"

namespace pyllm {

struct DraftCosts {
  double verify_base_ms = 0, verify_row_ms = 0, draft_ms = 0;
};

// Best-of-reps wall time of one target forward over rows = 1 and rows = n_rows (all logits and hidden
// states, a recurrent plane per row, as a verification), on a scratch memory -> (base, per row).
DraftCosts measure_verify_ms(const Model& model, ThreadPool& tp, int n_rows, int reps);

class AdaptiveDraftLength {
 public:
  AdaptiveDraftLength(int n_seq, int cap, const DraftCosts& start);

  void begin(int seq);                        // a new request on seq: its rates restart from the context's
  int choose(int seq, int n_generating);      // this step's draft length, 0..cap
  void observe_accept(int seq, int n_drafted, int n_accepted);
  void observe_step(int rows, double ms);     // a verification step of `rows` rows (all sequences)
  void observe_draft(int forwards, double ms);

  const DraftCosts& costs() const { return costs_; }
  const std::vector<double>& rates(int seq) const { check(seq); return rate_[seq]; }
  static constexpr int kProbe = 8;

 private:
  double expected_rate(int seq, int k, int n) const;  // E(k) / T(k)
  void check(int seq) const;
  int cap_;
  DraftCosts costs_;
  std::vector<std::vector<double>> rate_;  // [seq][position]
  std::vector<double> global_;             // [position], across sequences
  std::vector<int> steps_;                 // [seq] steps since begin
  double s0_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;  // weighted sums of (rows, ms)
};

}  // namespace pyllm
