#include "kv/block_hash.h"

#include <cstring>

#include "common/check.h"
#include "xxhash.h"

namespace deepinfer::kv {
namespace {

inline void PutU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void PutU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

uint64_t CacheSaltFromString(std::string_view salt) {
  if (salt.empty()) return 0;
  const uint64_t h = XXH3_64bits(salt.data(), salt.size());
  return h == 0 ? 1 : h;  // 0 stays "no salt"
}

std::string BlockKey::ToHex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[i] = kDigits[(hi >> (60 - 4 * i)) & 0xF];
    out[16 + i] = kDigits[(lo >> (60 - 4 * i)) & 0xF];
  }
  return out;
}

std::optional<BlockKey> BlockKey::FromHex(std::string_view hex) {
  if (hex.size() != 32) return std::nullopt;
  BlockKey key;
  for (int i = 0; i < 32; ++i) {
    const int d = HexDigit(hex[i]);
    if (d < 0) return std::nullopt;
    uint64_t& half = i < 16 ? key.hi : key.lo;
    half = (half << 4) | static_cast<uint64_t>(d);
  }
  return key;
}

void BlockKey::EncodeTo(uint8_t out[16]) const {
  PutU64(out, lo);
  PutU64(out + 8, hi);
}

BlockKey BlockKey::DecodeFrom(const uint8_t in[16]) { return BlockKey{GetU64(in), GetU64(in + 8)}; }

BlockKey ComputeBlockKey(const BlockKey& parent, uint64_t cache_salt, uint64_t layout_id,
                         std::span<const int32_t> tokens) {
  CHECK_EQ(tokens.size(), static_cast<size_t>(kKeyBlockTokens)) << "block key needs 128 tokens";
  uint8_t bytes[kBlockHashInputBytes];
  parent.EncodeTo(bytes);
  PutU64(bytes + 16, cache_salt);
  PutU64(bytes + 24, layout_id);
  for (int i = 0; i < kKeyBlockTokens; ++i) {
    PutU32(bytes + 32 + 4 * i, static_cast<uint32_t>(tokens[i]));
  }
  const XXH128_hash_t h = XXH3_128bits_withSeed(bytes, sizeof(bytes), kBlockHashSeed);
  return BlockKey{h.low64, h.high64};
}

std::vector<BlockKey> ComputeBlockKeyChain(uint64_t cache_salt, uint64_t layout_id,
                                           std::span<const int32_t> tokens) {
  const size_t n = tokens.size() / kKeyBlockTokens;
  std::vector<BlockKey> keys;
  keys.reserve(n);
  BlockKey parent = kRootBlockKey;
  for (size_t i = 0; i < n; ++i) {
    parent = ComputeBlockKey(parent, cache_salt, layout_id,
                             tokens.subspan(i * kKeyBlockTokens, kKeyBlockTokens));
    keys.push_back(parent);
  }
  return keys;
}

}  // namespace deepinfer::kv
