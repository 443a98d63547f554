// Persistent worker threads: a parallel_for costs one atomic generation bump and a short spin,
// never a thread creation (a 1 ms decode step issues ~100 of them).
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pyllm {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  int n_threads() const { return n_threads_; }
  // fn(ith, nth) runs once on each of nth = n_threads() threads (the caller is thread 0).
  void run(const std::function<void(int, int)>& fn);
  // Splits [0, n) into contiguous chunks over the threads; small n runs inline.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_per_thread = 1);
  // run() calls that woke the workers (every run() with 2+ threads), and the time the caller spent in
  // them waiting for the workers after its own share (late wake-ups, preemption, uneven shares): the
  // synchronisation cost as the forward sees it. `pyllm bench` reports both per token.
  uint64_t n_dispatches() const { return n_dispatches_.load(std::memory_order_relaxed); }
  uint64_t wait_ns() const { return wait_ns_.load(std::memory_order_relaxed); }

 private:
  void worker(int ith);
  int n_threads_;
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> gen_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> sleepers_{0};
  std::atomic<uint64_t> n_dispatches_{0}, wait_ns_{0};
};

}  // namespace pyllm
