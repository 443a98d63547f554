#include "speculative/adaptive.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

namespace pyllm {

namespace {
constexpr double kPrior = 0.6;      // conditional acceptance assumed before anything is measured
// weight of a sequence's newest outcome: at 0.15 two rejections in a row took the 12M trained model's code
// task (true rate 0.65, break-even near 0.5) below break-even: one run left 4 of the 5 tasks mostly at k = 0
constexpr double kSeqAlpha = 0.08;
constexpr double kGlobalAlpha = 0.05;
constexpr double kMeanPrior = 8;  // weight of the context's rate at begin() in a request's mean (in outcomes)
constexpr double kIdleRelax = 0.1;  // per step at k = 0: the pull of a sequence's rates to the context's (alone: its request's mean)
constexpr double kDecay = 0.95;     // per step, for the cost fit (about the last 20 steps)
// running means of the plain step and the drafting forward: the mean of the first observations (the
// start-up value is only used until the first one: on a busy machine it can be off by 2x or more), then
// an exponential mean of this weight
constexpr double kMeanAlpha = 0.1;
void running_mean(double& mean, int& n, double x) { mean += std::max(kMeanAlpha, 1.0 / ++n) * (x - mean); }
constexpr double kBatchPlainAlpha = 0.25;  // weight of a batch's plain step taken among drafting ones
// beside others drafting must look this much better than plain: P(n) and V(2n) are timed in different steps
// (P only when nobody drafts), and this host's drift between them (+-20 % on the 12M model's 2 ms steps)
// flipped 4 of its sequences into drafting where k = 1 ran at 0.92 of plain
constexpr double kBatchMargin = 1.1;
constexpr int kPlainSeen = 3;  // plain steps timed before a drafting sequence stops taking every other one
// a timing above kOutlier x what the model predicts counts as kOutlier x: a 2-core machine now and then stalls
// a 0.7 ms step for 4 ms, which moved the base cost of the fit (about the last 20 steps) by a third
constexpr double kOutlier = 1.5;
double cap_stall(double ms, double predicted) { return predicted > 0 ? std::min(ms, kOutlier * predicted) : ms; }

// mean[i] where timed (seen[i] > 0), else the nearest timed index (below first: the extrapolation adds
// rows) plus `per` per index between them (at least half of it), else `fallback`
double nearest_timed(const std::vector<double>& mean, const std::vector<int>& seen, int i, double per, double fallback) {
  if (seen[i] > 0) return mean[i];
  for (int d = 1; d < (int)mean.size(); d++)
    for (int m : {i - d, i + d})
      if (m >= 1 && m < (int)mean.size() && seen[m] > 0) return std::max(0.5 * mean[m], mean[m] + per * (i - m));
  return fallback;
}
constexpr int kColdSteps = 2;  // the first steps of a request, timed like a probe's
constexpr double kFar = 0.9;    // a probe one longer that looks this far below the choice is taken less often

double forward_ms(const Model& model, ThreadPool& tp, Memory& mem, int n, bool snapshot = true) {
  std::vector<int32_t> tok(n, 0), pos(n), seq(n, 0), rows(n);
  for (int i = 0; i < n; i++) pos[i] = rows[i] = i;
  std::vector<float> logits((size_t)n * model.n_vocab), hidden((size_t)n * model.n_embd);
  ForwardIn in;
  in.n = n; in.tokens = tok.data(); in.pos = pos.data(); in.seq = seq.data();
  in.out_rows = rows.data(); in.n_out = n; in.logits = logits.data(); in.hidden = hidden.data();
  in.snapshot = snapshot;
  mem.seq_rm(0, 0);
  const auto t0 = std::chrono::steady_clock::now();
  model.forward(tp, mem, in);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

DraftCosts measure_verify_ms(const Model& model, ThreadPool& tp, int n_rows, int reps) {
  n_rows = std::max(3, n_rows);  // two speculative points: the slope without the snapshots' fixed cost
  auto mem = model.create_memory(1, std::max(16, 2 * n_rows), n_rows);
  double t1 = 1e30, t2 = 1e30, tn = 1e30;
  forward_ms(model, tp, *mem, n_rows);  // warm-up: first-touch of the scratch buffers and the weights
  for (int r = 0; r < reps; r++) {
    t1 = std::min(t1, forward_ms(model, tp, *mem, 1, false));
    t2 = std::min(t2, forward_ms(model, tp, *mem, 2));
    tn = std::min(tn, forward_ms(model, tp, *mem, n_rows));
  }
  DraftCosts c;
  c.verify_row_ms = std::max(0.0, (tn - t2) / (n_rows - 2));
  c.verify_base_ms = std::max(0.0, t2 - 2 * c.verify_row_ms);
  c.plain_ms = t1;
  return c;
}

AdaptiveDraftLength::AdaptiveDraftLength(int n_seq, int cap, const DraftCosts& start)
    : cap_(cap), costs_(start), rate_(n_seq, std::vector<double>(cap, kPrior)),
      mean_(n_seq, std::vector<Mean>(cap, Mean{0.0, 0.0, kPrior})), global_(cap, kPrior), steps_(n_seq, 0),
      idle_(n_seq),
      plain_(n_seq + 1, 0.0), n_plain_at_(n_seq + 1, 0), spec_((size_t)n_seq * (cap + 1) + 1, 0.0),
      n_spec_at_((size_t)n_seq * (cap + 1) + 1, 0) {
  if (cap < 1 || n_seq < 1)
    throw std::invalid_argument("adaptive draft length: cap " + std::to_string(cap) + " and sequences " +
                                std::to_string(n_seq) + " must be >= 1");
  if (costs_.plain_ms <= 0) costs_.plain_ms = costs_.verify_base_ms + costs_.verify_row_ms;
  plain_[1] = costs_.plain_ms;  // the start-up value, until the first 1-sequence plain step is timed
  // the start-up measurement as two weighted observations (rows 2 and cap+1) the running fit starts from
  for (int rows : {2, cap + 1}) {
    const double y = start.verify_base_ms + start.verify_row_ms * rows, w = 1.0;
    s0_ += w; sx_ += w * rows; sy_ += w * y; sxx_ += w * rows * rows; sxy_ += w * rows * y;
  }
}

void AdaptiveDraftLength::check(int seq) const {
  if (seq < 0 || seq >= (int)rate_.size())
    throw std::out_of_range("adaptive draft length: sequence " + std::to_string(seq) + " out of range");
}

void AdaptiveDraftLength::begin(int seq) {
  check(seq);
  rate_[seq] = global_;
  for (int i = 0; i < cap_; i++) mean_[seq][i] = Mean{0.0, 0.0, global_[i]};
  steps_[seq] = 0;
  idle_[seq] = IdleProbe{idle_global_.wait, idle_global_.left, 0};
}

double AdaptiveDraftLength::plain_cost(int n) const {
  n = std::clamp(n, 1, (int)plain_.size() - 1);
  // else the start-up 1-row value
  return nearest_timed(plain_, n_plain_at_, n, costs_.verify_row_ms, plain_[1] + costs_.verify_row_ms * (n - 1));
}

double AdaptiveDraftLength::spec_cost(int rows) const {
  // measured where measured: a line through the steps of the last ~20 steps puts the working point off by
  // 5-10% on a small model (few row counts, one of them seen once in 16 steps), as much as drafting gains there
  rows = std::clamp(rows, 1, (int)spec_.size() - 1);
  return nearest_timed(spec_, n_spec_at_, rows, costs_.verify_row_ms,
                       costs_.verify_base_ms + costs_.verify_row_ms * rows);
}

double AdaptiveDraftLength::expected_rate(int seq, int k, int n) const {
  double e = 1.0, p = 1.0;
  for (int i = 0; i < k; i++) { p *= rate_[seq][i]; e += p; }
  const double t = k == 0 ? (costs_.overhead_ms + plain_cost(n)) / n + costs_.catch_up_row_ms
                          : (costs_.overhead_ms + spec_cost(n * (k + 1))) / n + costs_.draft_ms * k / n;
  return e / std::max(t, 1e-6);
}

int AdaptiveDraftLength::choose(int seq, int n_generating) {
  check(seq);
  const int n = std::max(1, n_generating);
  int best = 0;
  double best_rate = expected_rate(seq, 0, n) * (n > 1 ? kBatchMargin : 1.0);
  for (int k = 1; k <= cap_; k++) {
    const double r = expected_rate(seq, k, n);
    if (r > best_rate) { best = k; best_rate = r; }
  }
  const int step = ++steps_[seq];
  // the first steps after a prompt run on caches it left cold: timed like a probe's
  if (step <= kColdSteps) probe_step_ = true;
  if (n > 1 && batch_plain_) return 0;
  if (best == 0) {
    // plain decoding wins: a 1-token probe now and then (each costs a draft, the deferred catch-up and
    // a speculative step), less often each time it confirms k = 0
    // its own rates learn nothing while it does not draft: they drift back to the context's beside other
    // sequences, so one that a short run of rejections took to 0 drafts again where the others' drafts
    // pay; alone, to its request's mean (a run of 4 rejections at a true 0.65 took the 12M model's running
    // rate below break-even, 0.48 at -t 2, and the sequence then sat at 0 until its probe, 32 steps of a
    // 128-token request where drafting paid 15 %; the context's rates start from other requests' record,
    // and drew a task where drafting lost back to drafting)
    for (int i = 0; i < cap_; i++) {
      const Mean& m = mean_[seq][i];
      const double to = n > 1 ? global_[i] : (m.hits + kMeanPrior * m.prior) / (m.tries + kMeanPrior);
      rate_[seq][i] += kIdleRelax * (to - rate_[seq][i]);
    }
    // beside others the batch probes (observe_step sets batch_probe_)
    if (n > 1) {
      if (batch_probe_ || (n_spec_ < kPlainSeen && step % 2 == 1)) { probe_step_ = true; return 1; }
      return 0;
    }
    // a probe is a few 1-token steps: one step's rate says little, and the first step's costs are not a
    // drafting run's (cold caches, the catch-up)
    IdleProbe& idle = idle_[seq];
    if (idle.take_burst()) { probe_step_ = true; return 1; }
    // likewise speculative steps: until a few were timed, every other step is one (a start-up forward
    // timed on a busy machine put a 2-row step at 1.2 ms where it costs 0.55 and kept auto plain)
    if (n_spec_ < kPlainSeen && step % 2 == 1) return 1;
    const bool probe = idle.count_down();
    idle_global_.left = idle.left;
    if (!probe) return 0;
    idle_global_.wait = idle.wait;
    probe_step_ = true;
    return 1;
  }
  idle_[seq].reset();
  idle_global_.reset();
  if (n > 1 && !batch_probe_) drafted_by_choice_ = true;
  // plain steps are measured only when taken: until a few were, every other step is one, so a start-up
  // value that is too high (a busy machine) cannot keep the sequence drafting where drafting loses
  if (n_plain_ < kPlainSeen && step % 2 == 0) return 0;
  if (step % kProbe == 0) {
    // a probe: one longer keeps the next position's rate measured; every other probe goes one shorter
    // (or at the cap) so the cost fit sees row counts on both sides of the working point. One shorter
    // than 1 is a plain step, which only re-times P: every kPlainProbe-th probe (every other one cost the
    // 12M model 1-2 % where k = 1 beat plain by 15 %, and the cap-1 setting every 8th step)
    // One longer when that looks well below the choice (under kFar of its rate): only every 4th time (on
    // the 12M model at -t 2, k = 2 is about a fifth slower per token than k = 1)
    const int nth = step / kProbe;
    const bool down = best == cap_ || nth % 2 == 0;
    if (down && best == 1 && nth % kPlainProbe != 0) return best;
    if (!down && nth % kPlainProbe != 1 && expected_rate(seq, best + 1, n) < kFar * best_rate) return best;
    best += down ? -1 : 1;
  }
  return best;
}

void AdaptiveDraftLength::observe_accept(int seq, int n_drafted, int n_accepted, bool own) {
  check(seq);
  // positions 1..a were accepted; a+1 (if drafted) was the first rejection; later ones were not tried
  for (int i = 0; i < n_drafted && i <= n_accepted && i < cap_; i++) {
    const double x = i < n_accepted ? 1.0 : 0.0;
    if (own) {
      rate_[seq][i] += kSeqAlpha * (x - rate_[seq][i]);
      mean_[seq][i].hits += x;
      mean_[seq][i].tries += 1;
    }
    global_[i] += kGlobalAlpha * (x - global_[i]);
  }
}

bool AdaptiveDraftLength::IdleProbe::count_down() {
  if (--left > 0) return false;
  wait = left = std::min(2 * wait, (int)kIdleProbeMax);
  burst = kProbeBurst - 1;
  return true;
}

void AdaptiveDraftLength::batch_next(int rows, int n_seqs) {
  const bool by_choice = drafted_by_choice_;
  drafted_by_choice_ = batch_plain_ = batch_probe_ = false;
  if (n_seqs <= 1) return;
  if (by_choice) batch_idle_.reset();  // drafting pays for someone: the batch's idle wait starts over
  if (batch_idle_.take_burst()) { batch_probe_ = true; return; }
  if (rows > n_seqs) {
    batch_plain_ = ++batch_drafting_ % kBatchPlain == 0;
    return;
  }
  batch_probe_ = batch_idle_.count_down();
}

void AdaptiveDraftLength::observe_step(int rows, int n_seqs, double ms) {
  const bool after_idle = after_idle_, probe = probe_step_, batch_plain = batch_plain_;
  after_idle_ = probe_step_ = false;
  batch_next(rows, n_seqs);
  if (rows <= n_seqs) {  // nobody drafted: a plain step of n_seqs rows
    const int n = std::clamp(n_seqs, 1, (int)plain_.size() - 1);
    n_plain_++;
    if (n_plain_at_[n] >= kPlainSeen) ms = cap_stall(ms, plain_[n]);
    // a batch's plain step among drafting ones is rare (1 in kBatchPlain): it weighs more
    if (batch_plain && n_plain_at_[n] >= kPlainSeen) plain_[n] += kBatchPlainAlpha * (ms - plain_[n]);
    else running_mean(plain_[n], n_plain_at_[n], ms);
    if (n == 1) costs_.plain_ms = plain_[1];
    return;
  }
  if (after_idle) return;
  ms = cap_stall(ms, spec_cost(rows));
  // a probe's steps follow a stretch of plain steps, and on the 12M model they cost ~10% more than a
  // drafting run's (caches), which held auto plain where n_max 1 paid: they only lower a cost measured
  // (a machine got faster), raising it is left to drafting runs
  if (rows < (int)spec_.size() && (!probe || n_spec_at_[rows] == 0 || ms < spec_[rows]))
    running_mean(spec_[rows], n_spec_at_[rows], ms);
  n_spec_++;
  if (probe) return;
  s0_ *= kDecay; sx_ *= kDecay; sy_ *= kDecay; sxx_ *= kDecay; sxy_ *= kDecay;
  s0_ += 1; sx_ += rows; sy_ += ms; sxx_ += (double)rows * rows; sxy_ += rows * ms;
  const double var = s0_ * sxx_ - sx_ * sx_;
  // too little spread in the row counts seen lately: keep the slope, refit the base only
  if (var > 1e-3 * s0_ * s0_) costs_.verify_row_ms = std::max(0.0, (s0_ * sxy_ - sx_ * sy_) / var);
  costs_.verify_base_ms = std::max(0.0, (sy_ - costs_.verify_row_ms * sx_) / s0_);
}

void AdaptiveDraftLength::observe_draft(int forwards, double ms, int seqs, int caught_up) {
  // more than one step's rows per sequence caught up (an idle stretch): the probe's cost, not D; and its
  // verification, the first after the stretch, runs on cold caches (on the 12M model its 2-row step cost
  // 10-15% over a drafting run's, which kept the translate task plain where n_max 1 paid)
  after_idle_ = forwards > 0 && caught_up > std::max(1, seqs) * (cap_ + 1);
  if (after_idle_ && n_draft_ > 0)  // the rows the idle stretch deferred: all but the drafting forwards
    running_mean(costs_.catch_up_row_ms, n_catch_, std::max(0.0, ms - forwards * costs_.draft_ms) / caught_up);
  if (forwards <= 0 || after_idle_) return;
  double per = ms / forwards;
  if (n_draft_ >= kPlainSeen) per = cap_stall(per, costs_.draft_ms);
  running_mean(costs_.draft_ms, n_draft_, per);
}

void AdaptiveDraftLength::observe_gap(int n_seqs, double ms) {
  // at most a plain step: a longer gap is the caller doing something else (a new request, a pause)
  ms = std::clamp(ms, 0.0, plain_cost(n_seqs));
  running_mean(costs_.overhead_ms, n_gap_, ms);
}

}  // namespace pyllm
