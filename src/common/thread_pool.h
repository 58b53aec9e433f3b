// A fixed-size thread pool: static partitions (ParallelFor) and dynamically handed-out chunks
// (ParallelForChunks).
//
// ParallelFor(n, fn) splits [0, n) into num_threads() contiguous ranges whose boundaries depend
// only on (n, num_threads(), align): range i = [floor(i*u/T)*align, floor((i+1)*u/T)*align) with
// u = ceil(n/align) units, clamped to n. The same size always gives the same partition, so a
// reduction done per range gives bitwise-identical results run after run (kernels rely on this
// for batch invariance, KERNELS.md). The calling thread runs range 0; workers run the others.
//
// ParallelForChunks(n, chunk, fn) cuts [0, n) into fixed chunks [c*chunk, (c+1)*chunk) and hands
// them to whichever thread is free next (an atomic counter), so a thread slowed by anything
// else on the machine takes fewer chunks instead of holding everyone up at the end. The chunk
// boundaries depend only on (n, chunk); which thread runs a chunk does not, so it suits work
// whose items are computed independently (a Linear's output rows), not per-range reductions.
//
// Thread-safety: a parallel call may be issued from one thread at a time per pool (the engine's
// kernel pool has one owner); a call issued from inside a worker runs serially inline.
// Shutdown: the destructor wakes and joins every worker; tasks never throw (-fno-exceptions
// style: a task that throws terminates the process).
//
// Hand-off: a decode step issues hundreds of sub-millisecond parallel calls, and waking a
// thread blocked on a condition variable costs ~15-20 us on a virtual machine (measured: 17.8 us
// per empty ParallelFor, about 5 % of a 4096x4096 MXFP4 matrix-vector product). So idle workers
// and the waiting caller first spin on atomics for up to kSpinNanos before they block; a pool
// left idle longer than that sleeps and costs no CPU. While everyone spins, a call takes no lock
// and makes no system call: the job is published by one release increment of a generation
// counter, and the mutex / condition variables are touched only when a thread actually sleeps
// (counted in sleepers_ / caller_sleeping_, checked Dekker-style with sequentially consistent
// atomics so that no wake-up is lost).
#ifndef DEEPINFER_COMMON_THREAD_POOL_H_
#define DEEPINFER_COMMON_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace deepinfer {

class ThreadPool {
 public:
  // Function applied to one range [begin, end).
  using RangeFn = std::function<void(int64_t begin, int64_t end)>;
  // Function applied to one chunk [begin, end) by the thread with index `thread` in
  // [0, num_threads()) (the caller is 0): an index for per-thread scratch.
  using ChunkFn = std::function<void(int64_t begin, int64_t end, int thread)>;

  // Creates a pool of `num_threads` >= 1 threads in total (the caller counts as one, so
  // num_threads - 1 workers are started). num_threads <= 0 means
  // std::thread::hardware_concurrency().
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Runs fn over the static partition of [0, n) described above; returns when every range is
  // done. Ranges may be empty (then fn is not called for them). align >= 1.
  void ParallelFor(int64_t n, const RangeFn& fn) { ParallelFor(n, 1, fn); }
  void ParallelFor(int64_t n, int64_t align, const RangeFn& fn);

  // Runs fn over the chunks [c*chunk, min(n, (c+1)*chunk)) of [0, n), each exactly once, handed
  // out dynamically (see the file comment); returns when every chunk is done. chunk >= 1.
  void ParallelForChunks(int64_t n, int64_t chunk, const ChunkFn& fn);

  // The [begin, end) of range `index` of `count` ranges over n with the given alignment; the
  // exact partition ParallelFor uses (exposed for tests and for callers that pre-plan work).
  static std::pair<int64_t, int64_t> RangeOf(int64_t n, int64_t align, int index, int count);

  // A process-wide pool sized by DEEPINFER_NUM_THREADS (default: all cores). Created on first
  // use and never destroyed.
  static ThreadPool* Default();

 private:
  // How long an idle worker, or the caller waiting for workers, spins before blocking.
  static constexpr int64_t kSpinNanos = 50'000;

  void WorkerLoop(int worker_index);
  // Publishes the job set in the fields below to the workers, runs the caller's share, waits.
  void Run();
  // The share of the current job of the thread with index `thread`.
  void RunShare(int thread);

  const int num_threads_;
  std::vector<std::thread> workers_;

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  // The job being run: written by the caller before the release increment of generation_ that
  // publishes it, read by workers after their acquire load of it; valid while pending_ > 0.
  // Exactly one of range_fn_ / chunk_fn_ is set.
  const RangeFn* range_fn_ = nullptr;
  const ChunkFn* chunk_fn_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_align_ = 1;  // ParallelFor's alignment, or ParallelForChunks' chunk
  // The next chunk to hand out; on its own cache line, as the one spun on (generation_) is.
  alignas(64) std::atomic<int64_t> next_chunk_{0};
  alignas(64) std::atomic<uint64_t> generation_{0};
  // Workers still running the current job.
  alignas(64) std::atomic<int> pending_{0};
  // Workers blocked (or about to block) on work_cv_, and whether the caller is blocked (or
  // about to) on done_cv_: the other side notifies only when these are set.
  std::atomic<int> sleepers_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};
};

}  // namespace deepinfer

#endif  // DEEPINFER_COMMON_THREAD_POOL_H_
