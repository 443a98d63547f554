#include "speculative/draft_head.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <stdexcept>

#include "ggml/quants_lanes.h"

namespace pyllm {

namespace {
std::string lower(std::string s) {
  for (char& c : s) c = (char)std::tolower((unsigned char)c);
  return s;
}

std::string mib(size_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", b / 1048576.0);
  return buf;
}

// rows ids[0..n) of head, converted to type t, into dst (n rows of row_size(t, E) bytes)
void convert_rows(ThreadPool& tp, const Weight& head, const std::vector<int32_t>& ids, ggml_type t, uint8_t* dst) {
  const int64_t E = head.ne[0];
  const size_t rb = row_size(t, E);
  if (t == head.type) {  // same type: the bytes as they are
    for (size_t r = 0; r < ids.size(); r++) copy_row(head, ids[r], dst + r * rb);
    return;
  }
  tp.parallel_for((int64_t)ids.size(), [&](int64_t r0, int64_t r1) {
    std::vector<float> row(E);
    for (int64_t r = r0; r < r1; r++) {
      get_row(head, ids[r], row.data());
      quantize_row_lanes(t, row.data(), dst + (size_t)r * rb, E);
    }
  }, 64);
}

Weight owned_weight(const std::string& name, ggml_type t, int64_t E, int64_t n, const uint8_t* data) {
  Weight w;
  w.name = name; w.type = t; w.ne[0] = E; w.ne[1] = n; w.data = data;
  w.nb1 = row_size(t, E); w.nb2 = w.nb1 * n;
  return w;
}
}  // namespace

ggml_type draft_head_type(const std::string& name) {
  const std::string want = lower(name);
  for (int id = 0; id < GGML_TYPE_COUNT; id++) {
    if (!type_id_valid(id) || lower(type_name((ggml_type)id)) != want) continue;
    if (!get_type_traits((ggml_type)id).compute)
      throw std::invalid_argument("--spec-draft-head-type: type '" + name + "' cannot be used as a weight");
    return (ggml_type)id;
  }
  throw std::invalid_argument("--spec-draft-head-type: unknown type '" + name + "' (e.g. q4_0, iq4_xs, q8_0)");
}

DraftHead::DraftHead(const Model& model, const Weight& head, ThreadPool& tp, const std::string& type, int n_vocab) {
  const int64_t E = head.ne[0], V = std::min<int64_t>(head.ne[1], model.n_vocab);
  const ggml_type t = type.empty() ? head.type : draft_head_type(type);
  if (E % get_type_traits(t).blck_size)
    throw std::invalid_argument("--spec-draft-head-type " + type + ": n_embd " + std::to_string(E) +
                                " is not a multiple of its block size " + std::to_string(get_type_traits(t).blck_size));
  n_main_ = n_vocab > 0 ? std::min<int64_t>(n_vocab, V) : V;
  for (int32_t id : model.eog_ids)
    if (id >= n_main_ && id < V && std::find(extra_ids_.begin(), extra_ids_.end(), id) == extra_ids_.end()) extra_ids_.push_back(id);
  const size_t rb = row_size(t, E);
  if (t == head.type) {
    main_ = head.rows(0, n_main_);  // a view: the low ids are a prefix of the matrix
  } else {
    std::vector<int32_t> ids(n_main_);
    for (int64_t i = 0; i < n_main_; i++) ids[i] = (int32_t)i;
    owned_ = AnonBuffer((size_t)n_main_ * rb);  // memory/anon_memory.h, as the model's streamed weights
    if (!owned_)
      throw std::runtime_error("--spec-draft-head-type " + type + ": cannot allocate " + mib((size_t)n_main_ * rb) +
                               " for the draft head's rows");
    convert_rows(tp, head, ids, t, owned_.data());
    main_ = owned_weight(head.name + ".draft", t, E, n_main_, owned_.data());
  }
  if (!extra_ids_.empty()) {
    extra_buf_.resize(extra_ids_.size() * rb);
    convert_rows(tp, head, extra_ids_, t, extra_buf_.data());
    extra_ = owned_weight(head.name + ".draft_eog", t, E, (int64_t)extra_ids_.size(), extra_buf_.data());
  }
  desc_ = "draft head: " + std::string(type_name(t)) + " rows of '" + head.name + "' (" + type_name(head.type) + "), " +
          std::to_string(size()) + " of " + std::to_string(V) + " ids (" + std::to_string(n_main_) + " lowest + " +
          std::to_string(extra_ids_.size()) + " end-of-generation), " + mib((size_t)size() * rb) + " read per draft row vs " +
          mib((size_t)V * head.nb1) + ", " + mib(bytes()) + " extra memory";
}

void DraftHead::logits(ThreadPool& tp, const float* h, int n, float* out) const {
  const int64_t E = main_.ne[0], ld = size();
  matmul(tp, main_, h, E, n, out, ld);
  if (extra_.valid()) matmul(tp, extra_, h, E, n, out + n_main_, ld);
}

}  // namespace pyllm
