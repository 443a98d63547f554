// --spec-draft-n-max auto: each step, per sequence, the draft length k in 0..cap that maximises the
// expected tokens per second,
//   E(k) = 1 + sum_{j=1..k} prod_{i<=j} a_i     a_i: the sequence's running conditional acceptance of
//                                                draft position i (given 1..i-1 were accepted)
//   T(k) = (O + V(n (k + 1))) / n + D k / n    a speculative step over R verification rows costs V(R)
//                                                (the whole step but its drafting forwards: batch, the
//                                                target forward with its recurrent snapshots, accept);
//                                                one drafting forward costs D (the first one also
//                                                computes the MTP rows the last step kept); O: the
//                                                caller's loop between two steps (detokenising,
//                                                streaming: on a 12M model 10% of a plain step); n
//                                                sequences decode together and share the per-forward
//                                                costs. V(R) is timed per R where R was seen, else the
//                                                nearest timed R plus Vr per row, else the line V0 + Vr R
//                                                (least squares over the last ~20 steps)
//   T(0) = (O + P(n)) / n + C                    a step without drafts is plain decoding of n rows,
//                                                timed on its own (no snapshots, catch-up or draft: on a
//                                                small model those fixed costs are most of a speculative
//                                                step). P(n) is timed per n (a plain step of 8 rows
//                                                costs well over one of 1 row); an n not timed yet is
//                                                the nearest timed one plus Vr per row between them;
//                                                C: its kept row's MTP forward, deferred to the next
//                                                draft (a probe) or to kMaxBacklog rows, timed on the
//                                                probe's first draft (on the 12M model 0.03 ms, 5% of
//                                                a plain step)
// k = 0 (plain decoding) is chosen when drafting does not pay. Costs are measured at start-up
// (measure_verify_ms, MtpDrafter::measure_step_ms) and then refined from every step's timings (running
// means for V(R), P, D, C and O; a timing over 1.5x the current value counts as 1.5x: stalls of a busy
// machine), so the numbers of the machine as it runs are the ones used. A draft that caught up more
// than one step's rows per sequence (the first after a stretch at k = 0) and its step are not timed as
// D and V: they are the probe's costs (catch-up, cold caches), not a drafting run's (counted, they made
// the 12M trained model, whose drafts pay 6-15% on code, stop drafting); that draft times C. a_i starts
// from the context-wide running rate and follows the sequence's own outcomes.
// Beside other sequences (n > 1) the probes are the batch's (see batch_plain_ below), and drafting must look
// kBatchMargin (10 %) better than plain to be chosen.
// Every kProbe-th step a drafting sequence drafts one more (or, every other time, one fewer; from 1 to a
// plain step only every kPlainProbe-th time, and one more that looks well below its choice every 4th time)
// than its choice, so the rate of the next position and the cost of a row stay measured (and until the
// context has timed 3 plain steps, every other step is one). The context's rates learn from every drafting
// sequence (fixed lengths too); a sequence at k = 0 learns nothing of its own, so its rates drift back to
// the context's beside others, and alone to the mean of its request's outcomes (a short run of rejections
// does not hold it at 0). At k = 0 it probes with kProbeBurst 1-token steps after kIdleProbe steps,
// and each probe that leaves it at 0 doubles the wait (up to kIdleProbeMax; the context's wait and
// countdown carry over to the next request), so a model where drafting never pays loses at most about
// one probe in kIdleProbeMax steps. (Not doubling near break-even cost the 12M model 5-8% on the story
// task: each probe also computes the MTP rows deferred since the last, C per step.) The steps of a probe
// and the first kColdSteps of a request run on caches plain decoding left cold: their timings may only
// lower V(R) (or set one never timed); raising it is left to drafting runs. Until 3 speculative steps
// were timed, a sequence at k = 0 drafts every other step, as one that drafts takes plain ones. Its
// sequences defer their MTP catch-up to their next draft (MtpDrafter::Run::defer), so a stretch at k = 0
// costs plain decoding plus C per step, and nothing more when the request ends before the next probe.
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
  double catch_up_row_ms = 0;  // C: a deferred MTP row, computed by the next draft (or at kMaxBacklog rows)
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
  static constexpr int kProbe = 8, kPlainProbe = 8, kIdleProbe = 32, kIdleProbeMax = 512, kProbeBurst = 4;
  static constexpr int kBatchPlain = 16;

 private:
  double expected_rate(int seq, int k, int n) const;  // E(k) / T(k)
  double plain_cost(int n) const;                     // P(n)
  double spec_cost(int rows) const;                   // V(rows), a speculative step's target forward and accept
  void batch_next(int rows, int n_seqs);              // n > 1: whether the next step is a batch probe
  void check(int seq) const;
  int cap_;
  DraftCosts costs_;
  std::vector<std::vector<double>> rate_;  // [seq][position]
  struct Mean { double hits, tries, prior; };  // a request's outcomes at one position, and the context's rate at begin
  std::vector<std::vector<Mean>> mean_;        // [seq][position]
  std::vector<double> global_;             // [position], across sequences
  std::vector<int> steps_;                 // [seq] steps since begin
  // At k = 0: a probe of kProbeBurst 1-token steps after `wait` steps, each probe doubling the wait (up to
  // kIdleProbeMax); drafting by choice starts it over
  struct IdleProbe {
    int wait = kIdleProbe, left = kIdleProbe, burst = 0;  // burst: the probe's 1-token steps still to take
    void reset() { *this = IdleProbe(); }
    bool take_burst() {  // one of the probe's 1-token steps, while any is left
      if (burst <= 0) return false;
      burst--;
      return true;
    }
    bool count_down();  // one step at k = 0: true when the wait is over (the probe's first step)
  };
  // [seq] the k = 0 probe wait and the steps left until the next probe; the context's carry over to the next
  // request (a countdown per request never reached a wait of 512 in requests of 128 tokens: it never probed)
  std::vector<IdleProbe> idle_;
  IdleProbe idle_global_;
  std::vector<double> plain_;             // [n] P(n), the running mean of the plain steps of n sequences
  std::vector<int> n_plain_at_;            // [n] observations in plain_[n] (0: not timed)
  std::vector<double> spec_;               // [rows] V(rows), the running mean of the speculative steps of rows rows
  std::vector<int> n_spec_at_;             // [rows] observations in spec_[rows]
  // n > 1: probes are the batch's, not each sequence's. Every kBatchPlain-th drafting step is plain for every
  // sequence (P(n) is timed only when nobody drafts: per-sequence probes never made one, and a P(4) timed in a
  // slow moment held 4 sequences of the 12M model drafting at 0.93 of plain); at k = 0 every idle sequence
  // probes in the same steps (one drafting forward and one speculative step of 2n rows, the point k = 1 is
  // decided on, instead of n probes of n + 1 rows each)
  int batch_drafting_ = 0;        // drafting steps at n > 1: after every kBatchPlain-th, a plain one
  bool batch_plain_ = false;      // this step: every sequence plain
  bool batch_probe_ = false;      // this step: every sequence at k = 0 drafts 1
  bool drafted_by_choice_ = false;  // this step: a sequence at n > 1 chose to draft (not a probe)
  IdleProbe batch_idle_;
  bool after_idle_ = false;  // this step's draft caught up an idle stretch: its step is not timed
  bool probe_step_ = false;  // a sequence probes from k = 0 this step: its time only lowers V(R)
  // observations in the running means (plain and spec: over every n and R)
  int n_plain_ = 0, n_spec_ = 0, n_draft_ = 0, n_gap_ = 0, n_catch_ = 0;
  double s0_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;  // weighted sums of (rows, ms)
};

}  // namespace pyllm
