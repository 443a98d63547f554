// Model base: hyper-parameters from GGUF keys, weights as views into the mmap, and the forward
// entry point. One architecture per file (llama.cpp, gemma3.cpp, qwen35.cpp ...), registered by
// `general.architecture` in registry.cpp. A model returns logits and hidden states; it never samples.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cpu/matmul.h"
#include "cpu/threadpool.h"
#include "gguf/gguf.h"
#include "memory/anon_memory.h"
#include "memory/batch.h"
#include "memory/memory.h"

namespace pyllm {

class Tokenizer;

struct ModelError : std::runtime_error { using std::runtime_error::runtime_error; };

struct LoadOptions {
  bool load_mtp = false;
  Residency weights = Residency::Auto;  // --mmap / --no-mmap / neither (gguf/gguf.h)
  // --repack / --no-repack: matrices of the types with a 16-row group layout (ggml/repack.h) converted to it
  // at load, where the SIMD level has a group kernel (avx512, amx)
  bool repack = true;
};

class Model {
 public:
  virtual ~Model();
  static std::unique_ptr<Model> load(const std::string& path, const LoadOptions& opt);

  // Creates the memory a context needs for n_seq sequences of n_ctx_seq positions each.
  virtual std::unique_ptr<Memory> create_memory(int n_seq, int n_ctx_seq, int n_planes) const = 0;
  virtual void forward(ThreadPool& tp, Memory& mem, const ForwardIn& in) const = 0;

  // MTP (nextn) support: a separate memory (KV of the MTP layer only) and forward.
  virtual bool has_mtp() const { return false; }          // MTP layer loaded
  virtual bool file_has_mtp() const { return false; }     // the file carries one (blk.L.nextn.*)
  bool is_eog(int32_t id) const;
  std::string ftype_name() const;  // llama_ftype_name of general.file_type, e.g. "Q8_0"
  std::vector<int32_t> eog_ids;
  virtual std::unique_ptr<Memory> create_mtp_memory(int n_seq, int n_ctx_seq) const { (void)n_seq; (void)n_ctx_seq; return nullptr; }
  // Only in.out_rows get outputs (hidden at their rows of in.hidden, logits when in.logits is set): every other
  // row only writes its K/V, since nothing reads its output (catch-up rows)
  virtual void forward_mtp(ThreadPool& tp, Memory& mem, const ForwardIn& in) const { (void)tp; (void)mem; (void)in; }
  // the matrix forward_mtp's logits come from (the cheap draft head copies its rows), null without MTP
  virtual const Weight* mtp_head_weight() const { return nullptr; }

  const GGUFFile& gguf() const { return *file_; }
  const std::string& arch() const { return arch_; }
  const Tokenizer* tokenizer() const { return tok_.get(); }

  int64_t n_vocab = 0, n_embd = 0, n_layer = 0, n_ctx_train = 0;
  bool recurrent = false;  // has layers whose state cannot drop arbitrary positions
  std::string desc;
  size_t size_bytes = 0;
  int64_t n_params = 0;
  // load-time conversions: matrices put into 16-row groups, their bytes, and how many of those bytes are a
  // copy in anonymous memory (a mapped file; read into memory, the groups replace the file's bytes in place)
  int n_grouped() const { return n_grouped_; }
  size_t grouped_bytes() const { return grouped_bytes_; }
  size_t grouped_copied_bytes() const { return grouped_copied_bytes_; }

 protected:
  void init_common(std::unique_ptr<GGUFFile> file, const LoadOptions& opt);
  // Weight lookup with shape validation; optional returns an invalid Weight when absent.
  Weight tensor(const std::string& name, std::vector<int64_t> shape, bool required = true) const;
  Weight tensor_any(const std::string& name, bool required = true) const;
  std::vector<float> vec(const std::string& name, int64_t n, bool required = true) const;  // small F32 vectors
  std::string key(const std::string& suffix) const { return arch_ + "." + suffix; }
  int64_t hp_int(const std::string& suffix, int64_t def, bool required = false) const;
  double hp_float(const std::string& suffix, double def, bool required = false) const;
  std::vector<int64_t> hp_int_arr(const std::string& suffix, int64_t n, int64_t def) const;  // scalar or per-layer

  std::unique_ptr<GGUFFile> file_;
  std::string arch_;
  std::shared_ptr<Tokenizer> tok_;  // shared_ptr: the type stays incomplete here
  bool repack_ = true;
  // grouped matrices by name (a second lookup of a tensor, e.g. a tied output, must not convert it again)
  // and the anonymous memory of those copied out of a mapped file
  mutable std::map<std::string, Weight> grouped_;
  mutable std::vector<AnonBuffer> owned_;
  mutable int n_grouped_ = 0;
  mutable size_t grouped_bytes_ = 0, grouped_copied_bytes_ = 0;
};

using ModelBuilder = std::function<std::unique_ptr<Model>(std::unique_ptr<GGUFFile>, const LoadOptions&)>;
// registry.cpp: arch name -> builder
const std::map<std::string, ModelBuilder>& model_registry();

// Shared layer helpers ------------------------------------------------------------------------

// Scratch buffers reused across calls (grow-only), one set per forward.
struct Scratch {
  std::vector<float> a, a2, b, c, d, e, f, g;
  static float* ensure(std::vector<float>& v, size_t n) { if (v.size() < n) v.resize(n); return v.data(); }
};

// After a forward: record each sequence's new length (and recurrent planes).
void commit_runs(Memory& mem, const ForwardIn& in);

// Logits of the selected rows: out[i] = W_out . h[out_rows[i]]
void compute_logits(ThreadPool& tp, const Weight& output, const float* h, int64_t n_embd, const ForwardIn& in);

}  // namespace pyllm
