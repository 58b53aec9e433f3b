// The snapshot record: how an SWA state snapshot (kv/snapshot_cache.h) is stored in the host
// shared-memory tier, so that an engine restarted on the same machine finds the snapshots its
// predecessor took (KV-CACHE.md §4). Byte layout (little-endian; docs/kv-format.md §5):
//
//   0   u32  magic "DISN" (bytes 44 49 53 4E)     4   u16  version (1)   6  u16  header bytes (64)
//   8   u64  layout id                            16  16B  block key of the boundary (lo, hi)
//   32  u32  flags (bit 0: approximate)           36  u32  reserved (zero)
//   40  u64  state bytes                          48  u64  state checksum XXH3-64(state, seed)
//   56  u64  header checksum XXH3-64(bytes [0, 56), seed)
//   [64, 64 + state bytes)  the state slot's bytes
// Decoding checks every field, the key and layout the reader expects, the length and both
// checksums: any failure is DataLoss, and the caller treats the snapshot as absent.
//
// Thread-safety: pure functions.
#ifndef DEEPINFER_KV_SNAPSHOT_RECORD_H_
#define DEEPINFER_KV_SNAPSHOT_RECORD_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "kv/block_hash.h"
#include "kv/snapshot_cache.h"

namespace deepinfer::kv {

inline constexpr size_t kSnapshotRecordHeaderBytes = 64;

// Serialises a snapshot taken at the boundary whose block key is `key`.
std::string EncodeSnapshotRecord(const BlockKey& key, uint64_t layout_id,
                                 const StateSnapshot& snapshot);

// The snapshot in `bytes`, checked to be the one for `key` under `layout_id` with
// `state_bytes` bytes of state. DataLoss naming the failed check.
absl::StatusOr<StateSnapshot> DecodeSnapshotRecord(std::string_view bytes, const BlockKey& key,
                                                   uint64_t layout_id, size_t state_bytes);

}  // namespace deepinfer::kv

#endif  // DEEPINFER_KV_SNAPSHOT_RECORD_H_
