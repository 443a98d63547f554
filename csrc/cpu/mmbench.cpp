#include "cpu/mmbench.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/matmul.h"
#include "cpu/threadpool.h"

namespace pyllm {

double bench_matmul(ggml_type type, const uint8_t* w, int64_t N, int64_t K, int B, int n_threads, int reps) {
  if (N < 1 || K < 1 || B < 1 || n_threads < 1 || reps < 1)
    throw std::invalid_argument("bench_matmul: N, K, B, n_threads and reps must be >= 1");
  Weight W;
  W.name = "bench";
  W.type = type;
  W.ne[0] = K; W.ne[1] = N;
  W.nb1 = row_size(type, K);
  W.nb2 = W.nb1 * N;
  W.data = w;
  const int64_t ldy = N;
  std::vector<float> X((size_t)B * K), Y((size_t)B * ldy);  // [B][K] in, [B][ldy] out
  std::mt19937 rng(1234);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (float& v : X) v = nd(rng);
  ThreadPool tp(n_threads);
  matmul(tp, W, X.data(), K, B, Y.data(), ldy);  // warm-up: caches, pages, the pool's threads
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    const auto t0 = std::chrono::steady_clock::now();
    matmul(tp, W, X.data(), K, B, Y.data(), ldy);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace pyllm
