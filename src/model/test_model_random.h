// Deterministic random tensors of the make-test-model checkpoints (deepseek_v4_make_test_model,
// deepseek_v41_make_test_model): every tensor's values are a function of (seed, tensor name)
// only, so a checkpoint's bytes do not depend on the order tensors are written or on threads.
#ifndef DEEPINFER_MODEL_TEST_MODEL_RANDOM_H_
#define DEEPINFER_MODEL_TEST_MODEL_RANDOM_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "model/deepseek_v4_numerics.h"
#include "model/safetensors_writer.h"

namespace deepinfer::model::testgen {

// SplitMix64 finaliser.
inline uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// FNV-1a 64 of a tensor name.
inline uint64_t NameHash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// Deterministic stream keyed by (seed, tensor name).
class Rng {
 public:
  Rng(uint64_t seed, const std::string& name) : state_(SplitMix(seed ^ NameHash(name))) {}
  uint64_t Next() { return state_ = SplitMix(state_); }
  // Uniform in [-sqrt(3) std, sqrt(3) std] (standard deviation `std`).
  float Uniform(float std) {
    const double u = static_cast<double>(Next() >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
    return static_cast<float>((2.0 * u - 1.0) * 1.7320508075688772 * std);
  }

 private:
  uint64_t state_;
};

// Adds tensor `name` of `shape` with values mean + Uniform(std), as F32 or BF16 (rounded to
// nearest even), generated while the writer writes.
inline void AddRandomF32(SafetensorsWriter* w, uint64_t seed, const std::string& name,
                         std::vector<int64_t> shape, float mean, float std) {
  w->AddGenerated(name, "F32", shape, [=](uint8_t* out) {
    Rng rng(seed, name);
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    for (int64_t i = 0; i < n; ++i) {
      const float v = mean + rng.Uniform(std);
      std::memcpy(out + 4 * i, &v, 4);
    }
  });
}
inline void AddRandomBf16(SafetensorsWriter* w, uint64_t seed, const std::string& name,
                          std::vector<int64_t> shape, float mean, float std) {
  w->AddGenerated(name, "BF16", shape, [=](uint8_t* out) {
    Rng rng(seed, name);
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t b = dsv4::F32ToBf16Bits(mean + rng.Uniform(std));
      std::memcpy(out + 2 * i, &b, 2);
    }
  });
}

}  // namespace deepinfer::model::testgen

#endif  // DEEPINFER_MODEL_TEST_MODEL_RANDOM_H_
