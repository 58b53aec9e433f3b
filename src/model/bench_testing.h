// Measurement helpers shared by the model benchmarks (deepseek_v4_bench.cc,
// deepseek_v41_bench.cc): the read bandwidth a decode roofline divides by, and the resident set.
// Header-only, benchmark-only (uses Google Benchmark's DoNotOptimize).
#ifndef DEEPINFER_MODEL_BENCH_TESTING_H_
#define DEEPINFER_MODEL_BENCH_TESTING_H_

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/clock.h"
#include "common/thread_pool.h"

namespace deepinfer::model::bench {

// Read bandwidth: sum a 512 MiB buffer with the kernel thread pool (best of 3), bytes/s. Measured
// once per process.
inline double ReadBandwidth() {
  static double bw = [] {
    const int64_t n = (512ll << 20) / 4;
    std::vector<float> buf(n, 1.0f);
    ThreadPool* pool = ThreadPool::Default();
    std::vector<float> partial(pool->num_threads() * 16);
    double best = 0;
    for (int rep = 0; rep < 3; ++rep) {
      Stopwatch sw;
      pool->ParallelFor(n, 4096, [&](int64_t b, int64_t e) {
        float acc[8] = {};
        for (int64_t i = b; i + 8 <= e; i += 8) {
          for (int j = 0; j < 8; ++j) acc[j] += buf[i + j];
        }
        partial[(b * pool->num_threads() / n) * 16] = acc[0] + acc[7];
      });
      benchmark::DoNotOptimize(partial.data());
      best = std::max(best, n * 4.0 / sw.ElapsedSeconds());
    }
    return best;
  }();
  return bw;
}

// VmRSS of this process in MB (0 when /proc is unavailable).
inline double RssMb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return 0;
}

}  // namespace deepinfer::model::bench

#endif  // DEEPINFER_MODEL_BENCH_TESTING_H_
