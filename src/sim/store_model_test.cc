#include "sim/store_model.h"

#include <gtest/gtest.h>

#include <vector>

#include "cluster/rng.h"

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

// LookupThenInsert is defined as LookupPrefix(first n) + Insert(all): drive two stores with the
// same random requests (shared prefixes, TTL expiry met while scanning, watermark eviction) and
// compare every answer and counter, and the LRU order through later evictions.
TEST(StoreModelTest, LookupThenInsertEqualsLookupPrefixThenInsert) {
  StoreConfig c;
  c.capacity_bytes = 400;
  c.block_bytes = 1;
  c.ttl_ns = {60, 25};
  StoreModel two_pass(c), one_pass(c);
  cluster::Rng rng(7);
  int64_t now = 0;
  for (int r = 0; r < 5000; ++r) {
    now += static_cast<int64_t>(rng.Below(4));
    // A chain: prefix of one of 20 "sessions", each key unique to (session, position).
    const uint64_t session = rng.Below(20);
    const int64_t n = 1 + static_cast<int64_t>(rng.Below(40));
    std::vector<kv::BlockKey> keys;
    for (int64_t i = 0; i < n; ++i) keys.push_back(kv::BlockKey{session * 1000 + i + 1, 7});
    const int64_t cand = static_cast<int64_t>(rng.Below(n + 1));
    const TrafficClass cls = rng.Below(3) == 0 ? kAgent : kChat;
    const int64_t expect = two_pass.LookupPrefix(std::span(keys).first(cand), now);
    two_pass.Insert(keys, cls, now);
    ASSERT_EQ(one_pass.LookupThenInsert(keys, cand, cls, now), expect) << "request " << r;
    if (r % 97 == 0) {
      two_pass.Gc(now);
      one_pass.Gc(now);
    }
    ASSERT_EQ(one_pass.resident_blocks(), two_pass.resident_blocks()) << "request " << r;
    ASSERT_EQ(one_pass.OldestAgeNs(now), two_pass.OldestAgeNs(now)) << "request " << r;
  }
  const StoreStats& a = one_pass.stats();
  const StoreStats& b = two_pass.stats();
  EXPECT_EQ(a.inserted, b.inserted);
  EXPECT_EQ(a.evicted_lru, b.evicted_lru);
  EXPECT_EQ(a.expired_ttl, b.expired_ttl);
  EXPECT_EQ(a.refreshed, b.refreshed);
  EXPECT_EQ(a.lookups, b.lookups);
  EXPECT_EQ(a.hit_blocks, b.hit_blocks);
  EXPECT_EQ(a.min_lru_victim_age_ns, b.min_lru_victim_age_ns);
  EXPECT_GT(a.evicted_lru, 0);  // the scenario exercised the watermark ...
  EXPECT_GT(a.expired_ttl, 0);  // ... and TTL expiry
  EXPECT_TRUE(one_pass.CheckInvariants().ok());
  EXPECT_TRUE(two_pass.CheckInvariants().ok());
}

}  // namespace
}  // namespace deepinfer::sim
