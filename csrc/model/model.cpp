#include "model/model.h"

#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace pyllm {

Model::~Model() = default;

static std::string shape_str(const int64_t* ne, int n) {
  std::ostringstream os; os << "[";
  for (int i = 0; i < n; i++) os << (i ? ", " : "") << ne[i];
  os << "]"; return os.str();
}

std::unique_ptr<Model> Model::load(const std::string& path, const LoadOptions& opt) {
  auto file = std::make_unique<GGUFFile>(path, opt.weights);
  std::string arch = file->get_str("general.architecture", "");
  if (arch.empty()) throw ModelError("GGUF file '" + path + "': general.architecture is missing");
  auto& reg = model_registry();
  auto it = reg.find(arch);
  if (it == reg.end()) {
    std::string known;
    for (auto& kv : reg) known += (known.empty() ? "" : ", ") + kv.first;
    throw ModelError("GGUF file '" + path + "': unknown model architecture '" + arch + "' (supported: " + known + ")");
  }
  return it->second(std::move(file), opt);
}

void Model::init_common(std::unique_ptr<GGUFFile> file, const LoadOptions& opt) {
  file_ = std::move(file);
  repack_ = opt.repack;
  arch_ = file_->get_str("general.architecture", "");
  n_embd = hp_int("embedding_length", 0, true);
  n_layer = hp_int("block_count", 0, true);
  n_ctx_train = hp_int("context_length", 2048);
  size_bytes = 0; n_params = 0;
  for (auto& t : file_->tensors()) { size_bytes += t.nbytes; n_params += t.nelements(); }
  const GGUFTensor* te = file_->find_tensor("token_embd.weight");
  if (!te) throw ModelError("GGUF file '" + file_->path() + "': missing tensor 'token_embd.weight'");
  n_vocab = te->ne[1];
  desc = arch_ + " " + file_->get_str("general.size_label", "?");
  tok_ = std::shared_ptr<Tokenizer>(Tokenizer::from_gguf(*file_));
  for (int32_t id : tok_->eog_ids()) eog_ids.push_back(id);
}

std::string Model::ftype_name() const {
  static const std::map<int64_t, const char*> names = {
      {0, "all F32"}, {1, "F16"}, {2, "Q4_0"}, {3, "Q4_1"}, {7, "Q8_0"}, {8, "Q5_0"}, {9, "Q5_1"}, {10, "Q2_K - Medium"},
      {11, "Q3_K - Small"}, {12, "Q3_K - Medium"}, {13, "Q3_K - Large"}, {14, "Q4_K - Small"}, {15, "Q4_K - Medium"},
      {16, "Q5_K - Small"}, {17, "Q5_K - Medium"}, {18, "Q6_K"}, {25, "IQ4_NL - 4.5 bpw"}, {30, "IQ4_XS - 4.25 bpw"},
      {32, "BF16"}};
  auto it = names.find(file_->get_int("general.file_type", -1));
  return it == names.end() ? "unknown, may not work" : it->second;
}

bool Model::is_eog(int32_t id) const { return std::find(eog_ids.begin(), eog_ids.end(), id) != eog_ids.end(); }

int64_t Model::hp_int(const std::string& suffix, int64_t def, bool required) const {
  if (required && !file_->has(key(suffix))) throw ModelError("GGUF file '" + file_->path() + "': required key '" + key(suffix) + "' is missing");
  const GGUFValue* v = file_->find(key(suffix));
  if (v && v->type == GGUF_TYPE_ARRAY) return v->arr_n ? v->arr_i(0) : def;
  return file_->get_int(key(suffix), def);
}

double Model::hp_float(const std::string& suffix, double def, bool required) const {
  if (required && !file_->has(key(suffix))) throw ModelError("GGUF file '" + file_->path() + "': required key '" + key(suffix) + "' is missing");
  return file_->get_float(key(suffix), def);
}

std::vector<int64_t> Model::hp_int_arr(const std::string& suffix, int64_t n, int64_t def) const {
  std::vector<int64_t> out(n, def);
  const GGUFValue* v = file_->find(key(suffix));
  if (!v) return out;
  if (v->type == GGUF_TYPE_ARRAY) {
    if ((int64_t)v->arr_n < n) throw ModelError("GGUF file '" + file_->path() + "': key '" + key(suffix) + "' has " + std::to_string(v->arr_n) + " entries, expected " + std::to_string(n));
    for (int64_t i = 0; i < n; i++) out[i] = v->arr_i(i);
  } else {
    for (auto& x : out) x = v->i;
  }
  return out;
}

