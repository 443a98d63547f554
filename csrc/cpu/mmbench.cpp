#include "cpu/mmbench.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/matmul.h"
#include "cpu/threadpool.h"
#include "memory/anon_memory.h"

namespace pyllm {

double bench_matmul(ggml_type type, const uint8_t* w, int64_t N, int64_t K, int B, int n_threads, int reps, bool grouped) {
  if (N < 1 || K < 1 || B < 1 || n_threads < 1 || reps < 1)
    throw std::invalid_argument("bench_matmul: N, K, B, n_threads and reps must be >= 1");
  Weight W;
  W.name = "bench";
  W.type = type;
  W.ne[0] = K; W.ne[1] = N;
  W.nb1 = row_size(type, K);
  W.nb2 = W.nb1 * N;
  W.data = w;
  // the groups in huge pages, as a model's weights are (memory/anon_memory.h)
  AnonBuffer groups;
  if (grouped && can_group(W)) {
    groups = AnonBuffer(W.nb2);
    if (!groups) throw std::runtime_error("bench_matmul: cannot allocate " + std::to_string(W.nb2) + " bytes");
    group_rows(W, groups.data());
  }
  const int64_t ldy = N;
  std::vector<float> X((size_t)B * K), Y((size_t)B * ldy);  // [B][K] in, [B][ldy] out
  std::mt19937 rng(1234);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (float& v : X) v = nd(rng);
  ThreadPool tp(n_threads);
  matmul(tp, W, X.data(), K, B, Y.data(), ldy);  // warm-up: caches, pages, the pool's threads
  double best = 1e30;
  // one thread: its CPU time, so a busy machine's preemptions do not count as kernel time
  auto now = [n_threads] {
    if (n_threads == 1) { timespec ts; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); return ts.tv_sec + 1e-9 * ts.tv_nsec; }
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  for (int r = 0; r < reps; r++) {
    const double t0 = now();
    matmul(tp, W, X.data(), K, B, Y.data(), ldy);
    best = std::min(best, now() - t0);
  }
  return best;
}

}  // namespace pyllm
