// Measurement helpers shared by the model benchmarks (deepseek_v4_bench.cc,
// deepseek_v41_bench.cc): the read bandwidth a decode roofline divides by, and the resident set.
// Header-only, benchmark-only.
#ifndef DEEPINFER_MODEL_BENCH_TESTING_H_
#define DEEPINFER_MODEL_BENCH_TESTING_H_

#include <fstream>
#include <string>

#include "kernels/read_bandwidth.h"

namespace deepinfer::model::bench {

// Read bandwidth in bytes/s: the one measure every roofline ratio uses
// (kernels/read_bandwidth.h; the array spans >= 4x the last-level cache). Measured once per
// process.
inline double ReadBandwidth() { return kernels::ReadBandwidthBytesPerSecond(); }

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
