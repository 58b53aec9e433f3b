#include "model/deepseek_v41_numpy_rng.h"

#include <array>
#include <limits>

#include "absl/strings/str_cat.h"

namespace deepinfer::model::dsv41 {
namespace {

using u128 = unsigned __int128;

// numpy/random/bit_generator.pyx SeedSequence constants (pool of 4 uint32 words).
constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875;
constexpr uint32_t kInitB = 0x8b51f9dd, kMultB = 0x58f38ded;
constexpr uint32_t kMixMultL = 0xca01f9dd, kMixMultR = 0x4973f715;
constexpr int kXShift = 16;
constexpr int kPoolSize = 4;

uint32_t HashMix(uint32_t value, uint32_t* hash_const) {
  value ^= *hash_const;
  *hash_const *= kMultA;
  value *= *hash_const;
  value ^= value >> kXShift;
  return value;
}

uint32_t Mix(uint32_t x, uint32_t y) {
  uint32_t r = kMixMultL * x - kMixMultR * y;
  r ^= r >> kXShift;
  return r;
}

// SeedSequence(entropy=[seed_word]).generate_state(4, uint64).
std::array<uint64_t, 4> SeedState(uint32_t seed_word) {
  std::array<uint32_t, kPoolSize> pool{};
  uint32_t hc = kInitA;
  for (int i = 0; i < kPoolSize; ++i) pool[i] = HashMix(i == 0 ? seed_word : 0, &hc);
  for (int src = 0; src < kPoolSize; ++src) {
    for (int dst = 0; dst < kPoolSize; ++dst) {
      if (src != dst) pool[dst] = Mix(pool[dst], HashMix(pool[src], &hc));
    }
  }
  uint32_t hb = kInitB;
  std::array<uint32_t, 8> words{};
  for (int i = 0; i < 8; ++i) {
    uint32_t v = pool[i % kPoolSize];
    v ^= hb;
    hb *= kMultB;
    v *= hb;
    v ^= v >> kXShift;
    words[i] = v;
  }
  // uint32 words viewed as little-endian uint64.
  std::array<uint64_t, 4> out{};
  for (int i = 0; i < 4; ++i)
    out[i] = words[2 * i] | (static_cast<uint64_t>(words[2 * i + 1]) << 32);
  return out;
}

// PCG64 (XSL-RR 128/64), numpy/random/src/pcg64.
class Pcg64 {
 public:
  explicit Pcg64(uint32_t seed_word) {
    const std::array<uint64_t, 4> s = SeedState(seed_word);
    const u128 initstate = (static_cast<u128>(s[0]) << 64) | s[1];
    const u128 initseq = (static_cast<u128>(s[2]) << 64) | s[3];
    state_ = 0;
    inc_ = (initseq << 1) | 1;
    Step();
    state_ += initstate;
    Step();
  }
  uint64_t Next() {
    Step();
    const uint64_t x = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
    const unsigned rot = static_cast<unsigned>(state_ >> 122);
    return (x >> rot) | (x << ((64 - rot) & 63));
  }

 private:
  void Step() {
    constexpr u128 kMult = (static_cast<u128>(0x2360ED051FC65DA4ULL) << 64) | 0x4385DF649FCCF645ULL;
    state_ = state_ * kMult + inc_;
  }
  u128 state_ = 0, inc_ = 0;
};

}  // namespace

absl::StatusOr<std::vector<int64_t>> NumpyIntegers(uint64_t seed, int64_t high, int n) {
  if (seed > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("numpy seed ", seed, " >= 2^32 unsupported"));
  }
  if (high <= (int64_t{1} << 32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("numpy integers high = ", high, " <= 2^32 (32-bit path) unsupported"));
  }
  Pcg64 rng(static_cast<uint32_t>(seed));
  // numpy random_bounded_uint64 (use_masked=False): Lemire's multiply-shift with rejection.
  const uint64_t range = static_cast<uint64_t>(high);  // rng + 1 in numpy's terms
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i) {
    u128 m = static_cast<u128>(rng.Next()) * range;
    uint64_t leftover = static_cast<uint64_t>(m);
    if (leftover < range) {
      const uint64_t threshold = (0 - range) % range;
      while (leftover < threshold) {
        m = static_cast<u128>(rng.Next()) * range;
        leftover = static_cast<uint64_t>(m);
      }
    }
    out.push_back(static_cast<int64_t>(m >> 64));
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> EngramMultipliers(int64_t layer_id, int64_t compressed_vocab,
                                                       int max_ngram) {
  if (compressed_vocab <= 0 || layer_id < 0) {
    return absl::InvalidArgumentError(absl::StrCat("Engram multipliers: bad compressed vocab ",
                                                   compressed_vocab, " / layer ", layer_id));
  }
  const int64_t bound =
      std::max<int64_t>(1, std::numeric_limits<int64_t>::max() / compressed_vocab / 2);
  auto v = NumpyIntegers(static_cast<uint64_t>(10007 * layer_id), bound, max_ngram);
  if (!v.ok()) return v.status();
  for (int64_t& x : *v) x = 2 * x + 1;
  return v;
}

}  // namespace deepinfer::model::dsv41
