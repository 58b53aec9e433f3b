#include "common/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "common/check.h"
#include "common/config.h"

namespace deepinfer {
namespace {
thread_local bool t_inside_pool_worker = false;

// Spins (with a pause hint) until done() or kSpinNanos have passed; returns done()'s last value.
template <class Done>
bool SpinFor(int64_t nanos, Done done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(nanos);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    if (std::chrono::steady_clock::now() >= deadline) return done();
  }
}
}  // namespace

ThreadPool::ThreadPool(int num_threads)
    : num_threads_(num_threads > 0 ? num_threads
                                   : std::max(1u, std::thread::hardware_concurrency())) {
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

std::pair<int64_t, int64_t> ThreadPool::RangeOf(int64_t n, int64_t align, int index, int count) {
  CHECK_GE(align, 1);
  const int64_t units = (n + align - 1) / align;
  int64_t b = (units * index / count) * align;
  int64_t e = (units * (index + 1) / count) * align;
  return {std::min(b, n), std::min(e, n)};
}

void ThreadPool::ParallelFor(int64_t n, int64_t align, const RangeFn& fn) {
  if (n <= 0) return;
  if (num_threads_ == 1 || t_inside_pool_worker) {
    // Serial, but over the same partition so per-range reductions match the parallel run.
    for (int i = 0; i < num_threads_; ++i) {
      auto [b, e] = RangeOf(n, align, i, num_threads_);
      if (b < e) fn(b, e);
    }
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_fn_ = &fn;
    job_n_ = n;
    job_align_ = align;
    pending_.store(num_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  work_cv_.notify_all();
  {
    t_inside_pool_worker = true;
    auto [b, e] = RangeOf(n, align, 0, num_threads_);
    if (b < e) fn(b, e);
    t_inside_pool_worker = false;
  }
  SpinFor(kSpinNanos, [this] { return pending_.load(std::memory_order_acquire) == 0; });
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
  job_fn_ = nullptr;
}

void ThreadPool::WorkerLoop(int worker_index) {
  t_inside_pool_worker = true;
  uint64_t seen = 0;
  for (;;) {
    const RangeFn* fn;
    int64_t n, align;
    SpinFor(kSpinNanos, [&] { return generation_.load(std::memory_order_acquire) != seen; });
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_.load() != seen; });
      if (stop_) return;
      seen = generation_.load();
      fn = job_fn_;
      n = job_n_;
      align = job_align_;
    }
    auto [b, e] = RangeOf(n, align, worker_index, num_threads_);
    if (b < e) (*fn)(b, e);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Take mu_ so the caller cannot miss the notification between its check and its wait.
      std::lock_guard<std::mutex> lock(mu_);
      done_cv_.notify_one();
    }
  }
}

ThreadPool* ThreadPool::Default() {
  static ThreadPool* pool = new ThreadPool(Env().num_threads);
  return pool;
}

}  // namespace deepinfer
