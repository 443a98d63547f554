#include "cpu/prefetch_tune.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

namespace pyllm {

namespace {
constexpr size_t kMinBytes = size_t(1) << 20;  // smaller products are mostly fixed costs: noise
constexpr int kMinCalls = 24;                   // per mode, and kMinBytesPerMode, before choosing
constexpr double kMinBytesPerMode = 384.0 * (1 << 20);

const char* const kNames[kX16PfModes] = {"none", "l1", "l2", "streams"};
std::atomic<int> g_running{-1};
std::atomic<int> g_chosen{-2};  // -2: PYLLM_X16_PREFETCH not read yet
std::mutex g_mu;
double g_bytes[kX16PfModes], g_ns[kX16PfModes];
int g_calls[kX16PfModes];
unsigned g_next = 0;

void reset_locked() {
  for (int m = 0; m < kX16PfModes; m++) { g_bytes[m] = g_ns[m] = 0; g_calls[m] = 0; }
  g_next = 0;
}

int chosen() {
  int c = g_chosen.load(std::memory_order_relaxed);
  if (c != -2) return c;
  std::lock_guard<std::mutex> lk(g_mu);
  c = g_chosen.load();
  if (c != -2) return c;
  c = -1;
  if (const char* e = std::getenv("PYLLM_X16_PREFETCH"); e && *e && std::strcmp(e, "auto")) {
    for (int m = 0; m < kX16PfModes; m++) if (!std::strcmp(e, kNames[m])) c = m;
    if (c < 0) throw std::invalid_argument(std::string("PYLLM_X16_PREFETCH=") + e + ": expected auto, none, l1, l2 or streams");
  }
  g_running.store(c);
  g_chosen.store(c);
  return c;
}
}  // namespace

x16_tile_fn x16_kernel(const type_traits& t, int mode) {
  return mode >= 0 && mode < kX16PfModes && t.x16_tile_pf[mode] ? t.x16_tile_pf[mode] : t.x16_tile;
}

const char* x16_prefetch_name(int mode) { return mode >= 0 && mode < kX16PfModes ? kNames[mode] : "measuring"; }

int x16_prefetch_running() { chosen(); return g_running.load(std::memory_order_relaxed); }
int x16_prefetch_chosen() { return chosen(); }

void x16_prefetch_force(int mode) {
  if (mode < -1 || mode >= kX16PfModes) throw std::invalid_argument("x16 prefetch mode " + std::to_string(mode) + " (-1.." + std::to_string(kX16PfModes - 1) + ")");
  chosen();
  std::lock_guard<std::mutex> lk(g_mu);
  reset_locked();
  g_chosen.store(mode);
  g_running.store(mode);
}

int x16_prefetch_begin(size_t bytes) {
  if (chosen() >= 0 || bytes < kMinBytes) return -1;
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_chosen.load() >= 0) return -1;
  const int m = (int)(g_next++ % kX16PfModes);
  g_running.store(m);
  return m;
}

void x16_prefetch_end(int mode, size_t bytes, double ns) {
  if (mode < 0) return;
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_chosen.load() >= 0) return;
  g_bytes[mode] += (double)bytes;
  g_ns[mode] += ns;
  g_calls[mode]++;
  int best = 0;
  for (int m = 0; m < kX16PfModes; m++) {
    if (g_calls[m] < kMinCalls || g_bytes[m] < kMinBytesPerMode) { g_running.store(-1); return; }
    if (g_bytes[m] / g_ns[m] > g_bytes[best] / g_ns[best]) best = m;
  }
  g_chosen.store(best);
  g_running.store(best);
}

}  // namespace pyllm
