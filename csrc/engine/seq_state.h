// What a sequence's prompt cache is made of (llama-server's context checkpoints, host-RAM prompt
// cache and slot files, for hybrid models too):
//  - Checkpoint: the recurrent state at one position (plus the MTP drafter's pending hidden state
//    there). KV and the MTP layer's KV are cut back for free, so a prefix ending at a checkpoint is
//    recoverable: KV cut to pos, the recurrent state put back, only the rest evaluated.
//  - Checkpoints: a sequence's bounded list, thinned (the one whose loss widens the gaps least goes).
//  - SeqState: everything a sequence holds (tokens, KV, recurrent state, checkpoints, MTP KV), for
//    the RAM cache and slot files; write/read is the file format (header = the caller's JSON).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "memory/snapshot.h"

namespace pyllm {

struct Checkpoint {
  RSSnap rs;                 // rs.pos = the position
  std::vector<float> mtp_h;  // the drafter's pending_h at rs.pos (empty without MTP)
  int32_t pos() const { return rs.pos; }
  size_t bytes() const { return rs.bytes() + mtp_h.size() * sizeof(float); }
};

class Checkpoints {
 public:
  // Adds c (replacing one at the same position); keeps at most n_max, dropping the one whose removal
  // leaves the smallest gap (never c itself).
  void add(Checkpoint c, int n_max);
  // The checkpoint with the largest position in (0, n], or null.
  const Checkpoint* best(int32_t n) const;
  void drop_above(int32_t n);
  void clear() { list_.clear(); }
  int32_t last_pos() const { return list_.empty() ? 0 : list_.back().pos(); }
  bool empty() const { return list_.empty(); }
  size_t bytes() const;
  const std::vector<Checkpoint>& list() const { return list_; }
  std::vector<Checkpoint>& list() { return list_; }

 private:
  std::vector<Checkpoint> list_;  // ascending positions
};

struct SeqState {
  std::vector<int32_t> tokens;  // what the state holds, tokens.size() == kv.n
  KVSnap kv;
  RSSnap rs;
  bool has_mtp = false;
  KVSnap mtp_kv;
  std::vector<float> mtp_h;
  Checkpoints ckpts;
  size_t bytes() const;
  // Atomic: written to path + ".tmp", then renamed. header: the caller's identity record.
  void write(const std::string& path, const std::string& header) const;
  // Throws std::runtime_error naming the file on a bad magic, version or truncation.
  static SeqState read(const std::string& path, std::string* header);
};

}  // namespace pyllm
