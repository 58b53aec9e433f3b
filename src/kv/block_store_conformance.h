// The BlockStore conformance suite (test-only header): one GoogleTest typed, parameterised
// suite that every kv::BlockStore implementation must pass, so the directory store
// (kvstore::KvStore), the store node (KvStoreClient over KvStoreServer) and the RADOS store
// (kvstore::RadosStore on a throwaway Ceph cluster) are held to the same contract
// (block_store.h): put/get/longest-prefix/delete, recency refreshed by hits, TTL per traffic
// class and watermark LRU GC driven by a client-supplied clock, leaves-first eviction, concurrent
// clients, and damaged, partial and mismatched records read as misses and removed.
//
// A backend is a type B with:
//   B(deepinfer::FakeClock* clock, const conformance::Limits& limits)
//       a fresh, empty store whose recency and GC read `clock`; ASSERTs inside are fine
//   kv::BlockStore* store()                     the store under test
//   std::unique_ptr<kv::BlockStore> NewClient() another client of the same stored data
//   void RunGc()                                one GC pass, synchronously, at clock time
//   absl::Status WriteRaw(const kv::BlockKey& k, std::string_view bytes)
//       stores `bytes` where the record of `k` lives (what a damaged disk or a foreign writer
//       leaves), bypassing the store's checks
//   absl::StatusOr<bool> RawExists(const kv::BlockKey& k)  whether anything is stored there
// Instantiate with INSTANTIATE_TYPED_TEST_SUITE_P(Name, BlockStoreConformance, Types).
// Backend-specific tests (disk full through FaultEnv, OSD loss) live beside each instantiation.
#ifndef DEEPINFER_KV_BLOCK_STORE_CONFORMANCE_H_
#define DEEPINFER_KV_BLOCK_STORE_CONFORMANCE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kv/block_record.h"
#include "kv/block_store.h"

namespace deepinfer::kv::conformance {

inline constexpr int64_t kSecond = 1000000000;
inline constexpr int64_t kHour = 3600 * kSecond;
inline constexpr int64_t kDay = 24 * kHour;
// The clock starts at a plausible Unix time (stores that keep wall-clock times see one).
inline constexpr int64_t kStartNanos = int64_t{1800000000} * kSecond;
inline constexpr size_t kPayloadBytes = 400;
inline constexpr uint64_t kRecordBytes = kBlockRecordHeaderBytes + kPayloadBytes;  // 1000

// GC settings of a backend under test (defaults: DEEPINFER-DESIGN.md §4).
struct Limits {
  uint64_t capacity_bytes = uint64_t{1} << 30;
  double high_watermark = 0.9;
  double low_watermark = 0.8;
  int64_t ttl_chat = 7 * kDay;
  int64_t ttl_agent = 3 * kDay;
};

// Block `i` of synthetic chain `chain` after `parent`; chains never share keys.
inline BlockMeta Block(uint64_t chain, int i, const BlockKey& parent,
                       TrafficClass cls = TrafficClass::kChat) {
  std::vector<int32_t> tokens(kKeyBlockTokens);
  for (int t = 0; t < kKeyBlockTokens; ++t) {
    tokens[t] = static_cast<int32_t>(chain * 7919 + static_cast<uint64_t>(i) * 131 + t);
  }
  return MakeBlockMeta(parent, /*cache_salt=*/0xC0FFEE00 + chain, /*layout_id=*/42, tokens, cls);
}

// The payload stored for `key`: a function of the key, so a reader can tell it got exactly the
// bytes written for that block (xorshift stream; an independent generator, not store code).
inline std::string Payload(const BlockKey& key, size_t bytes = kPayloadBytes) {
  std::string p(bytes, '\0');
  uint64_t x = key.lo ^ (key.hi * 0x9E3779B97F4A7C15ull) ^ 1;
  for (size_t i = 0; i < bytes; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = static_cast<char>(x);
  }
  return p;
}

// Metas of an n-block chain.
inline std::vector<BlockMeta> Chain(uint64_t chain, int n, TrafficClass cls = TrafficClass::kChat) {
  std::vector<BlockMeta> out;
  BlockKey parent = kRootBlockKey;
  for (int i = 0; i < n; ++i) {
    out.push_back(Block(chain, i, parent, cls));
    parent = out.back().key;
  }
  return out;
}

inline std::vector<BlockKey> Keys(const std::vector<BlockMeta>& metas) {
  std::vector<BlockKey> keys;
  for (const BlockMeta& m : metas) keys.push_back(m.key);
  return keys;
}

template <typename B>
class BlockStoreConformance : public ::testing::Test {
 protected:
  void Open(const Limits& limits = Limits()) { backend_ = std::make_unique<B>(&clock_, limits); }
  void SetUp() override { Open(); }
  BlockStore* store() { return backend_->store(); }

