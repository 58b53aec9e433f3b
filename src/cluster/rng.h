// A small deterministic random-number generator for policy code and the simulator
// (cluster.md SIM-2: policies reach randomness only through an injected generator).
//
// SplitMix64 (Steele, Lea, Flood 2014): a 64-bit state advanced by a Weyl constant and mixed by
// a fixed finalizer. Byte-stable across platforms and compilers (no std:: distribution is used,
// since their outputs are implementation-defined). Named streams: Rng(seed).Fork(stream_id)
// gives an independent generator per purpose, so adding draws to one stream never shifts another.
//
// Thread-safety: a Rng is a plain value; use one per thread.
#ifndef DEEPINFER_CLUSTER_RNG_H_
#define DEEPINFER_CLUSTER_RNG_H_

#include <cmath>
#include <cstdint>

namespace deepinfer::cluster {

// SplitMix64 finalizer: a bijective mix of one 64-bit word.
inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Deterministic generator; see the file comment.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(Mix64(seed ^ 0x6A09E667F3BCC909ull)) {}

  // An independent generator for the named stream `stream` (same seed, different sequence).
  Rng Fork(uint64_t stream) const { return Rng(state_ ^ Mix64(stream + 0x9E3779B97F4A7C15ull)); }

  // Next 64 uniform bits.
  uint64_t Next() {
    state_ += 0x9E3779B97F4A7C15ull;
    return Mix64(state_);
  }
  // Uniform double in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n); n > 0. Uses the multiply-shift reduction (bias < n / 2^64).
  uint64_t Below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
  }
  // Exponential with the given mean (> 0).
  double Exponential(double mean) { return -mean * std::log1p(-Uniform()); }
  // Standard normal by Box-Muller (one value per call; the pair's second value is discarded
  // so that the stream position depends only on the number of calls).
  double Normal() {
    const double u1 = 1.0 - Uniform();  // (0, 1]
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // Log-normal with the given median and shape sigma.
  double LogNormal(double median, double sigma) { return median * std::exp(sigma * Normal()); }
  // Pareto with shape alpha and scale x_min (>= x_min).
  double Pareto(double alpha, double x_min) {
    return x_min * std::pow(1.0 - Uniform(), -1.0 / alpha);
  }
  // Geometric number of trials >= 1 with the given mean (>= 1).
  int64_t Geometric(double mean) {
    if (mean <= 1.0) return 1;
    const double p = 1.0 / mean;
    return 1 + static_cast<int64_t>(std::floor(std::log1p(-Uniform()) / std::log1p(-p)));
  }
  // Gamma(shape, scale) by Marsaglia-Tsang (shape > 0).
  double Gamma(double shape, double scale) {
    if (shape < 1.0) {
      const double u = Uniform();
      return Gamma(shape + 1.0, scale) * std::pow(u, 1.0 / shape);
    }
    const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
      double x = Normal(), v = 1.0 + c * x;
      if (v <= 0) continue;
      v = v * v * v;
      const double u = Uniform();
      if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v * scale;
    }
  }

 private:
  uint64_t state_;
};

}  // namespace deepinfer::cluster

#endif  // DEEPINFER_CLUSTER_RNG_H_
