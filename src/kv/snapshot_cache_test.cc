#include "kv/snapshot_cache.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace deepinfer::kv {
namespace {

std::shared_ptr<const StateSnapshot> Snap(size_t bytes, uint8_t fill, bool approximate = false) {
  auto s = std::make_shared<StateSnapshot>();
  s->bytes.assign(bytes, fill);
  s->approximate = approximate;
  return s;
}

BlockKey K(uint64_t i) { return BlockKey{i, i * 3 + 1}; }

TEST(SnapshotCacheTest, LeastRecentlyUsedLeavesFirstUnderTheByteBudget) {
  SnapshotCache cache(300);
  cache.Put(K(1), Snap(100, 1));
  cache.Put(K(2), Snap(100, 2));
  cache.Put(K(3), Snap(100, 3));
  EXPECT_EQ(cache.bytes(), 300);
  ASSERT_NE(cache.Get(K(1)), nullptr);  // K(2) is now the oldest
  cache.Put(K(4), Snap(100, 4));
  EXPECT_FALSE(cache.Contains(K(2)));
  EXPECT_TRUE(cache.Contains(K(1)));
  EXPECT_EQ(cache.Get(K(4))->bytes[0], 4);
  EXPECT_EQ(cache.num_evicted(), 1);
  EXPECT_EQ(cache.bytes(), 300);
}

TEST(SnapshotCacheTest, HeldSnapshotOutlivesEvictionAndOversizeIsDropped) {
  SnapshotCache cache(150);
  cache.Put(K(1), Snap(100, 9));
  std::shared_ptr<const StateSnapshot> held = cache.Get(K(1));
  cache.Put(K(2), Snap(100, 8));
  EXPECT_FALSE(cache.Contains(K(1)));
  EXPECT_EQ(held->bytes[99], 9);
  cache.Put(K(3), Snap(151, 7));
  EXPECT_FALSE(cache.Contains(K(3)));
  SnapshotCache none(0);
  none.Put(K(1), Snap(1, 1));
  EXPECT_EQ(none.size(), 0);
}

TEST(SnapshotCacheTest, ExactIsNotReplacedByApproximate) {
  SnapshotCache cache(1000);
  cache.Put(K(1), Snap(10, 1, false));
  cache.Put(K(1), Snap(10, 2, true));
  EXPECT_EQ(cache.Get(K(1))->bytes[0], 1);
  cache.Put(K(2), Snap(10, 1, true));
  cache.Put(K(2), Snap(10, 2, false));
  EXPECT_EQ(cache.Get(K(2))->bytes[0], 2);
  EXPECT_FALSE(cache.Get(K(2))->approximate);
  EXPECT_EQ(cache.bytes(), 20);
  cache.Clear();
  EXPECT_EQ(cache.size(), 0);
  EXPECT_EQ(cache.bytes(), 0);
}

}  // namespace
}  // namespace deepinfer::kv
