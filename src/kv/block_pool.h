// BlockPool: the paged KV arena of 128-token blocks (ARCHITECTURE.md §4, KV-CACHE.md §1).
//
// One block id covers every layer's paged caches (the model's KvLayout says how the
// `block_bytes` are divided). Blocks are reference counted so a block can be shared (prefix
// caching, n > 1); a block returns to the free list when its count drops to zero. The pool only
// knows byte sizes: it is generic over model layouts (kv -> common only).
//
// Thread-safety: none; owned by the engine thread.
#ifndef DEEPINFER_KV_BLOCK_POOL_H_
#define DEEPINFER_KV_BLOCK_POOL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

namespace deepinfer::kv {

class BlockPool {
 public:
  // Creates `num_blocks` blocks of `block_bytes` bytes (arena [num_blocks][block_bytes], 64-byte
  // aligned, zero-filled). Errors: InvalidArgument for num_blocks < 1 or block_bytes < 1,
  // ResourceExhausted if the arena cannot be allocated.
  static absl::StatusOr<std::unique_ptr<BlockPool>> Create(int64_t num_blocks, int64_t block_bytes);
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_bytes() const { return block_bytes_; }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_used() const { return num_blocks_ - num_free(); }
  // Start of the arena; block b is at base() + b * block_bytes().
  uint8_t* base() const { return base_; }

  // Allocates `count` blocks (ref count 1 each) and appends their ids to `out`. All or nothing:
  // returns false (and changes nothing) when fewer than `count` are free.
  bool Allocate(int64_t count, std::vector<int32_t>* out);
  // Adds a reference to an allocated block.
  void IncRef(int32_t block);
  // Drops one reference to each block; a block whose count reaches zero is freed.
  void Release(const std::vector<int32_t>& blocks);
  int32_t ref_count(int32_t block) const;

 private:
  BlockPool(int64_t num_blocks, int64_t block_bytes, uint8_t* base);

  const int64_t num_blocks_;
  const int64_t block_bytes_;
  uint8_t* const base_;
  std::vector<int32_t> ref_;   // [num_blocks]
  std::vector<int32_t> free_;  // LIFO free list of block ids
};

}  // namespace deepinfer::kv

#endif  // DEEPINFER_KV_BLOCK_POOL_H_
