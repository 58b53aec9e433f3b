#include "common/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <thread>

#include "gtest/gtest.h"

namespace deepinfer {
namespace {

// Records the ranges one ParallelFor produced, sorted by begin.
std::vector<std::pair<int64_t, int64_t>> Ranges(ThreadPool& pool, int64_t n, int64_t align) {
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> out;
  pool.ParallelFor(n, align, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(mu);
    out.emplace_back(b, e);
  });
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ThreadPool, RangesCoverExactlyOnceAndAreAligned) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {1, 2, 7, 64, 1000, 4097}) {
      for (int64_t align : {1, 4, 16}) {
        auto r = Ranges(pool, n, align);
        ASSERT_FALSE(r.empty());
        EXPECT_EQ(r.front().first, 0);
        EXPECT_EQ(r.back().second, n);
        for (size_t i = 0; i + 1 < r.size(); ++i) EXPECT_EQ(r[i].second, r[i + 1].first);
        for (auto [b, e] : r) {
          EXPECT_LT(b, e);
          EXPECT_EQ(b % align, 0) << "n=" << n << " align=" << align;
        }
        EXPECT_LE(r.size(), static_cast<size_t>(threads));
      }
    }
  }
}

TEST(ThreadPool, PartitionIsStaticAcrossCallsAndMatchesRangeOf) {
  ThreadPool pool(4);
  auto first = Ranges(pool, 1001, 8);
  for (int rep = 0; rep < 50; ++rep) EXPECT_EQ(Ranges(pool, 1001, 8), first);
  std::vector<std::pair<int64_t, int64_t>> expected;
  for (int i = 0; i < 4; ++i) {
    auto r = ThreadPool::RangeOf(1001, 8, i, 4);
    if (r.first < r.second) expected.push_back(r);
  }
  EXPECT_EQ(first, expected);
  // The partition is a pure function of (n, align, threads): hand-computed for n=10, 3 threads.
  EXPECT_EQ(ThreadPool::RangeOf(10, 1, 0, 3), (std::pair<int64_t, int64_t>{0, 3}));
  EXPECT_EQ(ThreadPool::RangeOf(10, 1, 1, 3), (std::pair<int64_t, int64_t>{3, 6}));
  EXPECT_EQ(ThreadPool::RangeOf(10, 1, 2, 3), (std::pair<int64_t, int64_t>{6, 10}));
}

TEST(ThreadPool, PerRangeFloatReductionIsBitwiseReproducible) {
  ThreadPool pool(3);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> x(100003);
  for (auto& v : x) v = dist(rng);
  auto reduce = [&] {
    std::vector<float> partial(3, 0.f);
    pool.ParallelFor(x.size(), [&](int64_t b, int64_t e) {
      int idx = -1;
      for (int i = 0; i < 3; ++i) {
        if (ThreadPool::RangeOf(x.size(), 1, i, 3).first == b) idx = i;
      }
      float s = 0;
      for (int64_t i = b; i < e; ++i) s += x[i];
      partial[idx] = s;
    });
    return partial[0] + partial[1] + partial[2];
  };
  float first = reduce();
  for (int rep = 0; rep < 20; ++rep) EXPECT_EQ(reduce(), first);
}

TEST(ThreadPool, NestedParallelForRunsInlineWithoutDeadlock) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  pool.ParallelFor(4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      pool.ParallelFor(10, [&](int64_t b2, int64_t e2) { total += e2 - b2; });
    }
  });
  EXPECT_EQ(total.load(), 40);
}

