#include "engine/seq_state.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace pyllm {

void Checkpoints::add(Checkpoint c, int n_max) {
  const int32_t p = c.pos();
  list_.erase(std::remove_if(list_.begin(), list_.end(), [&](const Checkpoint& x) { return x.pos() == p; }), list_.end());
  auto it = std::lower_bound(list_.begin(), list_.end(), p, [](const Checkpoint& x, int32_t v) { return x.pos() < v; });
  list_.insert(it, std::move(c));
  while ((int)list_.size() > std::max(1, n_max)) {
    // thin: drop the checkpoint (not the new one, not the last) whose neighbours are closest
    int victim = -1;
    int64_t best_gap = INT64_MAX;
    for (int i = 0; i + 1 < (int)list_.size(); i++) {
      if (list_[i].pos() == p) continue;
      const int64_t gap = (int64_t)list_[i + 1].pos() - (i > 0 ? list_[i - 1].pos() : 0);
      if (gap < best_gap) { best_gap = gap; victim = i; }
    }
    if (victim < 0)  // only the new one and the last are left (n_max 1): keep the new one
      victim = list_.back().pos() != p ? (int)list_.size() - 1 : 0;
    list_.erase(list_.begin() + victim);
  }
}

const Checkpoint* Checkpoints::best(int32_t n) const {
  for (auto it = list_.rbegin(); it != list_.rend(); ++it)
    if (it->pos() > 0 && it->pos() <= n) return &*it;
  return nullptr;
}

void Checkpoints::drop_above(int32_t n) {
  list_.erase(std::remove_if(list_.begin(), list_.end(), [&](const Checkpoint& x) { return x.pos() > n; }), list_.end());
}

size_t Checkpoints::bytes() const {
  size_t b = 0;
  for (auto& c : list_) b += c.bytes();
  return b;
}

size_t SeqState::bytes() const {
  return tokens.size() * sizeof(int32_t) + kv.bytes() + rs.bytes() + mtp_kv.bytes() + mtp_h.size() * sizeof(float) + ckpts.bytes();
}

// ---------------------------------------------------------------- file format
// "PYLLMSEQ" u32 version u64 header_len header, then the body: every vector as u64 count + data,
// "END." at the end. Counts are checked against the bytes left, so a corrupt file cannot allocate.
namespace {
constexpr char kMagic[8] = {'P', 'Y', 'L', 'L', 'M', 'S', 'E', 'Q'};
constexpr uint32_t kVersion = 2;  // 2: KV rows as bytes of the cache types

struct Writer {
  FILE* f;
  const std::string& path;
  void raw(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f) != n) throw std::runtime_error("cannot write slot file '" + path + "' (disk full?)");
  }
  template <class T> void pod(T v) { raw(&v, sizeof v); }
  template <class T> void vec(const std::vector<T>& v) { pod<uint64_t>(v.size()); raw(v.data(), v.size() * sizeof(T)); }
  void kv(const KVSnap& s) { pod<int32_t>(s.n); pod<uint32_t>((uint32_t)s.k.size()); for (size_t i = 0; i < s.k.size(); i++) { vec(s.k[i]); vec(s.v[i]); } }
  void rs(const RSSnap& s) { pod<int32_t>(s.pos); pod<uint32_t>((uint32_t)s.conv.size()); for (size_t i = 0; i < s.conv.size(); i++) { vec(s.conv[i]); vec(s.ssm[i]); } }
};

