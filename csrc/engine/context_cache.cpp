// Context's prompt cache: context checkpoints (where they are taken, how seq_begin restores one)
// and a sequence's whole state for the RAM cache and slot files. The data types are in seq_state.h.
//
// Where checkpoints go, in the prompt being evaluated (positions = tokens consumed):
//  - L-1, L the prompt's length: the same prompt again re-evaluates only its last token;
//  - hinted positions (message starts, from the chat layer): the last two always (the last user
//    turn and the assistant header), earlier ones at least min_step past the previous checkpoint;
//  - every min_step tokens past the previous checkpoint (0 = none of these), while generating too.
// A prefill chunk ends exactly at such a position (batch invariance makes the split invisible).
#include <algorithm>
#include <climits>
#include <stdexcept>

#include "engine/context.h"

namespace pyllm {

void Context::set_checkpoints(int n_max, int min_step) {
  if (n_max < 0) throw std::invalid_argument("ctx-checkpoints must be >= 0, got " + std::to_string(n_max));
  if (min_step < 0) throw std::invalid_argument("checkpoint-min-step must be non-negative, got " + std::to_string(min_step));
  ckpt_n_max_ = n_max;
  ckpt_min_step_ = min_step;
  for (auto& s : seqs_) {
    if (n_max == 0) s.ckpts.clear();
    while ((int)s.ckpts.list().size() > std::max(1, n_max)) s.ckpts.list().erase(s.ckpts.list().begin());
  }
}

void Context::seq_set_checkpoint_hints(int seq, std::vector<int32_t> pos) {
  check_seq(seq);
  std::sort(pos.begin(), pos.end());
  pos.erase(std::unique(pos.begin(), pos.end()), pos.end());
  seqs_[seq].ckpt_hints = std::move(pos);
}

std::vector<std::pair<int32_t, size_t>> Context::seq_checkpoints(int seq) const {
  check_seq(seq);
  std::vector<std::pair<int32_t, size_t>> out;
  for (const Checkpoint& c : seqs_[seq].ckpts.list()) out.push_back({c.pos(), c.bytes()});
  return out;
}

namespace {
// the position of the last checkpoint at or below p (0 when none)
int32_t last_at_or_below(const Checkpoints& c, int32_t p) {
  const Checkpoint* b = c.best(p);
  return b ? b->pos() : 0;
}
}  // namespace

bool Context::ckpt_wanted(const Seq& s, int32_t pos, bool prefill) const {
  const int32_t L = s.stats.n_prompt;
  const int32_t last = last_at_or_below(s.ckpts, pos - 1);
  const bool periodic = ckpt_min_step_ > 0 && pos >= last + ckpt_min_step_;
  if (!prefill) return periodic;
  if (pos <= 0 || pos >= L) return false;
  if (pos == L - 1 || periodic) return true;
  const auto& h = s.ckpt_hints;
  const auto it = std::find(h.begin(), h.end(), pos);
  if (it == h.end()) return false;
  const bool forced = h.end() - it <= 2;  // the last user turn and the assistant header
  return forced || s.ckpts.best(pos - 1) == nullptr || pos >= last + ckpt_min_step_;
}

int32_t Context::ckpt_split(const Seq& s, int32_t p0) const {
  const int32_t L = s.stats.n_prompt;
  int32_t best = INT32_MAX;
  if (L - 1 > p0) best = L - 1;
  const int32_t last = last_at_or_below(s.ckpts, p0);
  if (ckpt_min_step_ > 0 && last + ckpt_min_step_ > p0) best = std::min(best, last + ckpt_min_step_);
  for (int32_t h : s.ckpt_hints)
    if (h > p0 && h < best && ckpt_wanted(s, h, true)) { best = h; break; }
  return best;
}

void Context::ckpt_take(int seq) {
  Seq& s = seqs_[seq];
  Checkpoint c;
  c.rs = save_rs(*mem_, seq);
  if (drafter_) c.mtp_h = drafter_->get_pending(seq);
  s.ckpts.add(std::move(c), ckpt_n_max_);
}

int32_t Context::ckpt_restore(int seq, int32_t n) {
  Seq& s = seqs_[seq];
  if (ckpt_n_max_ <= 0) return 0;
  const Checkpoint* c = s.ckpts.best(std::min<int32_t>(n, mem_->seq_pos(seq)));
  if (!c) return 0;
  load_rs(*mem_, seq, c->rs);  // KV below c->pos stays: it is the prefix the state was computed on
  return c->pos();
}

namespace {
ggml_type cache_type(const std::string& name, const char* flag) {
  for (int t = 0; t < GGML_TYPE_COUNT; t++)
    if (type_id_valid(t) && name == type_name((ggml_type)t)) return (ggml_type)t;
  throw std::invalid_argument(std::string(flag) + ": unknown cache type '" + name + "'");
}
}  // namespace

void Context::set_cache_types(const std::string& k, const std::string& v, const std::string& draft_k, const std::string& draft_v) {
  for (int s = 0; s < n_seq(); s++)
    if (seqs_[s].active || mem_->seq_pos(s) > 0) throw std::invalid_argument("KV cache types can only be set before any sequence holds tokens");
  mem_->set_kv_types(cache_type(k, "--cache-type-k"), cache_type(v, "--cache-type-v"));
  if (drafter_) drafter_->memory().set_kv_types(cache_type(draft_k, "--spec-draft-type-k"), cache_type(draft_v, "--spec-draft-type-v"));
}

SeqState Context::seq_state_get(int seq) {
  check_seq(seq);
  const Seq& s = seqs_[seq];
  if (s.active) throw std::invalid_argument("sequence " + std::to_string(seq) + " is busy: its state can be taken only while idle");
  if (drafter_) {
    drafter_->flush_seq(seq);
    gstats_.n_mtp_rows = drafter_->n_rows();
  }
  SeqState st;
  const int32_t n = mem_->seq_pos(seq);
  st.tokens = s.cache;
  st.kv = save_kv(*mem_, seq, n);
  st.rs = save_rs(*mem_, seq);
  if (drafter_) {
    st.has_mtp = true;
    st.mtp_kv = save_kv(drafter_->memory(), seq, std::min(n, drafter_->memory().seq_pos(seq)));
    st.mtp_h = drafter_->get_pending(seq);
  }
  st.ckpts = s.ckpts;
  return st;
}

void Context::seq_state_set(int seq, const SeqState& st) {
  check_seq(seq);
  Seq& s = seqs_[seq];
  if (s.active) throw std::invalid_argument("sequence " + std::to_string(seq) + " is busy: a state can be restored only while idle");
  if ((int32_t)st.tokens.size() != st.kv.n || st.rs.pos != st.kv.n)
    throw std::invalid_argument("inconsistent state: " + std::to_string(st.tokens.size()) + " tokens, " + std::to_string(st.kv.n) +
                                " KV rows, recurrent state at " + std::to_string(st.rs.pos));
  for (int32_t t : st.tokens)
    if (t < 0 || t >= model_.n_vocab) throw std::invalid_argument("state holds token id " + std::to_string(t) + ", outside this model's vocabulary");
  check_shape(*mem_, &st.kv, &st.rs, "the saved");
  int32_t prev = 0;
  for (const Checkpoint& c : st.ckpts.list()) {
    check_shape(*mem_, nullptr, &c.rs, "a checkpoint's");
    if (c.pos() <= prev || c.pos() > st.kv.n) throw std::invalid_argument("state has a checkpoint at position " + std::to_string(c.pos()) + " out of order");
    prev = c.pos();
  }
  if (drafter_) {
    if (!st.has_mtp) throw std::invalid_argument("the state was saved without the MTP layer's memory, this server drafts with it (--spec-type draft-mtp)");
    if (st.mtp_kv.n != st.kv.n) throw std::invalid_argument("the state's MTP memory holds " + std::to_string(st.mtp_kv.n) + " positions, the target " + std::to_string(st.kv.n));
    check_shape(drafter_->memory(), &st.mtp_kv, nullptr, "the saved MTP");
    for (const Checkpoint& c : st.ckpts.list())
      if ((int64_t)c.mtp_h.size() != model_.n_embd) throw std::invalid_argument("a checkpoint of the state has no MTP hidden state");
  }
  // everything checked: nothing below throws for a shape reason
  load_kv(*mem_, seq, st.kv);
  load_rs(*mem_, seq, st.rs);
  if (drafter_) {
    drafter_->begin(seq, 0);
    load_kv(drafter_->memory(), seq, st.mtp_kv);
    drafter_->set_pending(seq, st.mtp_h);
  }
  s.cache = st.tokens;
  s.ckpts = st.ckpts;
  if (!drafter_)
    for (Checkpoint& c : s.ckpts.list()) c.mtp_h.clear();
  if (ckpt_n_max_ <= 0) s.ckpts.clear();
}

}  // namespace pyllm
