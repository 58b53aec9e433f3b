// Configuration of a KV store node (`deepinfer kvstore`), with defaults from
// DEEPINFER-DESIGN.md §4 (GC watermark, TTL 3 days agent / 7 days chat), and the parsers for
// the human-readable flag values it takes.
#ifndef DEEPINFER_KVSTORE_CONFIG_H_
#define DEEPINFER_KVSTORE_CONFIG_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv/block_record.h"

namespace deepinfer::kvstore {

inline constexpr int64_t kNanosPerSecond = 1000000000;
inline constexpr int64_t kNanosPerDay = 86400 * kNanosPerSecond;

struct KvStoreConfig {
  // Root directory of the record tree (created if missing). May be a DFS mount.
  std::string dir;
  // Bytes of record files the node may hold; GC keeps usage under it. Must be > 0.
  uint64_t capacity_bytes = 0;
  // When usage exceeds high_watermark * capacity, GC evicts least-recently-used records until
  // usage is at most low_watermark * capacity. 0 < low <= high <= 1.
  double high_watermark = 0.9;
  double low_watermark = 0.8;
  // Time-to-live since last use, per kv::TrafficClass (index = class): chat 7 d, agent 3 d.
  std::array<int64_t, kv::kNumTrafficClasses> ttl_nanos = {7 * kNanosPerDay, 3 * kNanosPerDay};
  // fdatasync each record and fsync its directory before acknowledging a put. Off only for
  // tests and benchmarks of the non-durable path.
  bool sync = true;
  // Period of the background TTL sweep; puts that cross the high watermark wake GC early.
  int64_t gc_interval_nanos = 10 * kNanosPerSecond;
  // Start the background GC thread (tests call KvStore::RunGc() directly instead).
  bool background_gc = true;

  // Shared-directory mode (store.h, docs/kv-format.md §3): other processes — engines writing
  // with `--kv-store-dir`, a `deepinfer kvstore --gc-only` GC — use the directory at the same
  // time. The directory is then the only truth: lookups go to the file system, recency lives in
  // the files' mtimes, and every GC pass rescans the directory.
  bool shared = false;
  // Shared mode: a temp file younger than this may belong to a writer still filling it; open
  // and GC delete only older ones (a crashed writer's leftovers). Wall-clock nanoseconds; must
  // exceed the longest put (a put that takes longer fails, it never publishes a partial file).
  int64_t temp_grace_nanos = 600 * kNanosPerSecond;
  // Shared mode: the GC never removes a record whose mtime is younger than this: a lookup that
  // hit it (which refreshes the mtime, at most hit_grace_nanos / 4 stale) is followed by its
  // fetch well within this time. Wall-clock nanoseconds; keep it above the engines' fetch
  // deadline plus the clock skew between the writer and GC hosts.
  int64_t hit_grace_nanos = 60 * kNanosPerSecond;

  // InvalidArgument naming the bad field.
  absl::Status Validate() const;
};

// "3d", "12h", "30m", "45s", "250ms", or a bare number of seconds -> nanoseconds.
// InvalidArgument naming the bad text.
absl::StatusOr<int64_t> ParseDuration(std::string_view text);
// "10G", "512M", "64K", "2T" (binary multiples, optional trailing "B"/"iB") or plain bytes.
absl::StatusOr<uint64_t> ParseByteSize(std::string_view text);

}  // namespace deepinfer::kvstore

#endif  // DEEPINFER_KVSTORE_CONFIG_H_
