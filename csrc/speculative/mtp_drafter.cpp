#include "speculative/mtp_drafter.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>

#include "sampling/token_sampler.h"
#include "speculative/accept.h"

namespace pyllm {

MtpDrafter::MtpDrafter(const Model& model, ThreadPool& tp, int n_seq, int n_ctx_seq, const SpecParams& spec)
    : model_(model), tp_(tp), spec_(spec) {
  if (!model.file_has_mtp())
    throw std::invalid_argument("--spec-type draft-mtp: the model '" + model.gguf().path() + "' has no MTP layers (nextn_predict_layers = 0 or no blk.N.nextn.* tensors)");
  if (!model.has_mtp()) throw std::invalid_argument("--spec-type draft-mtp: the model was loaded without its MTP layer (load_mtp=False)");
  mem_ = model.create_mtp_memory(n_seq, n_ctx_seq);
  pending_h_.assign((size_t)n_seq * model.n_embd, 0.f);
  kept_pos_.assign(n_seq, -1);
  kept_tok_.assign(n_seq, -1);
  backlog_.resize(n_seq);
  if (!spec.draft_head_type.empty() || spec.draft_vocab > 0)
    head_ = std::make_unique<DraftHead>(model, *model.mtp_head_weight(), tp, spec.draft_head_type, spec.draft_vocab);
}

int64_t MtpDrafter::forward_draft(Memory& mem, ForwardIn in, float* hidden, float* logits) const {
  in.hidden = hidden;
  if (!head_) {
    in.logits = logits;
    model_.forward_mtp(tp_, mem, in);
    compact_rows(hidden, in.out_rows, in.n_out);
    return model_.n_vocab;
  }
  const int n_out = in.n_out;
  in.logits = nullptr;  // the MTP block only (out rows' hidden states): the draft head makes the logits
  model_.forward_mtp(tp_, mem, in);
  compact_rows(hidden, in.out_rows, n_out);
  head_->logits(tp_, hidden, n_out, logits);
  return head_->size();
}

// hidden [n][n_embd] -> its out rows first, [n_out][n_embd] (ascending rows: each moves down or stays)
void MtpDrafter::compact_rows(float* hidden, const int32_t* rows, int n_out) const {
  const int64_t E = model_.n_embd;
  for (int i = 0; i < n_out; i++)
    if (rows[i] != i) std::copy(hidden + (size_t)rows[i] * E, hidden + (size_t)(rows[i] + 1) * E, hidden + (size_t)i * E);
}

double MtpDrafter::measure_step_ms(int reps) const {
  auto mem = model_.create_mtp_memory(1, 8);
  Batch b;
  b.add(0, 0, 0);
  std::vector<float> h(model_.n_embd, 0.f), hid(model_.n_embd), lg(head_size());
  int32_t row = 0;
  double best = 1e30;
  for (int r = 0; r <= reps; r++) {  // the first is a warm-up
    mem->seq_rm(0, 0);
    ForwardIn in = b.rows();
    in.embd_in = h.data(); in.out_rows = &row; in.n_out = 1;
    const auto t0 = std::chrono::steady_clock::now();
    forward_draft(*mem, in, hid.data(), lg.data());
    (void)argmax(lg.data(), head_size());
    if (r > 0) best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

void MtpDrafter::cut_backlog(int seq, int32_t p0) {
  Backlog& b = backlog_[seq];
  if (b.tok.empty()) return;
  const int keep = std::max(0, std::min((int)b.tok.size(), p0 - b.pos0));
  b.tok.resize(keep);
  b.h.resize((size_t)keep * model_.n_embd);
}

// seq's backlog rows onto batch_ / hin_ (KV only), the backlog emptied; returns the rows
int MtpDrafter::take_backlog(int seq) {
  Backlog& b = backlog_[seq];
  if (mem_->seq_pos(seq) != b.pos0)
    throw std::logic_error("MTP deferred catch-up of sequence " + std::to_string(seq) + " from position " + std::to_string(b.pos0) +
                           ": the MTP memory holds " + std::to_string(mem_->seq_pos(seq)) + " positions");
  const int n = (int)b.tok.size();
  for (int i = 0; i < n; i++) batch_.add(b.tok[i], b.pos0 + i, seq);
  hin_.insert(hin_.end(), b.h.begin(), b.h.end());
  b = Backlog{};
  return n;
}

void MtpDrafter::flush(const std::vector<int>& seqs) {
  batch_.clear(); hin_.clear();
  for (int s : seqs) take_backlog(s);
  if (batch_.n() == 0) return;
  ForwardIn in = batch_.rows();  // no outputs: only the KV is wanted
  in.embd_in = hin_.data();
  model_.forward_mtp(tp_, *mem_, in);
  n_rows_ += batch_.n();
}

void MtpDrafter::begin(int seq, int n_kept) {
  cut_backlog(seq, n_kept);
  mem_->seq_rm(seq, n_kept);
  kept_pos_[seq] = -1;
  if (n_kept == 0) std::fill_n(pending_h_.begin() + (size_t)seq * model_.n_embd, model_.n_embd, 0.f);
}

void MtpDrafter::set_pending(int seq, const std::vector<float>& h) {
  if ((int64_t)h.size() != model_.n_embd)
    throw std::invalid_argument("MTP state has a hidden state of " + std::to_string(h.size()) + " floats, the model " + std::to_string(model_.n_embd));
  std::copy(h.begin(), h.end(), pending_h_.begin() + (size_t)seq * model_.n_embd);
}

void MtpDrafter::rollback(int seq, int p0) {
  cut_backlog(seq, p0);
  mem_->seq_rm(seq, p0);
  if (kept_pos_[seq] >= p0) kept_pos_[seq] = -1;
}

// The MTP memory must end where the next row goes: a gap would attend over positions never written.
void MtpDrafter::check_length(int seq, int32_t pos, const char* what) const {
  if (held(seq) != pos)
    throw std::logic_error(std::string("MTP ") + what + " of sequence " + std::to_string(seq) + " at position " + std::to_string(pos) +
                           ": the MTP memory holds " + std::to_string(held(seq)) + " positions");
}

std::vector<std::vector<int32_t>> MtpDrafter::draft(const std::vector<Request>& reqs) {
  const int64_t E = model_.n_embd;
  std::vector<std::vector<int32_t>> result(reqs.size());
  std::vector<int> live, next_live;  // indices into reqs still drafting, one output row each
  const auto t0 = std::chrono::steady_clock::now();  // the deferred catch-up is part of the drafting cost
  // the first forward: each drafting sequence's deferred rows (KV only), then its drafting row, so the
  // catch-up of the rows the last step kept costs no MTP forward of its own (batch invariance: the same
  // bits as a catch-up forward before it)
  batch_.clear(); hin_.clear(); rows_.clear();
  for (size_t r = 0; r < reqs.size(); r++) {
    const Request& q = reqs[r];
    if (q.n_max <= 0) continue;
    check_length(q.seq, q.pos, "draft");
    if (!backlog_[q.seq].tok.empty()) {
      last_catch_up_.seqs++;
      last_catch_up_.rows += take_backlog(q.seq);
    }
    live.push_back((int)r);
    rows_.push_back(batch_.n());
    batch_.add(q.last, q.pos, q.seq);
    hin_.insert(hin_.end(), pending_h(q.seq), pending_h(q.seq) + E);
  }
  while (!live.empty()) {
    const int n = (int)live.size();
    const int64_t V = head_size();
    logits_.resize((size_t)n * V); hidden_.resize((size_t)batch_.n() * E);  // hidden: [rows][E], then [n][E]
    ForwardIn in = batch_.rows();
    in.embd_in = hin_.data(); in.out_rows = rows_.data(); in.n_out = n;
    forward_draft(*mem_, in, hidden_.data(), logits_.data());
    n_rows_ += batch_.n();
    n_forwards_++;
    next_live.clear(); next_.clear(); next_h_.clear();
    for (int i = 0; i < n; i++) {
      const float* lg = logits_.data() + (size_t)i * V;
      const Request& q = reqs[live[i]];
      // argmax (or a draw from the request's drafting chain), and the top-1 probability within the
      // softmax of the top-10 logits (upstream's p_min rule)
      int32_t best = head_ ? head_->id(argmax(lg, V)) : argmax(lg, V);
      if (q.sampler) {
        const float* full = lg;
        if (head_) {  // the chain runs over token ids: the rows the head does not draft over are -inf
          full_.assign(model_.n_vocab, -INFINITY);
          for (int64_t j = 0; j < V; j++) full_[head_->id(j)] = lg[j];
          full = full_.data();
        }
        q.sampler->draft_dist(full, (int)model_.n_vocab, dist_);
        best = draw_token(dist_, *q.rng);
      }
      if (q.p_min > 0) {
        top_.assign(lg, lg + V);
        const int k = (int)std::min<int64_t>(10, V);
        std::partial_sort(top_.begin(), top_.begin() + k, top_.end(), std::greater<float>());
        double sum = 0;
        for (int j = 0; j < k; j++) sum += std::exp((double)top_[j] - top_[0]);
        if ((float)(1.0 / sum) < q.p_min) continue;
      }
      auto& d = result[live[i]];
      d.push_back(best);
      if (q.sampler) q.dists->push_back(dist_);
      if ((int)d.size() >= q.n_max) continue;
      // the next depth pairs the drafted token with this row's own MTP output
      next_live.push_back(live[i]);
      next_.add(best, batch_.pos[rows_[i]] + 1, q.seq);
      next_h_.insert(next_h_.end(), hidden_.begin() + (size_t)i * E, hidden_.begin() + (size_t)(i + 1) * E);
    }
    live.swap(next_live); batch_.swap(next_); hin_.swap(next_h_);
    rows_.resize(live.size());
    for (size_t i = 0; i < rows_.size(); i++) rows_[i] = (int32_t)i;  // deeper forwards: one row each
  }
  t_draft_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  for (size_t r = 0; r < reqs.size(); r++) {
    const Request& q = reqs[r];
    if (q.n_max <= 0) continue;
    // keep the first row's KV (catch-up would compute the same); drop the rows paired with MTP h
    mem_->seq_rm(q.seq, q.pos + 1);
    kept_pos_[q.seq] = q.pos;
    kept_tok_[q.seq] = q.last;
    if ((int)result[r].size() < q.n_min) {
      result[r].clear();
      if (q.dists) q.dists->clear();
    }
  }
  return result;
}

void MtpDrafter::catch_up(const std::vector<Run>& runs) {
  const int64_t E = model_.n_embd;
  std::vector<int> due;  // rows computed now must come after the sequence's backlog
  for (const Run& r : runs)
    if (r.n > 0 && !r.defer && !backlog_[r.seq].tok.empty()) due.push_back(r.seq);
  flush(due);
  batch_.clear(); hin_.clear();
  std::vector<int> full;  // deferred backlogs that reached kMaxBacklog rows
  for (const Run& r : runs) {
    if (r.n <= 0) continue;
    int i0 = 0;
    if (kept_pos_[r.seq] >= 0) {
      // the drafting row paired (kept_tok_, pending_h) at kept_pos_: if it is this run's first row,
      // its KV is already the caught-up one
      if (r.pos0 == kept_pos_[r.seq] && r.tokens[0] == kept_tok_[r.seq]) i0 = 1;
      else mem_->seq_rm(r.seq, r.pos0);
      kept_pos_[r.seq] = -1;
    }
    check_length(r.seq, r.pos0 + i0, "catch-up");
    if (r.defer) {
      Backlog& b = backlog_[r.seq];
      if (b.tok.empty()) b.pos0 = r.pos0 + i0;
      for (int i = i0; i < r.n; i++) {
        b.tok.push_back(r.tokens[i]);
        const float* h = i == 0 ? pending_h(r.seq) : r.h + (size_t)(i - 1) * E;
        b.h.insert(b.h.end(), h, h + E);
      }
      if ((int)b.tok.size() >= kMaxBacklog) full.push_back(r.seq);
      continue;
    }
    for (int i = i0; i < r.n; i++) {
      batch_.add(r.tokens[i], r.pos0 + i, r.seq);
      const float* h = i == 0 ? pending_h(r.seq) : r.h + (size_t)(i - 1) * E;  // row p pairs with h_{p-1}
      hin_.insert(hin_.end(), h, h + E);
    }
  }
  if (batch_.n() > 0) {
    ForwardIn in = batch_.rows();  // no outputs: only the KV is wanted
    in.embd_in = hin_.data();
    model_.forward_mtp(tp_, *mem_, in);
    n_rows_ += batch_.n();
  }
  flush(full);
  for (const Run& r : runs)
    if (r.n > 0) std::copy(r.h + (size_t)(r.n - 1) * E, r.h + (size_t)r.n * E, pending_h_.begin() + (size_t)r.seq * E);
}

}  // namespace pyllm