  void PutAll(const std::vector<BlockMeta>& metas, BlockStore* s = nullptr) {
    for (const BlockMeta& m : metas) ASSERT_OK((s ? s : store())->Put(m, Payload(m.key)));
  }
  // Present: one Get, checked byte for byte (refreshes recency, like any hit).
  bool GetsBack(const BlockMeta& m, BlockStore* s = nullptr) {
    absl::StatusOr<StoredBlock> b = (s ? s : store())->Get(m.key);
    if (!b.ok()) {
      EXPECT_TRUE(absl::IsNotFound(b.status())) << b.status();
      return false;
    }
    EXPECT_EQ(b->meta.key, m.key);
    EXPECT_EQ(b->meta.parent, m.parent);
    EXPECT_EQ(b->meta.tokens, m.tokens);
    EXPECT_EQ(b->meta.traffic_class, m.traffic_class);
    EXPECT_TRUE(b->payload == Payload(m.key)) << "payload differs for " << m.key.ToHex();
    return true;
  }
  // LongestPrefix, which must succeed (SIZE_MAX when it fails).
  size_t Prefix(std::span<const BlockKey> chain) {
    absl::StatusOr<size_t> n = store()->LongestPrefix(chain);
    EXPECT_OK(n.status());
    return n.ok() ? *n : SIZE_MAX;
  }
  // Presence by the backend's raw view (no recency change).
  bool Stored(const BlockKey& k) {
    absl::StatusOr<bool> e = backend_->RawExists(k);
    EXPECT_OK(e.status());
    return e.ok() && *e;
  }
  // A damaged object under `victim`'s name is a miss, is removed, and a re-put heals it.
  void ExpectDamagedIsMiss(const BlockMeta& victim, std::string_view bytes) {
    ASSERT_OK(store()->Put(victim, Payload(victim.key)));
    ASSERT_OK(backend_->WriteRaw(victim.key, bytes));
    EXPECT_THAT(store()->Get(victim.key),
                ::deepinfer::testing::StatusIs(absl::StatusCode::kNotFound));
    EXPECT_FALSE(Stored(victim.key)) << "a record failing its checks must be deleted";
    ASSERT_OK(store()->Put(victim, Payload(victim.key)));
    EXPECT_TRUE(GetsBack(victim));
  }

