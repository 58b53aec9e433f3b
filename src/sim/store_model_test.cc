#include "sim/store_model.h"

#include <gtest/gtest.h>

#include <vector>

namespace deepinfer::sim {
namespace {

kv::BlockKey K(uint64_t i) { return kv::BlockKey{i + 1, 0}; }

TEST(StoreModelTest, WatermarkEvictsLruDownToLow) {
  StoreConfig c;
  c.capacity_bytes = 10;
  c.block_bytes = 1;
  c.high_watermark = 0.9;  // GC above 9 blocks
  c.low_watermark = 0.5;   // ... down to 5
  StoreModel s(c);
  for (uint64_t i = 0; i < 9; ++i) {
    const kv::BlockKey k = K(i);
    s.Insert(std::span(&k, 1), kChat, static_cast<int64_t>(i));
  }
  EXPECT_EQ(s.resident_blocks(), 9);  // 9 is not above the high watermark
  const kv::BlockKey k9 = K(9);
  s.Insert(std::span(&k9, 1), kChat, 9);
  EXPECT_EQ(s.resident_blocks(), 5);  // blocks 0..4 evicted
  EXPECT_EQ(s.stats().evicted_lru, 5);
  const std::vector<kv::BlockKey> chain = {K(5), K(6), K(0), K(7)};
  EXPECT_EQ(s.LookupPrefix(chain, 10), 2);  // first miss (block 0) ends the scan
  EXPECT_TRUE(s.CheckInvariants().ok());
}

TEST(StoreModelTest, TtlPerClassFromLastAccess) {
  StoreConfig c;
  c.ttl_ns = {100, 50};  // chat, agent
  StoreModel s(c);
  const std::vector<kv::BlockKey> chat = {K(0), K(1)}, agent = {K(10)};
  s.Insert(chat, kChat, 0);
  s.Insert(agent, kAgent, 0);
  // A read at t = 40 refreshes block 0 only.
  const std::vector<kv::BlockKey> first = {K(0)};
  EXPECT_EQ(s.LookupPrefix(first, 40), 1);
  s.Gc(60);  // agent block: 60 > 50 -> expired; chat blocks: 20 and 60 <= 100 stay
  EXPECT_EQ(s.resident_blocks(), 2);
  s.Gc(101);  // block 1 (last access 0) expires, block 0 (40) stays
  EXPECT_EQ(s.resident_blocks(), 1);
  EXPECT_EQ(s.LookupPrefix(first, 141), 0);  // 141 - 40 > 100: expired on lookup
  EXPECT_EQ(s.stats().expired_ttl, 3);
  EXPECT_TRUE(s.CheckInvariants().ok());
}

TEST(StoreModelTest, ReinsertRefreshesNotDuplicates) {
  StoreModel s(StoreConfig{});
  const std::vector<kv::BlockKey> a = {K(0), K(1)};
  s.Insert(a, kChat, 0);
  s.Insert(a, kChat, 5);
  EXPECT_EQ(s.stats().inserted, 2);
  EXPECT_EQ(s.stats().refreshed, 2);
  EXPECT_EQ(s.OldestAgeNs(10), 5);
}

}  // namespace
}  // namespace deepinfer::sim
