#include "cpu/threadpool.h"

#include <chrono>

#if defined(__x86_64__)
#include <immintrin.h>
#define PYLLM_PAUSE() _mm_pause()
#else
#define PYLLM_PAUSE() std::this_thread::yield()
#endif

namespace pyllm {

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  for (int i = 1; i < n_threads_; i++) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  { std::lock_guard<std::mutex> lk(mu_); gen_.fetch_add(1); }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::worker(int ith) {
  uint64_t seen = 0;
  for (;;) {
    // spin briefly (the next op usually follows within microseconds), then sleep
    int spins = 0;
    while (gen_.load(std::memory_order_acquire) == seen) {
      // ~0.1-0.3 ms of spinning covers the gap between ops of one forward; then sleep so an idle or
      // oversubscribed machine is not burned
      if (++spins < 2048) { PYLLM_PAUSE(); continue; }
      std::unique_lock<std::mutex> lk(mu_);
      sleepers_.fetch_add(1);
      cv_.wait(lk, [&] { return gen_.load(std::memory_order_acquire) != seen; });
      sleepers_.fetch_sub(1);
      break;
    }
    seen = gen_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    (*job_)(ith, n_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) { fn(0, 1); return; }
  n_dispatches_.fetch_add(1, std::memory_order_relaxed);
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_release);
  {
    // the mutex orders the bump against a worker that is about to sleep
    std::lock_guard<std::mutex> lk(mu_);
    gen_.fetch_add(1, std::memory_order_acq_rel);
  }
  if (sleepers_.load() > 0) cv_.notify_all();
  fn(0, n_threads_);
  if (pending_.load(std::memory_order_acquire) == 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  // a worker may have been descheduled: after a short spin, give it the core
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; spins++) {
    if (spins < 4096) PYLLM_PAUSE(); else std::this_thread::yield();
  }
  wait_ns_.fetch_add((uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count(),
                     std::memory_order_relaxed);
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_per_thread) {
  if (n <= 0) return;
  int nth = n_threads_;
  if (n < 2 * min_per_thread || nth == 1) { fn(0, n); return; }
  run([&](int ith, int nt) {
    int64_t per = (n + nt - 1) / nt;
    int64_t b = ith * per, e = std::min<int64_t>(n, b + per);
    if (b < e) fn(b, e);
  });
}

}  // namespace pyllm
