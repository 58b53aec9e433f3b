#include "kernels/read_bandwidth.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/thread_pool.h"

namespace deepinfer::kernels {

size_t LastLevelCacheBytes() {
  size_t best_level = 0, bytes = 0;
  for (int i = 0; i < 16; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i);
    std::ifstream level_in(dir + "/level"), size_in(dir + "/size");
    size_t level = 0;
    std::string size;  // e.g. "32768K"
    if (!(level_in >> level) || !(size_in >> size) || size.empty()) continue;
    size_t value = std::strtoull(size.c_str(), nullptr, 10);
    const char unit = size.back();
    if (unit == 'K') value <<= 10;
    if (unit == 'M') value <<= 20;
    if (unit == 'G') value <<= 30;
    if (level >= best_level) best_level = level, bytes = value;
  }
  return bytes;
}

size_t BeyondCacheBytes(size_t floor) {
  static const size_t llc = LastLevelCacheBytes();
  return std::max(floor, 4 * llc);
}

size_t ReadBandwidthArrayBytes() {
  static const size_t bytes = BeyondCacheBytes(size_t{512} << 20) / 64 * 64;
  return bytes;
}

const float* ReadBandwidthArray() {
  static const float* data = [] {
    const size_t bytes = ReadBandwidthArrayBytes();
    float* p = static_cast<float*>(std::aligned_alloc(64, bytes));
    const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
    ThreadPool::Default()->ParallelFor(n, 64, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = 1.0f;
    });
    return p;
  }();
  return data;
}

float ReadBandwidthArrayOnce() {
  const float* data = ReadBandwidthArray();
  const int64_t n = static_cast<int64_t>(ReadBandwidthArrayBytes() / sizeof(float));
  ThreadPool* pool = ThreadPool::Default();
  std::vector<float> partial(pool->num_threads() * 16, 0.0f);
  pool->ParallelFor(n, 1024, [&](int64_t b, int64_t e) {
    constexpr int kStreams = 4;
    const int64_t len = (e - b) / kStreams / 32 * 32;
    const float* p[kStreams];
    for (int s = 0; s < kStreams; ++s) p[s] = data + b + s * len;
    __m256 a[kStreams][2];
    for (int s = 0; s < kStreams; ++s) a[s][0] = a[s][1] = _mm256_setzero_ps();
    for (int64_t i = 0; i < len; i += 16) {
      for (int s = 0; s < kStreams; ++s) {
        a[s][0] = _mm256_add_ps(a[s][0], _mm256_load_ps(p[s] + i));
        a[s][1] = _mm256_add_ps(a[s][1], _mm256_load_ps(p[s] + i + 8));
      }
    }
    __m256 t = _mm256_setzero_ps();
    for (int s = 0; s < kStreams; ++s) t = _mm256_add_ps(t, _mm256_add_ps(a[s][0], a[s][1]));
    partial[(b / 1024) % partial.size()] = _mm256_cvtss_f32(t);
  });
  float sum = 0;
  for (float v : partial) sum += v;
  return sum;
}

double ReadBandwidthBytesPerSecond() {
  static const double bps = [] {
    volatile float sink = ReadBandwidthArrayOnce();  // warm-up (page faults, frequency)
    std::vector<double> rates;
    for (int r = 0; r < 5; ++r) {
      const int64_t t0 = MonotonicNanos();
      sink = ReadBandwidthArrayOnce();
      rates.push_back(static_cast<double>(ReadBandwidthArrayBytes()) * 1e9 /
                      static_cast<double>(MonotonicNanos() - t0));
    }
    (void)sink;
    std::sort(rates.begin(), rates.end());
    return rates[2];
  }();
  return bps;
}

}  // namespace deepinfer::kernels
