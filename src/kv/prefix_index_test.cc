// Prefix index of the block pool: sharing, eviction order (a parent never before its cached
// children, least recently released first), registration rules and reset.
#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"

namespace deepinfer::kv {
namespace {

// Keys of a chain of `n` blocks whose tokens are `first`, first+1, ... (distinct chains for
// distinct `first`).
std::vector<BlockKey> Chain(int n, int32_t first, uint64_t salt = 0) {
  std::vector<int32_t> tokens(static_cast<size_t>(n) * kKeyBlockTokens);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = first + static_cast<int32_t>(i % 7);
  tokens[0] = first;
  return ComputeBlockKeyChain(salt, /*layout_id=*/42, tokens);
}

// Allocates and registers a chain as one sequence would, then releases it.
std::vector<int32_t> CacheChain(BlockPool* pool, const std::vector<BlockKey>& keys) {
  std::vector<int32_t> blocks;
  EXPECT_TRUE(pool->Allocate(static_cast<int64_t>(keys.size()), &blocks));
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_TRUE(pool->Register(blocks[i], keys[i], i == 0 ? kRootBlockKey : keys[i - 1],
                               i == 0 ? -1 : blocks[i - 1], false));
  }
  pool->Release(blocks);
  return blocks;
}

class RecordingObserver : public PrefixIndexObserver {
 public:
  void OnBlockStored(const BlockKey& key, const BlockKey&, bool) override { stored.push_back(key); }
  void OnBlockRemoved(const BlockKey& key) override { removed.push_back(key); }
  std::vector<BlockKey> stored, removed;
};

TEST(PrefixIndexTest, ReleasedRegisteredBlocksStayFindableAndCountAsFree) {
  ASSERT_OK_AND_ASSIGN(auto pool, BlockPool::Create(4, 64));
  const std::vector<BlockKey> keys = Chain(2, 100);
  const std::vector<int32_t> blocks = CacheChain(pool.get(), keys);
  EXPECT_EQ(pool->num_used(), 0);
  EXPECT_EQ(pool->num_free(), 4);
  EXPECT_EQ(pool->num_cached(), 2);
  EXPECT_EQ(pool->Find(keys[0]), blocks[0]);
  EXPECT_EQ(pool->Find(keys[1]), blocks[1]);
  // A hit takes references: the blocks leave the evictable list.
  pool->IncRef(blocks[0]);
  pool->IncRef(blocks[1]);
  EXPECT_EQ(pool->num_used(), 2);
  EXPECT_EQ(pool->ref_count(blocks[1]), 1);
  std::vector<int32_t> more;
  EXPECT_FALSE(pool->Allocate(3, &more));  // only 2 can be had: held cached blocks are not
  ASSERT_TRUE(pool->Allocate(2, &more));
  EXPECT_EQ(pool->Find(keys[0]), blocks[0]);  // not evicted
  pool->Release(more);
  pool->Release({blocks[0], blocks[1]});
}

TEST(PrefixIndexTest, ParentIsNeverEvictedBeforeItsCachedChildren) {
  // Chain A (3 blocks) released first, so its parent is the oldest block; chain B later.
  ASSERT_OK_AND_ASSIGN(auto pool, BlockPool::Create(5, 64));
  const std::vector<BlockKey> a = Chain(3, 1);
  const std::vector<BlockKey> b = Chain(2, 50);
  CacheChain(pool.get(), a);
  CacheChain(pool.get(), b);
  // Allocating one block at a time evicts leaves only; after each eviction every cached key's
  // parent is still cached.
  std::vector<BlockKey> order;
  std::vector<int32_t> held;
  for (int i = 0; i < 5; ++i) {
    std::set<BlockKey> before;
    for (const auto& k : a) if (pool->Find(k) >= 0) before.insert(k);
    for (const auto& k : b) if (pool->Find(k) >= 0) before.insert(k);
    ASSERT_TRUE(pool->Allocate(1, &held));
    for (const auto& k : before) {
      if (pool->Find(k) < 0) order.push_back(k);
    }
    auto check_chain = [&](const std::vector<BlockKey>& c) {
      for (size_t j = 1; j < c.size(); ++j) {
        if (pool->Find(c[j]) >= 0) {
          EXPECT_GE(pool->Find(c[j - 1]), 0) << "orphaned child";
        }
      }
    };
    check_chain(a);
    check_chain(b);
  }
  // Eviction order: chain A's leaf (released earliest among leaves), then A's middle, A's root
  // (each became a leaf in turn and is older than B's blocks), then B leaf-first.
  ASSERT_EQ(order.size(), 5u);
  EXPECT_EQ(order[0], a[2]);
  EXPECT_EQ(order[1], a[1]);
  EXPECT_EQ(order[2], a[0]);
  EXPECT_EQ(order[3], b[1]);
  EXPECT_EQ(order[4], b[0]);
  EXPECT_EQ(pool->num_evicted(), 5);
  pool->Release(held);
}

TEST(PrefixIndexTest, SharedParentOutlivesEveryChild) {
  // Two children of one parent; the parent must survive until both children are gone, even
  // though it was released before them.
  ASSERT_OK_AND_ASSIGN(auto pool, BlockPool::Create(3, 64));
  std::vector<int32_t> tokens(2 * kKeyBlockTokens, 7);
  const BlockKey root = ComputeBlockKey(kRootBlockKey, 0, 42, std::span(tokens).first(128));
  std::vector<int32_t> t1(128, 1), t2(128, 2);
  const BlockKey c1 = ComputeBlockKey(root, 0, 42, t1);
  const BlockKey c2 = ComputeBlockKey(root, 0, 42, t2);
  std::vector<int32_t> p;
  ASSERT_TRUE(pool->Allocate(1, &p));
  ASSERT_TRUE(pool->Register(p[0], root, kRootBlockKey, -1, false));
  pool->Release(p);  // parent released first (oldest)
  pool->IncRef(p[0]);
  std::vector<int32_t> k;
  ASSERT_TRUE(pool->Allocate(2, &k));
  ASSERT_TRUE(pool->Register(k[0], c1, root, p[0], false));
  pool->Release({p[0]});
  ASSERT_TRUE(pool->Register(k[1], c2, root, p[0], false));
  pool->Release({k[0]});
  pool->Release({k[1]});
  std::vector<int32_t> x;
  ASSERT_TRUE(pool->Allocate(1, &x));
  EXPECT_GE(pool->Find(root), 0);
  EXPECT_LT(pool->Find(c1), 0);  // c1 released before c2
  EXPECT_GE(pool->Find(c2), 0);
  ASSERT_TRUE(pool->Allocate(1, &x));
  EXPECT_GE(pool->Find(root), 0);
  EXPECT_LT(pool->Find(c2), 0);
  ASSERT_TRUE(pool->Allocate(1, &x));
  EXPECT_LT(pool->Find(root), 0);
  pool->Release(x);
}

TEST(PrefixIndexTest, RegistrationRules) {
  ASSERT_OK_AND_ASSIGN(auto pool, BlockPool::Create(6, 64));
  const std::vector<BlockKey> keys = Chain(2, 9);
  std::vector<int32_t> s1, s2;
  ASSERT_TRUE(pool->Allocate(2, &s1));
  ASSERT_TRUE(pool->Allocate(2, &s2));
  // A child whose parent is not cached is refused (the chain would be unreachable).
  EXPECT_FALSE(pool->Register(s1[1], keys[1], keys[0], s1[0], false));
  EXPECT_TRUE(pool->Register(s1[0], keys[0], kRootBlockKey, -1, true));
  EXPECT_TRUE(pool->approximate(s1[0]));
  // The same key twice: the second copy stays private.
  EXPECT_FALSE(pool->Register(s2[0], keys[0], kRootBlockKey, -1, false));
  // A child whose parent in its own table is the private copy is refused too.
  EXPECT_FALSE(pool->Register(s2[1], keys[1], keys[0], s2[0], false));
  EXPECT_TRUE(pool->Register(s1[1], keys[1], keys[0], s1[0], false));
  EXPECT_FALSE(pool->Register(s1[1], keys[1], keys[0], s1[0], false));  // already registered
  pool->Release(s2);
  EXPECT_EQ(pool->num_free(), 4);  // private copies are simply free
  pool->Release(s1);
  EXPECT_EQ(pool->num_free(), 6);
  EXPECT_EQ(pool->num_cached(), 2);
}

TEST(PrefixIndexTest, ClearIndexFreesEvictableAndPrivatisesHeld) {
  ASSERT_OK_AND_ASSIGN(auto pool, BlockPool::Create(4, 64));
  RecordingObserver obs;
  pool->set_observer(&obs);
  const std::vector<BlockKey> a = Chain(2, 3);
  const std::vector<int32_t> blocks = CacheChain(pool.get(), a);
  EXPECT_EQ(obs.stored.size(), 2u);
  pool->IncRef(blocks[0]);  // still held by someone
  pool->ClearIndex();
  EXPECT_EQ(pool->num_cached(), 0);
  EXPECT_EQ(pool->Find(a[0]), -1);
  EXPECT_EQ(obs.removed.size(), 2u);
  EXPECT_EQ(pool->num_free(), 3);
  pool->Release({blocks[0]});
  EXPECT_EQ(pool->num_free(), 4);
  std::vector<int32_t> all;
  EXPECT_TRUE(pool->Allocate(4, &all));
  pool->Release(all);
}

TEST(PrefixIndexTest, RandomisedInvariants) {
  // Random sequences share, extend and release chains over a tiny pool; after every operation
  // the accounting holds and no cached child is orphaned.
  ASSERT_OK_AND_ASSIGN(auto pool, BlockPool::Create(16, 64));
  std::mt19937 rng(7);
  std::vector<std::vector<BlockKey>> chains;
  for (int c = 0; c < 6; ++c) chains.push_back(Chain(5, c * 11));
  struct Holder {
    std::vector<int32_t> blocks;
  };
  std::vector<Holder> live;
  for (int step = 0; step < 3000; ++step) {
    if (!live.empty() && (rng() % 3 == 0 || pool->num_free() < 5)) {
      const size_t i = rng() % live.size();
      pool->Release(live[i].blocks);
      live.erase(live.begin() + static_cast<long>(i));
    } else {
      const auto& keys = chains[rng() % chains.size()];
      const int want = 1 + static_cast<int>(rng() % keys.size());
      Holder h;
      int hit = 0;
      while (hit < want) {
        const int32_t b = pool->Find(keys[hit]);
        if (b < 0) break;
        pool->IncRef(b);
        h.blocks.push_back(b);
        ++hit;
      }
      std::vector<int32_t> fresh;
      if (!pool->Allocate(want - hit, &fresh)) {
        pool->Release(h.blocks);
        continue;
      }
      for (int j = hit; j < want; ++j) {
        const int32_t b = fresh[j - hit];
        h.blocks.push_back(b);
        pool->Register(b, keys[j], j == 0 ? kRootBlockKey : keys[j - 1],
                       j == 0 ? -1 : h.blocks[j - 1], false);
      }
      live.push_back(std::move(h));
    }
    int64_t held = 0;
    std::set<int32_t> distinct;
    for (const Holder& h : live) distinct.insert(h.blocks.begin(), h.blocks.end());
    held = static_cast<int64_t>(distinct.size());
    ASSERT_EQ(pool->num_used(), held);
    for (const auto& keys : chains) {
      for (size_t j = 1; j < keys.size(); ++j) {
        if (pool->Find(keys[j]) >= 0) {
          ASSERT_GE(pool->Find(keys[j - 1]), 0);
        }
      }
    }
  }
  for (Holder& h : live) pool->Release(h.blocks);
  EXPECT_EQ(pool->num_used(), 0);
  EXPECT_EQ(pool->num_free(), 16);
}

}  // namespace
}  // namespace deepinfer::kv
