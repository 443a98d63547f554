#include "gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "memory/anon_memory.h"

namespace pyllm {

static const char* kTypeNames[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                   "bool", "string", "array", "uint64", "int64", "float64"};
const char* gguf_type_name(gguf_type t) { return t < GGUF_TYPE_COUNT ? kTypeNames[t] : "invalid"; }

static size_t scalar_size(gguf_type t) {
  switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
  }
}

// Reads little-endian scalars from raw bytes of a known type.
static void decode_scalar(gguf_type t, const uint8_t* p, GGUFValue& v) {
  v.type = t;
  switch (t) {
    case GGUF_TYPE_UINT8: v.u = p[0]; v.i = (int64_t)v.u; break;
    case GGUF_TYPE_INT8: v.i = (int8_t)p[0]; v.u = (uint64_t)v.i; break;
    case GGUF_TYPE_BOOL: v.b = p[0] != 0; v.u = v.b; v.i = v.b; break;
    case GGUF_TYPE_UINT16: { uint16_t x; std::memcpy(&x, p, 2); v.u = x; v.i = x; break; }
    case GGUF_TYPE_INT16: { int16_t x; std::memcpy(&x, p, 2); v.i = x; v.u = (uint64_t)x; break; }
    case GGUF_TYPE_UINT32: { uint32_t x; std::memcpy(&x, p, 4); v.u = x; v.i = x; break; }
    case GGUF_TYPE_INT32: { int32_t x; std::memcpy(&x, p, 4); v.i = x; v.u = (uint64_t)x; break; }
    case GGUF_TYPE_UINT64: { uint64_t x; std::memcpy(&x, p, 8); v.u = x; v.i = (int64_t)x; break; }
    case GGUF_TYPE_INT64: { int64_t x; std::memcpy(&x, p, 8); v.i = x; v.u = (uint64_t)x; break; }
    case GGUF_TYPE_FLOAT32: { float x; std::memcpy(&x, p, 4); v.f = x; v.i = (int64_t)x; return; }
    case GGUF_TYPE_FLOAT64: { double x; std::memcpy(&x, p, 8); v.f = x; v.i = (int64_t)x; return; }
    default: break;
  }
  v.f = (t == GGUF_TYPE_UINT64) ? (double)v.u : (double)v.i;
}

double GGUFValue::arr_f(uint64_t idx) const {
  GGUFValue e; decode_scalar(arr_type, arr_data + idx * scalar_size(arr_type), e); return e.f;
}
int64_t GGUFValue::arr_i(uint64_t idx) const {
  GGUFValue e; decode_scalar(arr_type, arr_data + idx * scalar_size(arr_type), e); return e.i;
}

namespace {
// Bounds-checked cursor over the mapping; every read names what it was reading when it fails.
struct Cursor {
  const std::string& path; const uint8_t* base; size_t size; size_t pos = 0;
  [[noreturn]] void fail(const std::string& what) const {
    throw GGUFError("GGUF file '" + path + "': " + what);
  }
  void need(size_t n, const char* what) {
    if (n > size || pos > size - n) {
      std::ostringstream os;
      os << "truncated " << what << ": need " << n << " bytes at offset " << pos << ", file size " << size;
      fail(os.str());
    }
  }
  template <class T> T read(const char* what) {
    need(sizeof(T), what); T x; std::memcpy(&x, base + pos, sizeof(T)); pos += sizeof(T); return x;
  }
  std::string_view read_str(const char* what) {
    size_t at = pos;
    uint64_t n = read<uint64_t>(what);
    if (n > size || pos > size - n) {
      std::ostringstream os;
      os << "string length " << n << " at offset " << at << " runs past the end of the file (size " << size << ") in " << what;
      fail(os.str());
    }
    std::string_view s((const char*)base + pos, n); pos += n; return s;
  }
};
}  // namespace

