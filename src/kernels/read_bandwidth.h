// The one read-bandwidth measure every decode roofline ratio divides by (issue #30: "settle one
// measure for every roofline ratio"): kernels_bench pairs it with each matrix-vector product,
// and the model benchmarks (deepseek_v4_bench, deepseek_v41_bench) divide active weight bytes per
// token by it. The array spans at least 4x the last-level cache so the rate is DRAM's, and each
// pool thread reads its range as 4 interleaved sequential streams, as a matrix-vector product
// reads 4 weight rows at once — the best plain read rate measured on our CPUs.
#ifndef DEEPINFER_KERNELS_READ_BANDWIDTH_H_
#define DEEPINFER_KERNELS_READ_BANDWIDTH_H_

#include <cstddef>

namespace deepinfer::kernels {

// cpu0's last-level cache in bytes from sysfs (the highest `level` among
// /sys/devices/system/cpu/cpu0/cache/index*); 0 when sysfs does not say.
size_t LastLevelCacheBytes();

// max(floor, 4 x LastLevelCacheBytes()): the smallest working set whose rotation measures DRAM
// rather than a partly cached set.
size_t BeyondCacheBytes(size_t floor);

// A float array of ReadBandwidthArrayBytes() (= BeyondCacheBytes(512 MiB)), all 1.0f, allocated
// and touched once per process.
const float* ReadBandwidthArray();
size_t ReadBandwidthArrayBytes();

// Reads the whole array once on the kernel thread pool; returns a value derived from every
// element (so the reads cannot be elided).
float ReadBandwidthArrayOnce();

// Median of 5 timed ReadBandwidthArrayOnce() calls after a warm-up, bytes per second; measured
// on first use and cached for the process.
double ReadBandwidthBytesPerSecond();

}  // namespace deepinfer::kernels

#endif  // DEEPINFER_KERNELS_READ_BANDWIDTH_H_
