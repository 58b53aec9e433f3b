// Prefix-cache block keys: the hash chain of ARCHITECTURE.md §4 / KV-CACHE.md §2.
//
//   key(block -1) = kRootBlockKey (all zero bytes)
//   key(block i)  = XXH3-128(seed = kBlockHashSeed, bytes) where bytes (544) are
//                   [0,16)   key(block i-1): low 64 bits LE, then high 64 bits LE
//                   [16,24)  cache salt, u64 LE
//                   [24,32)  model/layout id (KvLayout::layout_id), u64 LE
//                   [32,544) the block's 128 token ids, each as u32 LE
// The byte layout is documented in docs/kv-format.md; keys are byte-stable across processes,
// runs and machines (no pointer, endianness or std::hash dependence). A key covers every token
// before it, so equal keys imply equal prefixes (up to 128-bit collisions).
//
// Thread-safety: all functions are pure and may be called concurrently.
#ifndef DEEPINFER_KV_BLOCK_HASH_H_
#define DEEPINFER_KV_BLOCK_HASH_H_

#include <compare>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::kv {

// Tokens per prefix-cache block (equals model::kBlockTokens; kv may not depend on model).
inline constexpr int kKeyBlockTokens = 128;

// Seed of the block-key hash ("kvchain1" as a big-endian ASCII u64). Changing it changes
// every key: bump kBlockRecordVersion and the docs together.
inline constexpr uint64_t kBlockHashSeed = 0x6B76636861696E31ull;

// Bytes hashed per block (see the layout above).
inline constexpr size_t kBlockHashInputBytes = 16 + 8 + 8 + 4 * kKeyBlockTokens;

// A 128-bit block key. `lo`/`hi` are XXH128_hash_t's low64/high64.
struct BlockKey {
  uint64_t lo = 0;
  uint64_t hi = 0;

  friend bool operator==(const BlockKey&, const BlockKey&) = default;
  friend auto operator<=>(const BlockKey&, const BlockKey&) = default;

  // 32 lowercase hex digits, high half first (the XXH128 canonical form that `xxhsum -H2`
  // prints). Used in file names and logs.
  std::string ToHex() const;
  // Inverse of ToHex; nullopt unless `hex` is exactly 32 hex digits.
  static std::optional<BlockKey> FromHex(std::string_view hex);

  // The 16 bytes stored in records and on the wire: lo LE then hi LE.
  void EncodeTo(uint8_t out[16]) const;
  static BlockKey DecodeFrom(const uint8_t in[16]);
};

// Parent key of block 0.
inline constexpr BlockKey kRootBlockKey{0, 0};

// Hash functor for unordered containers (the key is already uniformly distributed).
struct BlockKeyHash {
  size_t operator()(const BlockKey& k) const { return static_cast<size_t>(k.lo ^ (k.hi * 31)); }
};

// Key of one block. `tokens` must hold exactly kKeyBlockTokens ids (CHECKed: a bug otherwise);
// ids are reinterpreted as u32.
BlockKey ComputeBlockKey(const BlockKey& parent, uint64_t cache_salt, uint64_t layout_id,
                         std::span<const int32_t> tokens);

// The u64 salt of a request's cache_salt string (XXH3-64 of its bytes; 0 for ""), so that
// requests with different salts never share a block key.
uint64_t CacheSaltFromString(std::string_view salt);

// Keys of every complete block of `tokens` (floor(size / 128) keys), chained from kRootBlockKey.
// A trailing partial block gets no key.
std::vector<BlockKey> ComputeBlockKeyChain(uint64_t cache_salt, uint64_t layout_id,
                                           std::span<const int32_t> tokens);

}  // namespace deepinfer::kv

#endif  // DEEPINFER_KV_BLOCK_HASH_H_
