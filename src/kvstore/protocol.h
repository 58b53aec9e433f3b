// Wire protocol of the KV store service: length-prefixed binary frames over TCP
// (docs/kv-format.md §4). Shared by the server (service.h) and the client (client.h) so both
// read one schema (STYLE.md habit 9).
//
//   frame    = u32 LE length | length bytes
//   request  = frame( u8 op | args )
//   response = frame( u8 absl::StatusCode | result on OK, UTF-8 error message otherwise )
//
//   op  name            args                               result
//   1   PUT             encoded block record               (empty)
//   2   GET             key (16 B: lo LE, hi LE)           encoded block record
//   3   LONGEST_PREFIX  u32 n | n keys                     u32 number of leading keys present
//   4   DELETE          key                                (empty)
//   5   STATS           (none)                             12 x u64 (BlockStoreStats, in order)
//   6   METRICS         (none)                             Prometheus text
// One request is in flight per connection at a time; clients pool connections.
#ifndef DEEPINFER_KVSTORE_PROTOCOL_H_
#define DEEPINFER_KVSTORE_PROTOCOL_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv/block_store.h"

namespace deepinfer::kvstore::wire {

enum class Op : uint8_t {
  kPut = 1,
  kGet = 2,
  kLongestPrefix = 3,
  kDelete = 4,
  kStats = 5,
  kMetrics = 6,
};

// Largest frame either side accepts (a block record is a few MiB at most).
inline constexpr uint32_t kMaxFrameBytes = 64u << 20;
// Longest chain one LONGEST_PREFIX request may carry (1M tokens / 128).
inline constexpr uint32_t kMaxChainKeys = 1u << 16;

// Writes one frame whose body is `tag` followed by `a` and `b` (no copy of a/b).
// Unavailable on a socket error.
absl::Status WriteFrame(int fd, uint8_t tag, std::string_view a = {}, std::string_view b = {});
// Reads one frame: its first byte into *tag and the rest into *body. Unavailable on a socket
// error or EOF (the message says "closed" for a clean EOF before the frame); InvalidArgument
// for an empty or oversized frame.
absl::Status ReadFrame(int fd, uint8_t* tag, std::string* body);

std::string EncodeKey(const kv::BlockKey& key);
// InvalidArgument unless exactly 16 bytes.
absl::StatusOr<kv::BlockKey> DecodeKey(std::string_view bytes);
std::string EncodeKeys(std::span<const kv::BlockKey> keys);
// InvalidArgument for a bad count or length.
absl::StatusOr<std::vector<kv::BlockKey>> DecodeKeys(std::string_view bytes);
std::string EncodeU32(uint32_t v);
absl::StatusOr<uint32_t> DecodeU32(std::string_view bytes);
std::string EncodeStats(const kv::BlockStoreStats& s);
absl::StatusOr<kv::BlockStoreStats> DecodeStats(std::string_view bytes);

}  // namespace deepinfer::kvstore::wire

#endif  // DEEPINFER_KVSTORE_PROTOCOL_H_
