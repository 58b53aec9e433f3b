// BlockPool: the paged KV arena of 128-token blocks (ARCHITECTURE.md §4, KV-CACHE.md §1) with
// the prefix-cache index over it (KV-CACHE.md §2, §5; L0 of §3).
//
// One block id covers every layer's paged caches (the model's KvLayout says how the
// `block_bytes` are divided). Blocks are reference counted so a block can be shared (prefix
// caching, n > 1). A block that holds a complete 128-token block of some sequence can be
// registered under its chain key (kv/block_hash.h); when its last reference goes, a registered
// block is not freed but stays cached on an evictable list until its memory is needed, so a
// later request with the same prefix finds it (Find) and shares it (IncRef).
//
// Eviction (in Allocate, when the free list is empty) is least recently released first, among
// cached blocks that nobody holds and that no other cached block extends: a parent is never
// evicted while a cached child of it exists, so every cached chain is reachable from the root.
// A block is registered only when its parent key is the root or names the block that precedes
// it in its owner's block table (Register's `parent_block`), so whoever holds a cached block
// also holds its ancestors, and every unreferenced cached block is reclaimable: num_free()
// counts free and evictable blocks alike.
//
// The pool only knows byte sizes and keys: it is generic over model layouts (kv -> common only).
// Thread-safety: none; owned by the engine thread.
#ifndef DEEPINFER_KV_BLOCK_POOL_H_
#define DEEPINFER_KV_BLOCK_POOL_H_

#include <cstdint>
#include <memory>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kv/block_hash.h"

namespace deepinfer::kv {

// Receives the prefix index's changes (the seam for KV events that prefix-aware routers
// consume, e.g. llm-d's BlockStored / BlockRemoved). Called on the pool's thread, inside the
// pool's operations: implementations must not call back into the pool.
class PrefixIndexObserver {
 public:
  virtual ~PrefixIndexObserver() = default;
  virtual void OnBlockStored(const BlockKey& key, const BlockKey& parent, bool approximate) = 0;
  virtual void OnBlockRemoved(const BlockKey& key) = 0;
};

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
  // Blocks Allocate can hand out: free ones plus cached ones nobody holds (evictable).
  int64_t num_free() const { return static_cast<int64_t>(free_.size()) + num_evictable_; }
  // Blocks someone holds (reference count > 0).
  int64_t num_used() const { return num_blocks_ - num_free(); }
  // Registered (cached) blocks, held or evictable.
  int64_t num_cached() const { return static_cast<int64_t>(index_.size()); }
  // Cached blocks evicted so far (cumulative).
  int64_t num_evicted() const { return num_evicted_; }
  // Start of the arena; block b is at base() + b * block_bytes().
  uint8_t* base() const { return base_; }

  // Allocates `count` blocks (ref count 1 each) and appends their ids to `out`, evicting cached
  // blocks when the free list runs out. All or nothing: returns false (and changes nothing) when
  // fewer than `count` can be had.
  bool Allocate(int64_t count, std::vector<int32_t>* out);
  // Adds a reference to a block that is allocated or cached (a cached block nobody held leaves
  // the evictable list).
  void IncRef(int32_t block);
  // Drops one reference to each block; a block whose count reaches zero is freed, or, when
  // registered, becomes evictable.
  void Release(const std::vector<int32_t>& blocks);
  int32_t ref_count(int32_t block) const;

  // Registers held block `block` (its 128 tokens' KV completely written) under `key`, whose
  // parent key is `parent` (kRootBlockKey for block 0). `parent_block` is the block that
  // precedes it in the caller's block table (-1 for block 0). Returns false and registers
  // nothing when the key is already cached (another block holds the same prefix), the block is
  // already registered, or the parent is not the cached block `parent_block` (a chain that is
  // not cached). `approximate` marks KV computed from a replayed window state.
  bool Register(int32_t block, const BlockKey& key, const BlockKey& parent, int32_t parent_block,
                bool approximate);
  // The cached block registered under `key`, or -1. Takes no reference.
  int32_t Find(const BlockKey& key) const;
  // Whether registered block `block` is marked approximate (false for unregistered blocks).
  bool approximate(int32_t block) const;
  // Whether `block` is registered.
  bool cached(int32_t block) const;
  // Unregisters every block: evictable ones are freed, held ones stay with their holders as
  // private blocks. Observers see each removal.
  void ClearIndex();

  // Observer of registrations and removals (nullptr = none). Not owned.
  void set_observer(PrefixIndexObserver* observer) { observer_ = observer; }

 private:
  BlockPool(int64_t num_blocks, int64_t block_bytes, uint8_t* base);

  struct Entry {
    BlockKey key;
    BlockKey parent;
    int32_t parent_block = -1;  // cached block of `parent`, -1 for the root
    int32_t cached_children = 0;
    bool approximate = false;
  };
  // Eligible for eviction: unreferenced and without cached children.
  bool Eligible(int32_t block) const;
  void UpdateEligibility(int32_t block);
  // Removes `block` from the index (it must be unreferenced and childless) and frees it.
  void Evict(int32_t block);

  const int64_t num_blocks_;
  const int64_t block_bytes_;
  uint8_t* const base_;
  std::vector<int32_t> ref_;   // [num_blocks]
  std::vector<int32_t> free_;  // LIFO free list of block ids (never registered ones)
  std::unordered_map<BlockKey, int32_t, BlockKeyHash> index_;  // key -> block
  std::vector<Entry> entry_;                                   // [num_blocks], valid if cached
  std::vector<bool> is_cached_;                                // [num_blocks]
  std::vector<uint64_t> released_tick_;                        // [num_blocks]
  std::set<std::pair<uint64_t, int32_t>> eligible_;            // (release tick, block)
  int64_t num_evictable_ = 0;  // cached blocks with ref 0
  int64_t num_evicted_ = 0;
  uint64_t tick_ = 0;
  PrefixIndexObserver* observer_ = nullptr;
};

}  // namespace deepinfer::kv

#endif  // DEEPINFER_KV_BLOCK_POOL_H_
