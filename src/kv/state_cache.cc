#include "kv/state_cache.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace deepinfer::kv {

absl::StatusOr<std::unique_ptr<StateCache>> StateCache::Create(int64_t num_slots,
                                                               int64_t slot_bytes) {
  if (num_slots < 1 || num_slots > (int64_t{1} << 31) - 1 || slot_bytes < 0 ||
      slot_bytes % 64 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("StateCache: need 1 <= num_slots (", num_slots,
                                                   ") and slot_bytes (", slot_bytes,
                                                   ") a non-negative multiple of 64"));
  }
  uint8_t* base = nullptr;
  if (slot_bytes > 0) {
    const int64_t total = num_slots * slot_bytes;
    void* mem = mmap(nullptr, static_cast<size_t>(total), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) {
      return absl::ResourceExhaustedError(
          absl::StrCat("StateCache: cannot map ", total, " bytes of state slots"));
    }
    base = static_cast<uint8_t*>(mem);
  }
  return std::unique_ptr<StateCache>(new StateCache(num_slots, slot_bytes, base));
}

StateCache::StateCache(int64_t num_slots, int64_t slot_bytes, uint8_t* base)
    : num_slots_(num_slots), slot_bytes_(slot_bytes), base_(base), used_(num_slots, false) {
  free_.reserve(num_slots);
  for (int64_t s = num_slots - 1; s >= 0; --s) free_.push_back(static_cast<int32_t>(s));
}

StateCache::~StateCache() {
  if (base_ != nullptr) munmap(base_, static_cast<size_t>(num_slots_ * slot_bytes_));
}

std::optional<int32_t> StateCache::Allocate() {
  if (free_.empty()) return std::nullopt;
  const int32_t s = free_.back();
  free_.pop_back();
  used_[s] = true;
  return s;
}

void StateCache::Free(int32_t slot) {
  CHECK(slot >= 0 && slot < num_slots_);
  CHECK(used_[slot]) << "double free of state slot " << slot;
  used_[slot] = false;
  free_.push_back(slot);
}

}  // namespace deepinfer::kv