  FakeClock clock_{kStartNanos};
  std::unique_ptr<B> backend_;
};

TYPED_TEST_SUITE_P(BlockStoreConformance);

TYPED_TEST_P(BlockStoreConformance, PutGetRoundTrip) {
  const auto chain = Chain(1, 3, TrafficClass::kAgent);
  this->PutAll(chain);
  for (const BlockMeta& m : chain) EXPECT_TRUE(this->GetsBack(m));
}

TYPED_TEST_P(BlockStoreConformance, MissesAreNotFound) {
  const BlockMeta m = Block(2, 0, kRootBlockKey);
  EXPECT_THAT(this->store()->Get(m.key),
              ::deepinfer::testing::StatusIs(absl::StatusCode::kNotFound));
  const BlockKey one[] = {m.key};
  EXPECT_EQ(this->Prefix(one), 0u);
  EXPECT_EQ(this->Prefix({}), 0u);
  EXPECT_OK(this->store()->Delete(m.key));  // absent: still OK
}

TYPED_TEST_P(BlockStoreConformance, PutRejectsAKeyThatIsNotTheHash) {
  BlockMeta m = Block(3, 0, kRootBlockKey);
  m.key.lo ^= 1;
  EXPECT_THAT(this->store()->Put(m, Payload(m.key)),
              ::deepinfer::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(this->Stored(m.key));
}

TYPED_TEST_P(BlockStoreConformance, PutIsIdempotent) {
  const BlockMeta m = Block(4, 0, kRootBlockKey);
  ASSERT_OK(this->store()->Put(m, Payload(m.key)));
  ASSERT_OK(this->store()->Put(m, Payload(m.key)));
  EXPECT_TRUE(this->GetsBack(m));
}

TYPED_TEST_P(BlockStoreConformance, LongestPrefixCountsLeadingStoredBlocks) {
  const auto chain = Chain(5, 140);  // more than one lookup window of any backend
  const auto keys = Keys(chain);
  // Blocks 0..99 and 101..139 stored: the prefix ends at the hole.
  for (int i = 0; i < 140; ++i) {
    if (i != 100) {
      ASSERT_OK(this->store()->Put(chain[i], Payload(chain[i].key)));
    }
  }
  EXPECT_EQ(this->Prefix(keys), 100u);
  EXPECT_EQ(this->Prefix(std::span(keys).first(70)), 70u);
  ASSERT_OK(this->store()->Put(chain[100], Payload(chain[100].key)));
  EXPECT_EQ(this->Prefix(keys), 140u);
  // A chain whose first block is absent has no cached prefix, whatever follows.
  ASSERT_OK(this->store()->Delete(keys[0]));
  EXPECT_EQ(this->Prefix(keys), 0u);
}

TYPED_TEST_P(BlockStoreConformance, DeleteRemovesAndAReputRestores) {
  const auto chain = Chain(6, 2);
  this->PutAll(chain);
  ASSERT_OK(this->store()->Delete(chain[1].key));
  EXPECT_FALSE(this->GetsBack(chain[1]));
  EXPECT_EQ(this->Prefix(Keys(chain)), 1u);
  ASSERT_OK(this->store()->Put(chain[1], Payload(chain[1].key)));
  EXPECT_TRUE(this->GetsBack(chain[1]));
}

TYPED_TEST_P(BlockStoreConformance, TtlPerTrafficClass) {
  const auto chat = Chain(7, 2, TrafficClass::kChat);
  const auto agent = Chain(8, 2, TrafficClass::kAgent);
  this->PutAll(chat);
  this->PutAll(agent);
  this->clock_.Advance(2 * kDay);
  this->backend_->RunGc();
  EXPECT_TRUE(this->Stored(agent[1].key)) << "2 d < agent TTL 3 d";
  this->clock_.Advance(2 * kDay);  // 4 d unused: past the agent TTL, within the chat TTL
  this->backend_->RunGc();
  EXPECT_FALSE(this->Stored(agent[0].key));
  EXPECT_FALSE(this->Stored(agent[1].key));
  EXPECT_TRUE(this->Stored(chat[0].key));
  EXPECT_TRUE(this->Stored(chat[1].key));
  this->clock_.Advance(4 * kDay);  // 8 d: past the chat TTL
  this->backend_->RunGc();
  EXPECT_FALSE(this->Stored(chat[0].key));
  EXPECT_FALSE(this->Stored(chat[1].key));
}

TYPED_TEST_P(BlockStoreConformance, HitsRefreshRecencyAgainstTtl) {
  const auto by_get = Chain(9, 1, TrafficClass::kAgent);
  const auto by_prefix = Chain(10, 2, TrafficClass::kAgent);
  const auto unused = Chain(11, 1, TrafficClass::kAgent);
  this->PutAll(by_get);
  this->PutAll(by_prefix);
  this->PutAll(unused);
  this->clock_.Advance(2 * kDay);
  EXPECT_TRUE(this->GetsBack(by_get[0]));
  EXPECT_EQ(this->Prefix(Keys(by_prefix)), 2u);
  this->clock_.Advance(2 * kDay);  // 4 d since the puts, 2 d since the hits; agent TTL 3 d
  this->backend_->RunGc();
  EXPECT_FALSE(this->Stored(unused[0].key));
  EXPECT_TRUE(this->Stored(by_get[0].key)) << "a Get hit refreshes recency";
  EXPECT_TRUE(this->Stored(by_prefix[0].key)) << "a LongestPrefix hit refreshes recency";
  EXPECT_TRUE(this->Stored(by_prefix[1].key));
}

TYPED_TEST_P(BlockStoreConformance, WatermarkEvictsLeastRecentlyUsedFirst) {
  Limits limits;
  limits.capacity_bytes = 10 * kRecordBytes;
  limits.high_watermark = 0.9;
  limits.low_watermark = 0.5;
  this->Open(limits);
  std::vector<BlockMeta> blocks;
  for (int c = 0; c < 10; ++c) {  // ten one-block chains, one hour apart
    blocks.push_back(Block(100 + c, 0, kRootBlockKey));
    ASSERT_OK(this->store()->Put(blocks.back(), Payload(blocks.back().key)));
    this->clock_.Advance(kHour);
  }
  EXPECT_TRUE(this->GetsBack(blocks[0]));  // the oldest becomes the most recent
  this->clock_.Advance(kHour);
  this->backend_->RunGc();  // 10 records > 0.9 x 10: evict down to 5
  EXPECT_TRUE(this->Stored(blocks[0].key));
  for (int c = 1; c <= 5; ++c) EXPECT_FALSE(this->Stored(blocks[c].key)) << c;
  for (int c = 6; c < 10; ++c) EXPECT_TRUE(this->Stored(blocks[c].key)) << c;
}

TYPED_TEST_P(BlockStoreConformance, WatermarkEvictsLeavesBeforeTheirPrefixes) {
  Limits limits;
  limits.capacity_bytes = 10 * kRecordBytes;
  limits.high_watermark = 0.9;
  limits.low_watermark = 0.8;
  this->Open(limits);
  // The oldest blocks form one chain, block 0 oldest: plain LRU would take blocks 0 and 1,
  // which would leave 2 and 3 unreachable. Leaves go first: 3, then 2.
  const auto old_chain = Chain(200, 4);
  for (const BlockMeta& m : old_chain) {
    ASSERT_OK(this->store()->Put(m, Payload(m.key)));
    this->clock_.Advance(60 * kSecond);
  }
  this->clock_.Advance(kHour);
  std::vector<BlockMeta> singles;
  for (int c = 0; c < 6; ++c) {
    singles.push_back(Block(300 + c, 0, kRootBlockKey));
    ASSERT_OK(this->store()->Put(singles.back(), Payload(singles.back().key)));
    this->clock_.Advance(kHour);
  }
  this->backend_->RunGc();  // 10 > 9: down to 8
  EXPECT_TRUE(this->Stored(old_chain[0].key));
  EXPECT_TRUE(this->Stored(old_chain[1].key));
  EXPECT_FALSE(this->Stored(old_chain[2].key));
  EXPECT_FALSE(this->Stored(old_chain[3].key));
  for (const BlockMeta& m : singles) EXPECT_TRUE(this->Stored(m.key));
  EXPECT_EQ(this->Prefix(Keys(old_chain)), 2u);
}

TYPED_TEST_P(BlockStoreConformance, ConcurrentClientsSeeEachOthersBlocks) {
  constexpr int kClients = 4;
  constexpr int kBlocks = 12;
  const auto shared = Chain(400, 8);
  std::vector<std::unique_ptr<BlockStore>> clients;
  for (int c = 0; c < kClients; ++c) clients.push_back(this->backend_->NewClient());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      BlockStore* s = clients[c].get();
      for (const BlockMeta& m : Chain(500 + c, kBlocks)) {
        if (!s->Put(m, Payload(m.key)).ok()) ++failures;
      }
      for (const BlockMeta& m : shared) {  // every client writes the same blocks
        if (!s->Put(m, Payload(m.key)).ok()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  threads.clear();
  ASSERT_EQ(failures.load(), 0);
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      BlockStore* s = clients[c].get();
      for (int other = 0; other < kClients; ++other) {
        const auto chain = Chain(500 + other, kBlocks);
        auto n = s->LongestPrefix(Keys(chain));
        if (!n.ok() || *n != static_cast<size_t>(kBlocks)) ++failures;
        for (const BlockMeta& m : chain) {
          auto b = s->Get(m.key);
          if (!b.ok() || b->payload != Payload(m.key) || b->meta.key != m.key) ++failures;
        }
      }
      for (const BlockMeta& m : shared) {
        auto b = s->Get(m.key);
        if (!b.ok() || b->payload != Payload(m.key)) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TYPED_TEST_P(BlockStoreConformance, CorruptPayloadIsMissAndDeleted) {
  const BlockMeta m = Block(600, 0, kRootBlockKey);
  auto rec = EncodeBlockRecord(m, Payload(m.key));
  ASSERT_OK(rec.status());
  (*rec)[kBlockRecordHeaderBytes + 17] ^= 0x40;
  this->ExpectDamagedIsMiss(m, *rec);
}

TYPED_TEST_P(BlockStoreConformance, CorruptHeaderIsMissAndDeleted) {
  const BlockMeta m = Block(601, 0, kRootBlockKey);
  auto rec = EncodeBlockRecord(m, Payload(m.key));
  ASSERT_OK(rec.status());
  (*rec)[100] ^= 0x01;  // a token id: the header checksum (and the key) no longer match
  this->ExpectDamagedIsMiss(m, *rec);
  this->ExpectDamagedIsMiss(m, "not a record at all");
}

TYPED_TEST_P(BlockStoreConformance, PartialRecordIsMissAndDeleted) {
  const BlockMeta m = Block(602, 0, kRootBlockKey);
  auto rec = EncodeBlockRecord(m, Payload(m.key));
  ASSERT_OK(rec.status());
  this->ExpectDamagedIsMiss(m, std::string_view(*rec).substr(0, rec->size() / 2));
  this->ExpectDamagedIsMiss(m, std::string_view(*rec).substr(0, rec->size() - 1));
}

TYPED_TEST_P(BlockStoreConformance, MismatchedRecordIsMissAndDeleted) {
  const BlockMeta victim = Block(603, 0, kRootBlockKey);
  const BlockMeta other = Block(604, 0, kRootBlockKey);
  ASSERT_OK(this->store()->Put(other, Payload(other.key)));
  auto rec = EncodeBlockRecord(other, Payload(other.key));  // a valid record of another block
  ASSERT_OK(rec.status());
  this->ExpectDamagedIsMiss(victim, *rec);
  EXPECT_TRUE(this->GetsBack(other)) << "the other block is not disturbed";
}

REGISTER_TYPED_TEST_SUITE_P(BlockStoreConformance, PutGetRoundTrip, MissesAreNotFound,
                            PutRejectsAKeyThatIsNotTheHash, PutIsIdempotent,
                            LongestPrefixCountsLeadingStoredBlocks, DeleteRemovesAndAReputRestores,
                            TtlPerTrafficClass, HitsRefreshRecencyAgainstTtl,
                            WatermarkEvictsLeastRecentlyUsedFirst,
                            WatermarkEvictsLeavesBeforeTheirPrefixes,
                            ConcurrentClientsSeeEachOthersBlocks, CorruptPayloadIsMissAndDeleted,
                            CorruptHeaderIsMissAndDeleted, PartialRecordIsMissAndDeleted,
                            MismatchedRecordIsMissAndDeleted);

}  // namespace deepinfer::kv::conformance

#endif  // DEEPINFER_KV_BLOCK_STORE_CONFORMANCE_H_
