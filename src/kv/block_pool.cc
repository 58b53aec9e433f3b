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
    : num_blocks_(num_blocks), block_bytes_(block_bytes), base_(base), ref_(num_blocks, 0) {
  free_.reserve(num_blocks);
  // Highest id at the bottom so block 0 is handed out first (easier to read in traces).
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

BlockPool::~BlockPool() { munmap(base_, static_cast<size_t>(num_blocks_ * block_bytes_)); }

bool BlockPool::Allocate(int64_t count, std::vector<int32_t>* out) {
  CHECK(count >= 0);
  if (count > num_free()) return false;
  for (int64_t i = 0; i < count; ++i) {
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
  CHECK(ref_[block] > 0) << "IncRef of free block " << block;
  ++ref_[block];
}

void BlockPool::Release(const std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) {
    CHECK(b >= 0 && b < num_blocks_);
    CHECK(ref_[b] > 0) << "double free of block " << b;
    if (--ref_[b] == 0) free_.push_back(b);
  }
}

int32_t BlockPool::ref_count(int32_t block) const {
  CHECK(block >= 0 && block < num_blocks_);
  return ref_[block];
}

}  // namespace deepinfer::kv
