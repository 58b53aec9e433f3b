#include "kv/block_pool.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace deepinfer::kv {

absl::StatusOr<std::unique_ptr<BlockPool>> BlockPool::Create(int64_t num_blocks,
                                                             int64_t block_bytes) {
  if (num_blocks < 1 || block_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("BlockPool: num_blocks (", num_blocks,
                                                   ") and block_bytes (", block_bytes,
                                                   ") must be >= 1"));
  }
  if (num_blocks > (int64_t{1} << 31) - 1) {
    return absl::InvalidArgumentError(absl::StrCat("BlockPool: too many blocks: ", num_blocks));
  }
  const int64_t stride = (block_bytes + 63) / 64 * 64;
  if (stride != block_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("BlockPool: block_bytes must be a multiple of 64, got ", block_bytes));
  }
  const int64_t total = num_blocks * block_bytes;
  // Anonymous mmap: page aligned and zero-filled lazily, so a large budget costs nothing until
  // blocks are touched.
  void* mem = mmap(nullptr, static_cast<size_t>(total), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("BlockPool: cannot map ", total, " bytes of KV blocks"));
  }
  return std::unique_ptr<BlockPool>(
      new BlockPool(num_blocks, block_bytes, static_cast<uint8_t*>(mem)));
}

BlockPool::BlockPool(int64_t num_blocks, int64_t block_bytes, uint8_t* base)
    : num_blocks_(num_blocks),
      block_bytes_(block_bytes),
      base_(base),
      ref_(num_blocks, 0),
      entry_(num_blocks),
      is_cached_(num_blocks, false),
      released_tick_(num_blocks, 0) {
  free_.reserve(num_blocks);
  // Highest id at the bottom so block 0 is handed out first (easier to read in traces).
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

BlockPool::~BlockPool() { munmap(base_, static_cast<size_t>(num_blocks_ * block_bytes_)); }

bool BlockPool::Eligible(int32_t block) const {
  return is_cached_[block] && ref_[block] == 0 && entry_[block].cached_children == 0;
}

void BlockPool::UpdateEligibility(int32_t block) {
  const auto item = std::make_pair(released_tick_[block], block);
  if (Eligible(block)) {
    eligible_.insert(item);
  } else {
    eligible_.erase(item);
  }
}

void BlockPool::Evict(int32_t block) {
  CHECK(Eligible(block));
  eligible_.erase({released_tick_[block], block});
  Entry& e = entry_[block];
  index_.erase(e.key);
  is_cached_[block] = false;
  --num_evictable_;
  ++num_evicted_;
  free_.push_back(block);
  if (observer_ != nullptr) observer_->OnBlockRemoved(e.key);
  if (e.parent_block >= 0) {
    CHECK(entry_[e.parent_block].cached_children > 0);
    --entry_[e.parent_block].cached_children;
    UpdateEligibility(e.parent_block);
  }
  e = Entry{};
}

bool BlockPool::Allocate(int64_t count, std::vector<int32_t>* out) {
  CHECK(count >= 0);
  if (count > num_free()) return false;
  for (int64_t i = 0; i < count; ++i) {
    if (free_.empty()) {
      // Every unreferenced cached block is reclaimable (see the header), so the least recently
      // released leaf exists while num_free() > 0.
      CHECK(!eligible_.empty()) << "evictable blocks without an eligible leaf";
      Evict(eligible_.begin()->second);
    }
    const int32_t b = free_.back();
    free_.pop_back();
    CHECK(ref_[b] == 0);
    ref_[b] = 1;
    out->push_back(b);
  }
  return true;
}

void BlockPool::IncRef(int32_t block) {
  CHECK(block >= 0 && block < num_blocks_);
  if (ref_[block] == 0) {
    CHECK(is_cached_[block]) << "IncRef of free block " << block;
    eligible_.erase({released_tick_[block], block});
    --num_evictable_;
  }
  ++ref_[block];
}

void BlockPool::Release(const std::vector<int32_t>& blocks) {
  // Tail blocks first, so that within one release the deeper blocks are the older ones.
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    const int32_t b = *it;
    CHECK(b >= 0 && b < num_blocks_);
    CHECK(ref_[b] > 0) << "double free of block " << b;
    if (--ref_[b] > 0) continue;
    if (!is_cached_[b]) {
      free_.push_back(b);
      continue;
    }
    ++num_evictable_;
    released_tick_[b] = ++tick_;
    UpdateEligibility(b);
  }
}

int32_t BlockPool::ref_count(int32_t block) const {
  CHECK(block >= 0 && block < num_blocks_);
  return ref_[block];
}

bool BlockPool::Register(int32_t block, const BlockKey& key, const BlockKey& parent,
                         int32_t parent_block, bool approximate) {
  CHECK(block >= 0 && block < num_blocks_);
  CHECK(ref_[block] > 0) << "Register of unheld block " << block;
  if (is_cached_[block] || index_.count(key) > 0) return false;
  if (parent == kRootBlockKey) {
    if (parent_block != -1) return false;
  } else {
    auto it = index_.find(parent);
    if (it == index_.end() || it->second != parent_block) return false;
  }
  index_.emplace(key, block);
  is_cached_[block] = true;
  entry_[block] = Entry{key, parent, parent_block, 0, approximate};
  if (parent_block >= 0) {
    ++entry_[parent_block].cached_children;
    UpdateEligibility(parent_block);
  }
  if (observer_ != nullptr) observer_->OnBlockStored(key, parent, approximate);
  return true;
}

int32_t BlockPool::Find(const BlockKey& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? -1 : it->second;
}

bool BlockPool::approximate(int32_t block) const {
  CHECK(block >= 0 && block < num_blocks_);
  return is_cached_[block] && entry_[block].approximate;
}

bool BlockPool::cached(int32_t block) const {
  CHECK(block >= 0 && block < num_blocks_);
  return is_cached_[block];
}

void BlockPool::ClearIndex() {
  for (const auto& [key, block] : index_) {
    if (observer_ != nullptr) observer_->OnBlockRemoved(key);
    is_cached_[block] = false;
    entry_[block] = Entry{};
    if (ref_[block] == 0) free_.push_back(block);
  }
  index_.clear();
  eligible_.clear();
  num_evictable_ = 0;
}

}  // namespace deepinfer::kv
