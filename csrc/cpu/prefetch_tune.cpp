#include "cpu/prefetch_tune.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

namespace pyllm {

namespace {
constexpr size_t kMinBytes = size_t(1) << 20;  // smaller products are mostly fixed costs: noise
constexpr double kBlockBytes = 256.0 * (1 << 20);  // per block, with at least kBlockCalls products
constexpr int kBlockCalls = 4;
constexpr int kRounds = 4;  // blocks per mode: a 2-core VM's neighbours move a block's rate by 10-30 %
// Another mode replaces the level's default (x16_tile) only when it is this much faster: on a Zen 4 VM whose
// neighbours came and went, L2 (its default) ran decode at 14.3 t/s to none's 11.4 (medians of 8) in one
// minute and tied with it in another; a tuner that measured in a tie kept none by a hair
constexpr double kMargin = 1.03;

const char* const kNames[kX16PfModes] = {"none", "l1", "l2", "streams"};

struct Tuner {
  std::atomic<int> running{-1};  // the mode the kernels take (-1: the table's default, before any timing)
  int chosen = -1;               // the kept mode, -1 while measuring
  bool started = false;
  int block = 0;                 // blocks done; the current block's mode is block % kX16PfModes
  double block_bytes = 0;
  int block_calls = 0;
  double bytes[kX16PfModes] = {}, ns[kX16PfModes] = {};
  void reset(int mode) {
    running.store(mode);
    chosen = -1;
    started = false;
    block = block_calls = 0;
    block_bytes = 0;
    for (int m = 0; m < kX16PfModes; m++) bytes[m] = ns[m] = 0;
  }
};
constexpr int kThreadKeys = 16;  // pools of 16 threads and more share one tuner
std::mutex g_mu;
Tuner g_tuners[GGML_TYPE_COUNT][kX16Classes][kThreadKeys];
std::atomic<int> g_threads{1};
int thread_key(int n) { return std::clamp(n, 1, kThreadKeys) - 1; }
int g_forced = -2;  // -2: PYLLM_X16_PREFETCH not read yet; -1: measure; else the mode for every tuner

int forced_locked() {
  if (g_forced != -2) return g_forced;
  g_forced = -1;
  if (const char* e = std::getenv("PYLLM_X16_PREFETCH"); e && *e && std::strcmp(e, "auto")) {
    for (int m = 0; m < kX16PfModes; m++) if (!std::strcmp(e, kNames[m])) g_forced = m;
    if (g_forced < 0) {
      g_forced = -2;
      throw std::invalid_argument(std::string("PYLLM_X16_PREFETCH=") + e + ": expected auto, none, l1, l2 or streams");
    }
  }
  for (auto& row : g_tuners)
    for (auto& col : row)
      for (Tuner& t : col) t.running.store(g_forced);
  return g_forced;
}
std::atomic<bool> g_env_read{false};
void read_env() {
  if (g_env_read.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lk(g_mu);
  forced_locked();
  g_env_read.store(true, std::memory_order_release);
}
// the mode whose kernel is the table's default for t (-1: none is)
int default_mode(ggml_type t) {
  const type_traits& tt = get_type_traits(t);
  for (int m = 0; m < kX16PfModes; m++) if (tt.x16_tile_pf[m] && tt.x16_tile_pf[m] == tt.x16_tile) return m;
  return -1;
}
Tuner& tuner(ggml_type t, int B) {
  if ((int)t < 0 || (int)t >= GGML_TYPE_COUNT) throw std::invalid_argument("x16 prefetch: type " + std::to_string((int)t));
  return g_tuners[t][x16_pf_class(B)][g_threads.load(std::memory_order_relaxed)];
}
}  // namespace

x16_tile_fn x16_kernel(const type_traits& t, int mode) {
  return mode >= 0 && mode < kX16PfModes && t.x16_tile_pf[mode] ? t.x16_tile_pf[mode] : t.x16_tile;
}

const char* x16_prefetch_name(int mode) { return mode >= 0 && mode < kX16PfModes ? kNames[mode] : "measuring"; }

void x16_prefetch_threads(int n_threads) { g_threads.store(thread_key(n_threads), std::memory_order_relaxed); }

int x16_prefetch_running(ggml_type t, int B) {
  read_env();
  return tuner(t, B).running.load(std::memory_order_relaxed);
}

std::string x16_prefetch_summary(int n_threads) {
  read_env();
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_forced >= 0) return kNames[g_forced];
  std::string all, one;
  bool same = true;
  for (int ty = 0; ty < GGML_TYPE_COUNT; ty++)
    for (int c = 0; c < kX16Classes; c++)
      for (int k = 0; k < kThreadKeys; k++) {
        const Tuner& t = g_tuners[ty][c][k];
        if (!t.started || (n_threads > 0 && k != thread_key(n_threads))) continue;
        if (t.chosen < 0) return "measuring";
        if (!one.empty() && one != kNames[t.chosen]) same = false;
        one = kNames[t.chosen];
        all += std::string(all.empty() ? "" : ", ") + get_type_traits((ggml_type)ty).name +
               (c == kX16Decode ? " decode -t " : " batch -t ") + std::to_string(k + 1) + (k + 1 == kThreadKeys ? "+ " : " ") + one;
      }
  if (one.empty()) return "measuring";
  return same ? one : all;
}

void x16_prefetch_force(int mode) {
  if (mode < -1 || mode >= kX16PfModes) throw std::invalid_argument("x16 prefetch mode " + std::to_string(mode) + " (-1.." + std::to_string(kX16PfModes - 1) + ")");
  read_env();
  std::lock_guard<std::mutex> lk(g_mu);
  g_forced = mode;
  for (auto& row : g_tuners)
    for (auto& col : row)
      for (Tuner& t : col) t.reset(mode);
}

int x16_prefetch_begin(ggml_type type, int B, size_t bytes) {
  read_env();
  if (B > kMaxRowsK || bytes < kMinBytes) return -1;
  Tuner& t = tuner(type, B);
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_forced >= 0 || t.chosen >= 0) return -1;
  if (!t.started) {
    t.started = true;
    t.running.store(0);
  }
  return t.block % kX16PfModes;
}

void x16_prefetch_end(ggml_type type, int B, int mode, size_t bytes, double ns) {
  if (mode < 0) return;
  Tuner& t = tuner(type, B);
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_forced >= 0 || t.chosen >= 0 || mode != t.block % kX16PfModes) return;
  t.bytes[mode] += (double)bytes;
  t.ns[mode] += ns;
  t.block_bytes += (double)bytes;
  if (++t.block_calls < kBlockCalls || t.block_bytes < kBlockBytes) return;
  t.block_bytes = 0;
  t.block_calls = 0;
  if (++t.block < kRounds * kX16PfModes) {
    t.running.store(t.block % kX16PfModes);
    return;
  }
  auto rate = [&](int m) { return t.bytes[m] / t.ns[m]; };
  int best = 0;
  for (int m = 1; m < kX16PfModes; m++)
    if (rate(m) > rate(best)) best = m;
  const int d = default_mode(type);
  if (d >= 0 && best != d && rate(best) < kMargin * rate(d)) best = d;
  t.chosen = best;
  t.running.store(best);
}

}  // namespace pyllm