struct Reader {
  FILE* f;
  const std::string& path;
  uint64_t left;
  [[noreturn]] void bad(const char* what) const { throw std::runtime_error("slot file '" + path + "' is not a valid pyllm slot file: " + what); }
  void raw(void* p, size_t n) {
    if (n > left || (n && std::fread(p, 1, n, f) != n)) bad("truncated");
    left -= n;
  }
  template <class T> T pod() { T v; raw(&v, sizeof v); return v; }
  template <class T> std::vector<T> vec() {
    const uint64_t n = pod<uint64_t>();
    if (n > left / sizeof(T)) bad("a length past the end of the file");
    std::vector<T> v((size_t)n);
    raw(v.data(), (size_t)n * sizeof(T));
    return v;
  }
  uint32_t count() { const uint32_t n = pod<uint32_t>(); if (n > 1u << 16) bad("too many layers"); return n; }
  KVSnap kv() { KVSnap s; s.n = pod<int32_t>(); const uint32_t L = count(); s.k.resize(L); s.v.resize(L); for (uint32_t i = 0; i < L; i++) { s.k[i] = vec<uint8_t>(); s.v[i] = vec<uint8_t>(); } return s; }
  RSSnap rs() { RSSnap s; s.pos = pod<int32_t>(); const uint32_t L = count(); s.conv.resize(L); s.ssm.resize(L); for (uint32_t i = 0; i < L; i++) { s.conv[i] = vec<float>(); s.ssm[i] = vec<float>(); } return s; }
};

struct FileCloser { void operator()(FILE* f) const { if (f) std::fclose(f); } };
}  // namespace

void SeqState::write(const std::string& path, const std::string& header) const {
  const std::string tmp = path + ".tmp";
  {
    std::unique_ptr<FILE, FileCloser> f(std::fopen(tmp.c_str(), "wb"));
    if (!f) throw std::runtime_error("cannot create slot file '" + tmp + "': " + std::strerror(errno));
    try {
      Writer w{f.get(), path};
      w.raw(kMagic, sizeof kMagic);
      w.pod<uint32_t>(kVersion);
      w.pod<uint64_t>(header.size());
      w.raw(header.data(), header.size());
      w.vec(tokens);
      w.kv(kv);
      w.rs(rs);
      w.pod<uint8_t>(has_mtp);
      w.kv(mtp_kv);
      w.vec(mtp_h);
      w.pod<uint32_t>((uint32_t)ckpts.list().size());
      for (const Checkpoint& c : ckpts.list()) { w.rs(c.rs); w.vec(c.mtp_h); }
      w.raw("END.", 4);
      if (std::fflush(f.get()) != 0) throw std::runtime_error("cannot write slot file '" + path + "' (disk full?)");
    } catch (...) {
      f.reset();
      std::remove(tmp.c_str());
      throw;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot move slot file into place '" + path + "': " + std::strerror(errno));
  }
}

SeqState SeqState::read(const std::string& path, std::string* header) {
  std::unique_ptr<FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) throw std::runtime_error("cannot open slot file '" + path + "': " + std::strerror(errno));
  std::fseek(f.get(), 0, SEEK_END);
  const long size = std::ftell(f.get());
  std::fseek(f.get(), 0, SEEK_SET);
  Reader r{f.get(), path, size < 0 ? 0 : (uint64_t)size};
  char magic[8];
  r.raw(magic, sizeof magic);
  if (std::memcmp(magic, kMagic, sizeof magic) != 0) r.bad("wrong magic");
  const uint32_t ver = r.pod<uint32_t>();
  if (ver != kVersion) throw std::runtime_error("slot file '" + path + "' has format version " + std::to_string(ver) + ", this pyllm reads " + std::to_string(kVersion));
  const uint64_t hn = r.pod<uint64_t>();
  if (hn > r.left) r.bad("header past the end of the file");
  std::string h((size_t)hn, '\0');
  r.raw(h.data(), h.size());
  if (header) *header = std::move(h);
  SeqState s;
  s.tokens = r.vec<int32_t>();
  s.kv = r.kv();
  s.rs = r.rs();
  s.has_mtp = r.pod<uint8_t>() != 0;
  s.mtp_kv = r.kv();
  s.mtp_h = r.vec<float>();
  const uint32_t nc = r.count();
  for (uint32_t i = 0; i < nc; i++) {
    Checkpoint c;
    c.rs = r.rs();
    c.mtp_h = r.vec<float>();
    s.ckpts.list().push_back(std::move(c));
  }
  char end[4];
  r.raw(end, 4);
  if (std::memcmp(end, "END.", 4) != 0 || r.left != 0) r.bad("trailing or missing end marker");
  return s;
}

}  // namespace pyllm