static void read_value(Cursor& c, gguf_type t, GGUFValue& v, const std::string& key, int depth) {
  if (t >= GGUF_TYPE_COUNT) c.fail("key '" + key + "' has unknown value type " + std::to_string(t));
  v.type = t;
  if (t == GGUF_TYPE_STRING) { v.str = c.read_str("KV section"); return; }
  if (t == GGUF_TYPE_ARRAY) {
    if (depth > 4) c.fail("key '" + key + "': arrays nested too deeply");
    uint32_t et = c.read<uint32_t>("KV section");
    if (et >= GGUF_TYPE_COUNT) c.fail("key '" + key + "' is an array of unknown type " + std::to_string(et));
    uint64_t n = c.read<uint64_t>("KV section");
    v.arr_type = (gguf_type)et; v.arr_n = n;
    if (et == GGUF_TYPE_STRING) {
      if (n > (c.size - c.pos) / 8) c.fail("key '" + key + "': array of " + std::to_string(n) + " strings runs past the end of the file");
      v.arr_str.reserve(n);
      for (uint64_t k = 0; k < n; k++) v.arr_str.push_back(c.read_str("KV section"));
    } else if (et == GGUF_TYPE_ARRAY) {
      if (n > (c.size - c.pos) / 12) c.fail("key '" + key + "': nested array runs past the end of the file");
      v.arr_arr.resize(n);
      for (uint64_t k = 0; k < n; k++) {
        uint32_t inner = GGUF_TYPE_ARRAY;
        read_value(c, (gguf_type)inner, v.arr_arr[k], key, depth + 1);
      }
    } else {
      size_t es = scalar_size((gguf_type)et);
      if (n > (c.size - c.pos) / es) {
        std::ostringstream os;
        os << "truncated KV section: array '" << key << "' of " << n << " " << gguf_type_name((gguf_type)et)
           << " at offset " << c.pos << " runs past the end of the file (size " << c.size << ")";
        c.fail(os.str());
      }
      v.arr_data = c.base + c.pos; c.pos += n * es;
    }
    return;
  }
  size_t sz = scalar_size(t);
  c.need(sz, "KV section");
  decode_scalar(t, c.base + c.pos, v);
  c.pos += sz;
}

// MemAvailable of /proc/meminfo in bytes (0 if unknown)
static size_t mem_available() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  size_t kb = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %zu kB", &kb) == 1) break;
  std::fclose(f);
  return kb * 1024;
}

// The whole file in anonymous memory (huge pages where the kernel gives them); GGUFError if it cannot be.
static void* read_into_memory(int fd, size_t size, const std::string& path) {
  void* m = map_anon(size);
  if (!m)
    throw GGUFError("GGUF file '" + path + "': cannot allocate " + std::to_string(size) +
                    " bytes to load it (--mmap maps it instead): " + std::strerror(errno));
  for (size_t off = 0; off < size;) {
    const ssize_t r = ::pread(fd, (char*)m + off, std::min<size_t>(size - off, (size_t)1 << 26), (off_t)off);
    if (r <= 0) {
      const int e = r < 0 ? errno : EIO;
      munmap(m, size);
      throw GGUFError("GGUF file '" + path + "': read failed at byte " + std::to_string(off) + ": " + std::strerror(e));
    }
    off += (size_t)r;
  }
  return m;
}

