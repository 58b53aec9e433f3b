// HostTier: the L1 tier of KV-CACHE.md §3 — one POSIX shared-memory arena per machine holding
// fixed-size block slots under an LRU index, shared by several processes (an engine that reads
// blocks and a fetcher process that fills them from the KV store).
//
// Arena layout (one shm object, mapped at any address by each process; only offsets stored):
//   [ArenaHeader][SlotMeta x num_slots][bucket heads: int32 x num_buckets][pad to 4 KiB]
//   [slot data: num_slots x slot_bytes]   slot s at data_offset + s * slot_bytes
// The index (hash buckets, LRU list, free list) lives in the arena and is guarded by one
// process-shared robust pthread mutex; a process that dies holding it leaves the mutex
// recoverable (EOWNERDEAD is taken over), though a slot it was writing stays reserved until
// the arena is recreated.
//
// Slot contents are opaque bytes (normally an encoded kv::BlockRecord, so readers can verify
// them). Readers pin a slot (PinnedSlot) and read it in place; a pinned slot is never evicted
// or overwritten. Put copies outside the lock: the slot is reserved, filled, then published,
// so concurrent readers never see a partial slot.
//
// Thread-safety: a HostTier object may be used by many threads; many processes may map the
// same arena.
#ifndef DEEPINFER_KV_HOST_TIER_H_
#define DEEPINFER_KV_HOST_TIER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv/block_hash.h"

namespace deepinfer::kv {

struct HostTierStats {
  uint64_t num_slots = 0;
  uint64_t slot_bytes = 0;
  uint64_t used_slots = 0;  // slots holding a published block
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t inserts = 0;
  uint64_t evictions = 0;
  // Slots with at least one read pin now (PinnedSlot alive in any process mapping the arena);
  // 0 when nothing reads, so a test can check that no reader leaked a pin.
  uint64_t pinned_slots = 0;
};

class HostTier;

// A read pin on one slot: the bytes stay valid and unmodified until the pin is released
// (destroyed or Release()d). Move-only; must not outlive its HostTier.
class PinnedSlot {
 public:
  PinnedSlot() = default;
  PinnedSlot(PinnedSlot&& other) noexcept;
  PinnedSlot& operator=(PinnedSlot&& other) noexcept;
  PinnedSlot(const PinnedSlot&) = delete;
  PinnedSlot& operator=(const PinnedSlot&) = delete;
  ~PinnedSlot() { Release(); }

  std::span<const uint8_t> bytes() const { return bytes_; }
  std::string_view view() const {
    return {reinterpret_cast<const char*>(bytes_.data()), bytes_.size()};
  }
  void Release();

 private:
  friend class HostTier;
  PinnedSlot(HostTier* tier, int32_t slot, std::span<const uint8_t> bytes)
      : tier_(tier), slot_(slot), bytes_(bytes) {}
  HostTier* tier_ = nullptr;
  int32_t slot_ = -1;
  std::span<const uint8_t> bytes_;
};

class HostTier {
 public:
  // Creates shm object `name` (POSIX name, e.g. "/deepinfer-kv-l1") with `num_slots` slots of
  // `slot_bytes` bytes. AlreadyExists if it exists; InvalidArgument for a bad name or zero
  // sizes; ResourceExhausted / Internal when the kernel refuses the memory.
  static absl::StatusOr<std::unique_ptr<HostTier>> Create(const std::string& name,
                                                          size_t slot_bytes, int32_t num_slots);
  // Maps an existing arena created by Create (in this or another process). NotFound if
  // absent; DataLoss if it is not a host-tier arena of this version.
  static absl::StatusOr<std::unique_ptr<HostTier>> Open(const std::string& name);
  // Removes the shm name (mappings stay valid until unmapped). NotFound if absent.
  static absl::Status Unlink(const std::string& name);

  ~HostTier();
  HostTier(const HostTier&) = delete;
  HostTier& operator=(const HostTier&) = delete;

  size_t slot_bytes() const;
  int32_t num_slots() const;

  // Stores `bytes` under `key` (OK and a recency refresh if already present), evicting the
  // least-recently-used unpinned block when no slot is free. InvalidArgument when bytes exceed
  // slot_bytes; ResourceExhausted when every slot is pinned or being written.
  absl::Status Put(const BlockKey& key, std::string_view bytes);
  // Pins block `key` for in-place reading and marks it most recently used. NotFound on miss.
  absl::StatusOr<PinnedSlot> Acquire(const BlockKey& key);
  // Copy-out read; NotFound on miss.
  absl::StatusOr<std::string> Get(const BlockKey& key);
  bool Contains(const BlockKey& key);
  // Removes `key` if present and unpinned. FailedPrecondition if pinned; OK if absent.
  absl::Status Erase(const BlockKey& key);
  HostTierStats Stats();

 private:
  friend class PinnedSlot;
  struct Arena;
  HostTier(void* base, size_t mapped_bytes);
  void Unpin(int32_t slot);

  void* base_;
  size_t mapped_bytes_;
};

}  // namespace deepinfer::kv

#endif  // DEEPINFER_KV_HOST_TIER_H_
