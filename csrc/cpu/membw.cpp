#include "cpu/membw.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>

#include "cpu/threadpool.h"
#include "memory/anon_memory.h"

namespace pyllm {

namespace {
// Sums 64-bit words with 8 independent accumulators (the compiler vectorises it): one pass is bound by the
// loads, not by the adds, and the result feeds a sink so the loads are not optimised away. The share is
// walked as `streams` contiguous parts side by side, each prefetching `pf` bytes ahead (0: none), as the
// decode kernels read several weight rows at once with prefetch: the probe reports the best of these
// read patterns, so it is the machine's ceiling and not one pattern's (a plain sum read 17.7 GB/s at -t 2
// here while Q8_0 decode with prefetch streamed 23.5; on a Zen 5 the 9 KiB distance of the group kernels
// reads 39-40 / 50-51 GB/s at -t 1 / 2 where 1-2 KiB read 36.6 / 44.5).
uint64_t sum_words(const uint64_t* p, size_t n, int streams, size_t pf) {
  uint64_t a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const size_t part = n / 8 / streams * 8;  // whole lines per stream
  for (size_t i = 0; i < part; i += 8)
    for (int s = 0; s < streams; s++) {
      const uint64_t* q = p + s * part + i;
      if (pf) __builtin_prefetch((const char*)q + pf, 0, 3);
      for (int k = 0; k < 8; k++) a[k] += q[k];
    }
  for (size_t i = part * streams; i < n; i++) a[0] += p[i];
  uint64_t s = 0;
  for (int k = 0; k < 8; k++) s += a[k];
  return s;
}
volatile uint64_t g_sink;
}  // namespace

double read_bandwidth(int n_threads, size_t bytes, int passes) {
  if (n_threads < 1) throw std::invalid_argument("read_bandwidth: n_threads must be >= 1");
  if (passes < 1) throw std::invalid_argument("read_bandwidth: passes must be >= 1");
  const size_t line = 64;
  const size_t n_words = (bytes / line) * (line / sizeof(uint64_t));
  if (n_words == 0) throw std::invalid_argument("read_bandwidth: buffer of " + std::to_string(bytes) + " bytes is too small");
  // in huge pages, as the loaded weights are (a 4 KiB-page buffer gives a ceiling below the weights' own pages)
  AnonBuffer mem(n_words * sizeof(uint64_t));
  if (!mem) throw std::bad_alloc();
  uint64_t* buf = reinterpret_cast<uint64_t*>(mem.data());
  ThreadPool tp(n_threads);
  // each thread's share, in whole cache lines
  auto share = [&](int ith, int nth, size_t& w0, size_t& w1) {
    const size_t lines = n_words / 8;
    w0 = lines * ith / nth * 8;
    w1 = lines * (ith + 1) / nth * 8;
  };
  tp.run([&](int ith, int nth) {
    size_t w0, w1;
    share(ith, nth, w0, w1);
    for (size_t i = w0; i < w1; i++) buf[i] = i;
  });
  std::unique_ptr<uint64_t[]> sums(new uint64_t[n_threads]);
  double best = 0;
  struct Pattern { int streams; size_t pf; };
  const Pattern patterns[] = {{1, 0}, {1, 1024}, {4, 0}, {4, 2048}, {1, 4096}, {1, 9216}, {4, 9216}};
  for (const Pattern& pat : patterns)
    for (int pass = 0; pass < passes; pass++) {
      const auto t0 = std::chrono::steady_clock::now();
      tp.run([&](int ith, int nth) {
        size_t w0, w1;
        share(ith, nth, w0, w1);
        sums[ith] = sum_words(buf + w0, w1 - w0, pat.streams, pat.pf);
      });
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      for (int t = 0; t < n_threads; t++) g_sink = g_sink + sums[t];
      if (s > 0) best = std::max(best, (double)(n_words * sizeof(uint64_t)) / s);
    }
  return best;
}

}  // namespace pyllm