GGUFFile::GGUFFile(const std::string& path, Residency how) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw GGUFError("GGUF file '" + path + "': cannot open: " + std::strerror(errno));
  struct stat st;
  if (fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_); fd_ = -1;
    throw GGUFError("GGUF file '" + path + "': not a regular file");
  }
  size_ = (size_t)st.st_size;
  if (size_ > 0) {
    if (how == Residency::Auto) {
      const size_t avail = mem_available();
      how = avail > 0 && size_ <= avail / 2 ? Residency::Copy : Residency::Map;
    }
    void* m = MAP_FAILED;
    if (how == Residency::Copy) {
      try {
        m = read_into_memory(fd_, size_, path);
      } catch (...) { ::close(fd_); fd_ = -1; throw; }
      copied_ = true;
    } else {
      m = mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_, 0);
      if (m == MAP_FAILED) { ::close(fd_); fd_ = -1; throw GGUFError("GGUF file '" + path + "': mmap failed: " + std::strerror(errno)); }
    }
    base_ = (const uint8_t*)m;
  }
  try {
    Cursor c{path_, base_, size_};
    uint32_t magic = c.read<uint32_t>("header");
    if (magic != 0x46554747u) {  // "GGUF"
      char m[5] = {0};
      std::memcpy(m, &magic, 4);
      for (int k = 0; k < 4; k++) if (m[k] < 32 || m[k] > 126) m[k] = '?';
      c.fail(std::string("bad magic '") + m + "' (expected 'GGUF'): not a GGUF file");
    }
    version_ = c.read<uint32_t>("header");
    if (version_ != 2 && version_ != 3) {
      c.fail("unsupported GGUF version " + std::to_string(version_) + " (supported: 2, 3)");
    }
    uint64_t n_tensors = c.read<uint64_t>("header");
    uint64_t n_kv = c.read<uint64_t>("header");
    // each KV takes >= 12 bytes and each tensor info >= 24: cheap sanity bound before looping
    if (n_kv > size_ / 12 || n_tensors > size_ / 24) {
      c.fail("truncated header: claims " + std::to_string(n_kv) + " keys and " + std::to_string(n_tensors) +
             " tensors, more than a file of " + std::to_string(size_) + " bytes can hold");
    }
    for (uint64_t k = 0; k < n_kv; k++) {
      std::string key(c.read_str("KV section"));
      uint32_t t = c.read<uint32_t>("KV section");
      GGUFValue v;
      read_value(c, (gguf_type)t, v, key, 0);
      if (kv_.count(key)) c.fail("duplicate key '" + key + "'");
      keys_.push_back(key);
      kv_.emplace(key, std::move(v));
    }
    if (auto* a = find("general.alignment")) {
      if (!a->is_int() || a->u == 0 || (a->u & (a->u - 1)) != 0) c.fail("general.alignment must be a power of two");
      alignment_ = a->u;
    }
    tensors_.reserve(n_tensors);
    for (uint64_t k = 0; k < n_tensors; k++) {
      GGUFTensor t;
      t.name = std::string(c.read_str("tensor info"));
      uint32_t nd = c.read<uint32_t>("tensor info");
      if (nd == 0 || nd > 4) c.fail("tensor '" + t.name + "' has " + std::to_string(nd) + " dimensions (1..4 allowed)");
      t.n_dims = (int)nd;
      for (int d = 0; d < 4; d++) t.ne[d] = 1;
      for (uint32_t d = 0; d < nd; d++) {
        int64_t ne = c.read<int64_t>("tensor info");
        if (ne <= 0 || ne > (int64_t(1) << 40)) c.fail("tensor '" + t.name + "' has invalid dimension " + std::to_string(ne));
        t.ne[d] = ne;
      }
      uint32_t ty = c.read<uint32_t>("tensor info");
      if (!type_id_valid(ty)) c.fail("tensor '" + t.name + "' has unknown tensor type " + std::to_string(ty));
      t.type = (ggml_type)ty;
      t.offset = c.read<uint64_t>("tensor info");
      const auto& tr = get_type_traits(t.type);
      if (t.ne[0] % tr.blck_size != 0) {
        c.fail("tensor '" + t.name + "': row length " + std::to_string(t.ne[0]) + " is not a multiple of the " +
               tr.name + " block size " + std::to_string(tr.blck_size));
      }
      if (t.ne[1] * t.ne[2] * t.ne[3] > (int64_t(1) << 40)) c.fail("tensor '" + t.name + "' is too large");
      t.nbytes = row_size(t.type, t.ne[0]) * (size_t)(t.ne[1] * t.ne[2] * t.ne[3]);
      if (tensor_index_.count(t.name)) c.fail("duplicate tensor name '" + t.name + "'");
      tensor_index_[t.name] = tensors_.size();
      tensors_.push_back(std::move(t));
    }
    data_offset_ = (c.pos + alignment_ - 1) / alignment_ * alignment_;
    for (auto& t : tensors_) {
      if (t.offset % alignment_ != 0) {
        c.fail("tensor '" + t.name + "': data offset " + std::to_string(t.offset) + " is not aligned to " + std::to_string(alignment_));
      }
      uint64_t begin = data_offset_ + t.offset;
      if (begin > size_ || t.nbytes > size_ - begin) {
        std::ostringstream os;
        os << "tensor '" << t.name << "': data ends at " << (begin + t.nbytes) << " beyond file size " << size_
           << " (file truncated?)";
        c.fail(os.str());
      }
      t.data = base_ + begin;
    }
  } catch (...) {
    if (base_) munmap((void*)base_, size_);
    ::close(fd_);
    base_ = nullptr; fd_ = -1;
    throw;
  }
}

GGUFFile::~GGUFFile() {
  if (base_) munmap((void*)base_, size_);
  if (fd_ >= 0) ::close(fd_);
}

const GGUFValue* GGUFFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}
const GGUFValue& GGUFFile::get(const std::string& key) const {
  auto* v = find(key);
  if (!v) throw GGUFError("GGUF file '" + path_ + "': required key '" + key + "' is missing");
  return *v;
}
int64_t GGUFFile::get_int(const std::string& key, int64_t def) const {
  auto* v = find(key);
  if (!v) return def;
  if (!v->is_num()) throw GGUFError("GGUF file '" + path_ + "': key '" + key + "' is a " + gguf_type_name(v->type) + ", expected a number");
  return v->i;
}
double GGUFFile::get_float(const std::string& key, double def) const {
  auto* v = find(key);
  if (!v) return def;
  if (!v->is_num()) throw GGUFError("GGUF file '" + path_ + "': key '" + key + "' is a " + gguf_type_name(v->type) + ", expected a number");
  return v->f;
}
bool GGUFFile::get_bool(const std::string& key, bool def) const {
  auto* v = find(key);
  if (!v) return def;
  if (!v->is_int()) throw GGUFError("GGUF file '" + path_ + "': key '" + key + "' is a " + gguf_type_name(v->type) + ", expected a bool");
  return v->i != 0;
}
std::string GGUFFile::get_str(const std::string& key, const std::string& def) const {
  auto* v = find(key);
  if (!v) return def;
  if (v->type != GGUF_TYPE_STRING) throw GGUFError("GGUF file '" + path_ + "': key '" + key + "' is a " + gguf_type_name(v->type) + ", expected a string");
  return std::string(v->str);
}
const GGUFTensor* GGUFFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace pyllm
