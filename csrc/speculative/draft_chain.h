// The drafters of one Context in llama.cpp's priority order (common_speculative_init /
// common_speculative_draft): ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod, ngram-cache, then
// draft-simple (-md), draft-mtp. Each step every generating sequence is offered to the drafters in that order; the
// first one that returns a non-empty draft wins the sequence for this step (later ones are not
// asked), and the draft is cut to the sequence's room. So with --spec-type draft-mtp,ngram-mod a
// step uses ngram-mod's draft whenever the history repeats (it costs no model, is often long and
// exact on edits) and the MTP draft otherwise; the MTP layer is then run only for the sequences the
// ngram drafters left without a draft. The MTP memory follows every kept row either way
// (MtpDrafter::catch_up). The winner is told how many of its tokens were accepted, the others that
// another drafter drafted (upstream's is_other).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "speculative/drafter.h"
#include "model/model.h"
#include "speculative/mtp_drafter.h"
#include "speculative/spec_params.h"

namespace pyllm {

// what one drafter did (llama.cpp's per-implementation statistics)
struct DrafterStats {
  std::string name;
  int64_t n_drafts = 0;        // drafts made (and verified)
  int64_t n_draft = 0;         // tokens drafted
  int64_t n_accepted = 0;      // tokens accepted
  int64_t n_drafts_accepted = 0;  // drafts with at least one token accepted
  std::vector<int64_t> n_accepted_per_pos;
  double t_draft_ms = 0;       // time spent drafting
};

// One ngram drafter by type name (ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod, ngram-cache);
// null for another name. Throws std::invalid_argument for a bad lookup cache file.
std::unique_ptr<Drafter> make_ngram_drafter(const std::string& type, const NgramParams& g, int n_seq, int64_t n_vocab);

class DraftChain {
 public:
  // mtp: the MTP drafter when draft-mtp is on (not owned), else null. Throws std::invalid_argument
  // for a bad lookup cache file or a draft model whose vocabulary differs from the target's.
  DraftChain(const SpecParams& spec, MtpDrafter* mtp, const Model& target, int n_seq, int n_ctx_seq);

  int n_max() const { return n_max_; }  // the longest draft of any drafter
  const std::vector<std::string>& names() const { return names_; }
  void begin(int seq, const std::vector<int32_t>& prompt, int n_same);
  // One draft per request (maybe empty); which[i]: the index of the drafter that made it, or -1.
  // Times each drafter into stats (the global ones: per-sequence counts are kept by the caller).
  std::vector<std::vector<int32_t>> draft(const std::vector<DraftRequest>& reqs, std::vector<int>& which);
  // seq's draft by drafter `who` had n_accepted tokens accepted
  void accept(int seq, int who, int n_accepted);
  double take_draft_ms(int who) { double t = t_ms_[who]; t_ms_[who] = 0; return t; }

 private:
  std::vector<std::unique_ptr<Drafter>> drafters_;
  std::vector<std::string> names_;
  std::vector<double> t_ms_;
  int n_max_ = 0;
};

}  // namespace pyllm