Weight Model::tensor_any(const std::string& name, bool required) const {
  const GGUFTensor* t = file_->find_tensor(name);
  Weight w;
  if (!t) {
    if (required) throw ModelError("GGUF file '" + file_->path() + "': missing tensor '" + name + "'");
    return w;
  }
  const auto& tr = get_type_traits(t->type);
  if (!tr.compute) {
    throw ModelError("GGUF file '" + file_->path() + "': tensor '" + name + "' has type " + tr.name +
                     ", which pyllm does not support yet");
  }
  w.name = name; w.type = t->type; w.data = t->data;
  for (int i = 0; i < 4; i++) w.ne[i] = t->ne[i];
  w.nb1 = row_size(t->type, t->ne[0]);
  w.nb2 = w.nb1 * t->ne[1];
  // a fused gate_up expert matrix is sliced at its middle row (cpu/moe.cpp), which must start a group
  const bool sliced = name.find("gate_up") != std::string::npos && w.ne[1] % (2 * 16);
  if (!repack_ || sliced || !can_group(w)) return w;
  auto it = grouped_.find(name);
  if (it != grouped_.end()) return it->second;
  uint8_t* dst = file_->writable(*t);  // in place when the file was read into memory
  if (!dst) {  // a mapped file: the groups go to anonymous memory, the file's pages stay evictable
    AnonBuffer m(t->nbytes);  // huge pages (memory/anon_memory.h): the kernels stream these
    if (!m) throw ModelError("GGUF file '" + file_->path() + "': cannot allocate " + std::to_string(t->nbytes) + " bytes to put tensor '" + name + "' into 16-row groups (--no-repack keeps the file's layout)");
    dst = m.data();
    owned_.push_back(std::move(m));
    grouped_copied_bytes_ += t->nbytes;
  }
  group_rows(w, dst);
  n_grouped_++;
  grouped_bytes_ += t->nbytes;
  grouped_[name] = w;
  return w;
}

Weight Model::tensor(const std::string& name, std::vector<int64_t> shape, bool required) const {
  Weight w = tensor_any(name, required);
  if (!w.valid()) return w;
  const GGUFTensor* t = file_->find_tensor(name);
  bool ok = (int)shape.size() >= t->n_dims;
  int64_t want[4] = {1, 1, 1, 1};
  for (size_t i = 0; i < shape.size() && i < 4; i++) want[i] = shape[i];
  for (int i = 0; i < 4; i++) ok = ok && want[i] == t->ne[i];
  if (!ok) {
    throw ModelError("GGUF file '" + file_->path() + "': tensor '" + name + "' has shape " + shape_str(t->ne, t->n_dims) +
                     ", expected " + shape_str(shape.data(), (int)shape.size()));
  }
  return w;
}

std::vector<float> Model::vec(const std::string& name, int64_t n, bool required) const {
  Weight w = tensor(name, {n}, required);
  std::vector<float> out;
  if (!w.valid()) return out;
  out.resize(n);
  get_type_traits(w.type).to_float(w.data, out.data(), n);
  return out;
}

void commit_runs(Memory& mem, const ForwardIn& in) {
  for (int r = 0; r < in.n;) {
    int e = r;
    while (e < in.n && in.seq[e] == in.seq[r]) e++;
    mem.commit_run(in.seq[r], in.pos[r], e - r, in.snapshot);
    r = e;
  }
}

void compute_logits(ThreadPool& tp, const Weight& output, const float* h, int64_t n_embd, const ForwardIn& in) {
  if (in.n_out == 0 || !in.logits) return;
  // rows 0..n_out-1 (verification batches, prefill of one row) are already contiguous in h
  bool leading = true;
  for (int i = 0; i < in.n_out && leading; i++) leading = in.out_rows[i] == i;
  if (leading) { matmul(tp, output, h, n_embd, in.n_out, in.logits, output.ne[1]); return; }
  thread_local std::vector<float> sel;
  sel.resize((size_t)in.n_out * n_embd);
  for (int i = 0; i < in.n_out; i++)
    std::copy(h + (int64_t)in.out_rows[i] * n_embd, h + ((int64_t)in.out_rows[i] + 1) * n_embd, sel.data() + (int64_t)i * n_embd);
  matmul(tp, output, sel.data(), n_embd, in.n_out, in.logits, output.ne[1]);
}

}  // namespace pyllm
