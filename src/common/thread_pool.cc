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
    stop_.store(true);
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

void ThreadPool::RunShare(int thread) {
  if (range_fn_ != nullptr) {
    auto [b, e] = RangeOf(job_n_, job_align_, thread, num_threads_);
    if (b < e) (*range_fn_)(b, e);
    return;
  }
  const int64_t chunk = job_align_;
  const int64_t chunks = (job_n_ + chunk - 1) / chunk;
  for (;;) {
    const int64_t c = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (c >= chunks) return;
    (*chunk_fn_)(c * chunk, std::min(job_n_, (c + 1) * chunk), thread);
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t align, const RangeFn& fn) {
  if (n <= 0) return;
  CHECK_GE(align, 1);
  if (num_threads_ == 1 || t_inside_pool_worker) {
    // Serial, but over the same partition so per-range reductions match the parallel run.
    for (int i = 0; i < num_threads_; ++i) {
      auto [b, e] = RangeOf(n, align, i, num_threads_);
      if (b < e) fn(b, e);
    }
    return;
  }
  range_fn_ = &fn;
  chunk_fn_ = nullptr;
  job_n_ = n;
  job_align_ = align;
  Run();
}

void ThreadPool::ParallelForChunks(int64_t n, int64_t chunk, const ChunkFn& fn) {
  if (n <= 0) return;
  CHECK_GE(chunk, 1);
  if (num_threads_ == 1 || t_inside_pool_worker || n <= chunk) {
    for (int64_t b = 0; b < n; b += chunk) fn(b, std::min(n, b + chunk), 0);
    return;
  }
  range_fn_ = nullptr;
  chunk_fn_ = &fn;
  job_n_ = n;
  job_align_ = chunk;
  next_chunk_.store(0, std::memory_order_relaxed);
  Run();
}

void ThreadPool::Run() {
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_seq_cst);  // publishes the job fields
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    // A worker that counted itself a sleeper checks generation_ under mu_ before it waits.
    { std::lock_guard<std::mutex> lock(mu_); }
    work_cv_.notify_all();
  }
  t_inside_pool_worker = true;
  RunShare(0);
  t_inside_pool_worker = false;
  auto done = [this] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!SpinFor(kSpinNanos, done)) {
    std::unique_lock<std::mutex> lock(mu_);
    caller_sleeping_.store(true, std::memory_order_seq_cst);
    done_cv_.wait(lock, [this] { return pending_.load(std::memory_order_seq_cst) == 0; });
    caller_sleeping_.store(false, std::memory_order_relaxed);
  }
  range_fn_ = nullptr;
  chunk_fn_ = nullptr;
}

void ThreadPool::WorkerLoop(int worker_index) {
  t_inside_pool_worker = true;
  uint64_t seen = 0;
  for (;;) {
    auto published = [&] {
      return generation_.load(std::memory_order_acquire) != seen ||
             stop_.load(std::memory_order_relaxed);
    };
    if (!SpinFor(kSpinNanos, published)) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      work_cv_.wait(lock, [&] {
        return generation_.load(std::memory_order_seq_cst) != seen || stop_.load();
      });
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    RunShare(worker_index);
    if (pending_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        caller_sleeping_.load(std::memory_order_seq_cst)) {
      // Taking mu_ orders this notification after the caller's wait began.
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
