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
  { std::lock_guard<std::mutex> lk(mu_); cmd_.fetch_add(2); }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::worker(int ith) {
  uint64_t seen = 0;
  for (;;) {
    // spin briefly (the next op usually follows within microseconds), then sleep
    int spins = 0;
    while (cmd_.load(std::memory_order_acquire) == seen) {
      // ~0.1-0.3 ms of spinning covers the gap between ops of one forward; then sleep so an idle or
      // oversubscribed machine is not burned
      if (++spins < 2048) { PYLLM_PAUSE(); continue; }
      std::unique_lock<std::mutex> lk(mu_);
      sleepers_.fetch_add(1);
      cv_.wait(lk, [&] { return cmd_.load(std::memory_order_acquire) != seen; });
      sleepers_.fetch_sub(1);
      break;
    }
    seen = cmd_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    if (!(seen & 1)) {  // run(): the caller waits for every worker, so job_ is this command's
      (*job_)(ith, n_threads_);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
      continue;
    }
    // run_any(): join only while the job of the generation seen is open (the caller may have closed it,
    // or moved on to later commands); inside, the caller waits for us and any_job_ stays this job's
    const uint64_t open = (seen >> 1) * 2;
    uint64_t st = any_state_.load(std::memory_order_acquire);
    while ((st >> 16) == open) {
      if (any_state_.compare_exchange_weak(st, st + 1, std::memory_order_acq_rel)) {
        (*any_job_)(ith);
        any_state_.fetch_sub(1, std::memory_order_acq_rel);
        break;
      }
    }
  }
}

void ThreadPool::publish(uint64_t cmd) {
  n_dispatches_.fetch_add(1, std::memory_order_relaxed);
  {
    // the mutex orders the store against a worker that is about to sleep
    std::lock_guard<std::mutex> lk(mu_);
    cmd_.store(cmd, std::memory_order_release);
  }
  if (sleepers_.load() > 0) cv_.notify_all();
}

void ThreadPool::wait_until_zero(const std::atomic<uint64_t>& v, uint64_t mask) {
  if ((v.load(std::memory_order_acquire) & mask) == 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  // a worker may have been descheduled: after a short spin, give it the core
  for (int spins = 0; (v.load(std::memory_order_acquire) & mask) != 0; spins++) {
    if (spins < 4096) PYLLM_PAUSE(); else std::this_thread::yield();
  }
  wait_ns_.fetch_add((uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count(),
                     std::memory_order_relaxed);
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) { fn(0, 1); return; }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  publish((cmd_.load(std::memory_order_relaxed) >> 1 << 1) + 2);
  fn(0, n_threads_);
  wait_until_zero(pending_, ~0ull);
}

void ThreadPool::run_any(const std::function<void(int)>& fn) {
  if (n_threads_ == 1) { fn(0); return; }
  const uint64_t gen = (cmd_.load(std::memory_order_relaxed) >> 1) + 1;
  any_job_ = &fn;
  any_state_.store((2 * gen) << 16, std::memory_order_relaxed);
  publish(gen << 1 | 1);
  fn(0);
  // close the job (workers not inside by now skip it), then wait for those inside
  uint64_t st = any_state_.load(std::memory_order_acquire);
  while (!any_state_.compare_exchange_weak(st, (2 * gen + 1) << 16 | (st & 0xFFFF), std::memory_order_acq_rel)) {}
  wait_until_zero(any_state_, 0xFFFF);
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
