// The block record: the self-describing, checksummed unit that every KV tier below the engine
// stores and moves (host tier slots, KV store files, store RPCs). Byte layout in
// docs/kv-format.md §2 (all integers little-endian):
//
//   [0, 600)          header
//     0   u32  magic "DIKV" (bytes 44 49 4B 56)
//     4   u16  version (kBlockRecordVersion)
//     6   u16  header bytes (600)
//     8   u64  layout id            16  u64  cache salt
//     24  16B  key (lo, hi)         40  16B  parent key (lo, hi)
//     56  u32  token count (128)    60  u8   traffic class   61  u8 flags (bit 0: approximate)
//     62  2B reserved (zero)
//     64  u64  payload bytes        72  u64  payload checksum XXH3-64(payload, seed)
//     80  128 x u32 token ids
//     592 u64  header checksum XXH3-64(bytes [0, 592), seed)
//   [600, 600 + payload bytes)  payload: the engine's paged caches of the block, opaque here.
//
// Decoding checks every field and recomputes the key from (parent, salt, layout, tokens), so a
// record returned for key K really is the block K names (KV-CACHE.md §2). Any failed check is
// DataLoss: callers treat the record as absent (a miss) and delete it.
//
// Thread-safety: pure functions; safe to call concurrently.
#ifndef DEEPINFER_KV_BLOCK_RECORD_H_
#define DEEPINFER_KV_BLOCK_RECORD_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "kv/block_hash.h"

namespace deepinfer::kv {

inline constexpr uint32_t kBlockRecordMagic = 0x564B4944;  // "DIKV" as LE bytes
inline constexpr uint16_t kBlockRecordVersion = 2;  // 2: flags byte (approximate)
inline constexpr size_t kBlockRecordHeaderBytes = 600;
// Seed of the record checksums (XXH3-64), "kvrecrd1" as a big-endian ASCII u64.
inline constexpr uint64_t kRecordChecksumSeed = 0x6B76726563726431ull;

// Traffic class of the request that produced a block; selects the TTL the store's GC applies
// (DEEPINFER-DESIGN.md §4: 3 days agent, 7 days chat).
enum class TrafficClass : uint8_t {
  kChat = 0,
  kAgent = 1,
};
inline constexpr int kNumTrafficClasses = 2;
const char* TrafficClassName(TrafficClass c);

// Everything a record says about its block besides the payload.
struct BlockMeta {
  BlockKey key;
  BlockKey parent;
  uint64_t cache_salt = 0;
  uint64_t layout_id = 0;
  TrafficClass traffic_class = TrafficClass::kChat;
  // The block's KV was computed from a replayed (approximate) window state (KV-CACHE.md §5):
  // exact-mode prefix caches never reuse it. Not part of the key.
  bool approximate = false;
  std::array<int32_t, kKeyBlockTokens> tokens{};
};

// Meta of the block after `parent` holding `tokens` (exactly 128, CHECKed); computes the key.
BlockMeta MakeBlockMeta(const BlockKey& parent, uint64_t cache_salt, uint64_t layout_id,
                        std::span<const int32_t> tokens,
                        TrafficClass traffic_class = TrafficClass::kChat);

// Serialises header + payload. InvalidArgument when meta.key is not the key of
// (parent, salt, layout, tokens).
absl::StatusOr<std::string> EncodeBlockRecord(const BlockMeta& meta, std::string_view payload);

// Header fields of a record, validated without reading the payload (store index rebuilds).
struct BlockRecordHeader {
  BlockMeta meta;
  uint64_t payload_bytes = 0;
  uint64_t payload_checksum = 0;
};

// Parses and checks the first kBlockRecordHeaderBytes of `bytes` (magic, version, header size,
// header checksum, token count, traffic class, reserved bytes, key = hash of its inputs).
// DataLoss naming the failed check; DataLoss too when `bytes` is shorter than a header.
absl::StatusOr<BlockRecordHeader> DecodeBlockRecordHeader(std::string_view bytes);

// A fully checked record; `payload` points into the decoded buffer.
struct DecodedBlockRecord {
  BlockMeta meta;
  std::string_view payload;
};

// Checks the header, the total length (header + payload bytes, exactly) and the payload
// checksum; with `expected_key`, also that the record is that block. DataLoss on any failure.
absl::StatusOr<DecodedBlockRecord> DecodeBlockRecord(
    std::string_view bytes, std::optional<BlockKey> expected_key = std::nullopt);

}  // namespace deepinfer::kv

#endif  // DEEPINFER_KV_BLOCK_RECORD_H_