TEST(ThreadPool, ZeroAndNegativeSizesDoNothing) {
  ThreadPool pool(2);
  int calls = 0;
  pool.ParallelFor(0, [&](int64_t, int64_t) { ++calls; });
  pool.ParallelFor(-5, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ThreadPool, ShutdownJoinsWorkersRepeatedly) {
  // Create and destroy pools many times, some idle, some after work: no hang, no crash.
  for (int i = 0; i < 200; ++i) {
    ThreadPool pool(1 + i % 4);
    if (i % 2) {
      std::atomic<int> n{0};
      pool.ParallelFor(100, [&](int64_t b, int64_t e) { n += e - b; });
      ASSERT_EQ(n.load(), 100);
    }
  }
}

TEST(ThreadPool, ManySmallJobsInSequence) {
  ThreadPool pool(4);
  int64_t sum = 0;
  std::vector<int64_t> partial(4);
  for (int job = 0; job < 2000; ++job) {
    std::fill(partial.begin(), partial.end(), 0);
    pool.ParallelFor(37, [&](int64_t b, int64_t e) {
      int idx = 0;
      while (ThreadPool::RangeOf(37, 1, idx, 4).first != b) ++idx;
      for (int64_t i = b; i < e; ++i) partial[idx] += i;
    });
    sum += std::accumulate(partial.begin(), partial.end(), int64_t{0});
  }
  EXPECT_EQ(sum, 2000 * (36 * 37 / 2));
}

// Jobs separated by pauses longer than the spin window: workers and the caller go from spinning
// to blocking on the condition variables and must still be woken for every job.
TEST(ThreadPool, JobsAfterIdlePausesStillRun) {
  ThreadPool pool(3);
  for (int job = 0; job < 6; ++job) {
    std::this_thread::sleep_for(std::chrono::milliseconds(job % 2 ? 3 : 0));
    std::atomic<int64_t> covered{0};
    pool.ParallelFor(300, [&](int64_t b, int64_t e) {
      if (job % 3 == 0 && b > 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      covered += e - b;
    });
    ASSERT_EQ(covered.load(), 300) << "job " << job;
  }
}

// Dynamic chunks: every chunk [c*chunk, min(n, (c+1)*chunk)) runs exactly once, on a thread
// index of the pool, whatever the timing (one thread made slow takes fewer chunks).
TEST(ThreadPool, ChunksCoverExactlyOnceWithFixedBoundaries) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 7, 64, 1000, 4097}) {
      for (int64_t chunk : {1, 16, 100, 5000}) {
        std::mutex mu;
        std::vector<std::pair<int64_t, int64_t>> got;
        std::vector<int> per_thread(threads);
        pool.ParallelForChunks(n, chunk, [&](int64_t b, int64_t e, int thread) {
          if (thread == threads - 1 && threads > 1 && n > 1000) {
            std::this_thread::sleep_for(std::chrono::microseconds(200));
          }
          std::lock_guard<std::mutex> lock(mu);
          ASSERT_GE(thread, 0);
          ASSERT_LT(thread, threads);
          ++per_thread[thread];
          got.emplace_back(b, e);
        });
        std::sort(got.begin(), got.end());
        std::vector<std::pair<int64_t, int64_t>> want;
        for (int64_t b = 0; b < n; b += chunk) want.emplace_back(b, std::min(n, b + chunk));
        ASSERT_EQ(got, want) << "threads " << threads << " n " << n << " chunk " << chunk;
      }
    }
  }
}

// Static and dynamic jobs interleaved, with idle pauses past the spin window between some, and
// a nested call from inside a chunk (which runs inline on that thread).
TEST(ThreadPool, ChunkJobsInterleaveWithStaticJobsAndNest) {
  ThreadPool pool(3);
  for (int job = 0; job < 300; ++job) {
    if (job % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::atomic<int64_t> covered{0};
    if (job % 2 == 0) {
      pool.ParallelFor(257, 8, [&](int64_t b, int64_t e) { covered += e - b; });
    } else {
      pool.ParallelForChunks(257, 16, [&](int64_t b, int64_t e, int) {
        std::atomic<int64_t> inner{0};
        pool.ParallelForChunks(10, 3, [&](int64_t ib, int64_t ie, int t) {
          EXPECT_EQ(t, 0);
          inner += ie - ib;
        });
        EXPECT_EQ(inner.load(), 10);
        covered += e - b;
      });
    }
    ASSERT_EQ(covered.load(), 257) << "job " << job;
  }
}

}  // namespace
}  // namespace deepinfer
