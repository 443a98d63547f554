// Anonymous memory for data the kernels stream (weights, the bandwidth probe), in transparent huge pages where
// the kernel gives them. With THP in "madvise" mode (Debian's default) memory without the MADV_HUGEPAGE hint
// gets 4 KiB pages: a page walk every 4 KiB, and the hardware prefetchers stop at each page's end. A Zen 2 VM
// read a 4 KiB-page buffer at 18.8-19.0 GB/s (-t 2) where huge pages read 24.2-27.1; on a Zen 3 VM the Q4_K group
// kernel read 400 MB of groups 8-25 % faster at one token (3 paired runs), though whole decodes showed no
// difference beyond that host's noise.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>

#include <sys/mman.h>

namespace pyllm {

// n zeroed bytes (n > 0), huge pages requested; nullptr if the mapping fails. Released with munmap(p, n).
inline void* map_anon(size_t n) {
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
#ifdef MADV_HUGEPAGE
  madvise(p, n, MADV_HUGEPAGE);
#endif
  return p;
}

// map_anon's memory with its owner: empty (false) when the mapping failed
class AnonBuffer {
 public:
  AnonBuffer() = default;
  explicit AnonBuffer(size_t n) : p_(n ? (uint8_t*)map_anon(n) : nullptr), n_(p_ ? n : 0) {}
  AnonBuffer(AnonBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  AnonBuffer& operator=(AnonBuffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  AnonBuffer(const AnonBuffer&) = delete;
  AnonBuffer& operator=(const AnonBuffer&) = delete;
  ~AnonBuffer() {
    if (p_) munmap(p_, n_);
  }
  uint8_t* data() const { return p_; }
  size_t size() const { return n_; }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  uint8_t* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace pyllm
