// StateCache: fixed per-sequence state slots (sliding-window rings, compressor partial state;
// ARCHITECTURE.md §4, KV-CACHE.md §1). A sequence holds one slot while it runs; the model
// initialises the slot when it processes position 0, so a freed slot needs no clearing.
// Only byte sizes are known here (kv -> common only). slot_bytes may be 0 (model without state):
// slots are then pure bookkeeping and base() is null.
//
// Thread-safety: none; owned by the engine thread.
#ifndef DEEPINFER_KV_STATE_CACHE_H_
#define DEEPINFER_KV_STATE_CACHE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"

namespace deepinfer::kv {

class StateCache {
 public:
  // Arena [num_slots][slot_bytes], 64-byte aligned. Errors: InvalidArgument for num_slots < 1,
  // slot_bytes < 0 or not a multiple of 64; ResourceExhausted if the arena cannot be allocated.
  static absl::StatusOr<std::unique_ptr<StateCache>> Create(int64_t num_slots, int64_t slot_bytes);
  ~StateCache();
  StateCache(const StateCache&) = delete;
  StateCache& operator=(const StateCache&) = delete;

  int64_t num_slots() const { return num_slots_; }
  int64_t slot_bytes() const { return slot_bytes_; }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_used() const { return num_slots_ - num_free(); }
  uint8_t* base() const { return base_; }

  // Takes a free slot; nullopt when none is free.
  std::optional<int32_t> Allocate();
  // Returns a slot taken by Allocate (CHECK-fails on a double free).
  void Free(int32_t slot);

 private:
  StateCache(int64_t num_slots, int64_t slot_bytes, uint8_t* base);

  const int64_t num_slots_;
  const int64_t slot_bytes_;
  uint8_t* const base_;
  std::vector<bool> used_;     // [num_slots]
  std::vector<int32_t> free_;  // LIFO free list
};

}  // namespace deepinfer::kv

#endif  // DEEPINFER_KV_STATE_CACHE_H_
