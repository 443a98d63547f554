// Persistent worker threads: a parallel_for costs one atomic command store and a short spin,
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
  // fn(ith) runs on the caller (ith 0) and on each worker that starts before the caller's own call has
  // returned; a worker that wakes later skips the job, so the caller never waits for a descheduled worker
  // that has not started. For work taken from a shared counter, which any subset of threads completes.
  void run_any(const std::function<void(int)>& fn);
  // fn(c) for every chunk c in [0, n), taken from a shared counter by the threads of run_any: a thread that
  // is descheduled or slowed by its neighbour takes fewer chunks instead of holding up the op, and one that
  // has not started when the caller ran out of chunks is not waited for. Which thread computes a chunk
  // must not change its numbers.
  template <class F>
  void for_chunks(int64_t n, const F& fn) {
    std::atomic<int64_t> next{0};
    run_any([&](int) {
      for (int64_t c; (c = next.fetch_add(1, std::memory_order_relaxed)) < n;) fn(c);
    });
  }
  // Splits [0, n) into contiguous chunks over the threads; small n runs inline.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_per_thread = 1);
  // run() / run_any() calls that woke the workers (all of them with 2+ threads), and the time the caller spent in
  // them waiting for the workers after its own share (late wake-ups, preemption, uneven shares): the
  // synchronisation cost as the forward sees it. `pyllm bench` reports both per token.
  uint64_t n_dispatches() const { return n_dispatches_.load(std::memory_order_relaxed); }
  uint64_t wait_ns() const { return wait_ns_.load(std::memory_order_relaxed); }

 private:
  void worker(int ith);
  void publish(uint64_t cmd);  // wakes the workers for command `cmd`
  void wait_until_zero(const std::atomic<uint64_t>& v, uint64_t mask);  // the caller's barrier, timed
  int n_threads_;
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* job_ = nullptr;
  const std::function<void(int)>* any_job_ = nullptr;
  // gen << 1 | kind (1: run_any), stored after the job's fields (release), read first by the workers
  std::atomic<uint64_t> cmd_{0};
  // run_any's job: tag << 16 | workers inside, tag = 2 * gen while open, 2 * gen + 1 once closed
  std::atomic<uint64_t> any_state_{0};
  std::atomic<uint64_t> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> sleepers_{0};
  std::atomic<uint64_t> n_dispatches_{0}, wait_ns_{0};
};

}  // namespace pyllm
