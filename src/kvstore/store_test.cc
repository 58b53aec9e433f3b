#include "kvstore/store.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/test_util.h"

namespace deepinfer::kvstore {
namespace {

using ::deepinfer::testing::StatusIs;
using kv::BlockKey;
using kv::BlockMeta;
using kv::TrafficClass;
using testing::ChainBlock;
using testing::PayloadFor;
using testing::TempDir;

constexpr size_t kPayload = 400;  // record = 600 + 400 = 1000 bytes
constexpr uint64_t kRecordBytes = 1000;
constexpr int64_t kSecond = 1000000000;
constexpr int64_t kDay = 86400 * kSecond;

class KvStoreTest : public ::testing::Test {
 protected:
  KvStoreConfig Config(uint64_t capacity = 1 << 30) {
    KvStoreConfig c;
    c.dir = dir_.path();
    c.capacity_bytes = capacity;
    c.background_gc = false;
    c.sync = false;  // durability is covered by fault_env_test; keep unit tests fast
    return c;
  }
  std::unique_ptr<KvStore> OpenStore(const KvStoreConfig& c) {
    auto s = KvStore::Open(c, Env::Posix(), &clock_);
    EXPECT_OK(s.status());
    return s.ok() ? std::move(*s) : nullptr;
  }
  // Puts block `i` of chain `chain` (root if parent is kRootBlockKey) and returns its meta.
  BlockMeta PutBlock(KvStore* s, uint64_t chain, int i, const BlockKey& parent,
                     TrafficClass cls = TrafficClass::kChat) {
    BlockMeta m = ChainBlock(chain, i, parent, cls);
    EXPECT_OK(s->Put(m, PayloadFor(m.key, kPayload)));
    return m;
  }
  // Presence without refreshing recency.
  bool OnDisk(KvStore* s, const BlockKey& k) { return std::filesystem::exists(s->RecordPath(k)); }
  bool Has(KvStore* s, const BlockKey& k) {
    const BlockKey one[] = {k};
    return *s->LongestPrefix(one) == 1;
  }

  TempDir dir_;
  FakeClock clock_{1000 * kDay};
};

TEST_F(KvStoreTest, PutGetRoundTripAndRestart) {
  BlockMeta a, b;
  {
    auto s = OpenStore(Config());
    a = PutBlock(s.get(), 1, 0, kv::kRootBlockKey);
    b = PutBlock(s.get(), 1, 1, a.key, TrafficClass::kAgent);
    ASSERT_OK_AND_ASSIGN(kv::StoredBlock got, s->Get(b.key));
    EXPECT_EQ(got.payload, PayloadFor(b.key, kPayload));
    EXPECT_EQ(got.meta.parent, a.key);
    EXPECT_EQ(got.meta.tokens, b.tokens);
    EXPECT_EQ(got.meta.traffic_class, TrafficClass::kAgent);
    EXPECT_TRUE(std::filesystem::exists(s->RecordPath(b.key)));
    ASSERT_OK_AND_ASSIGN(auto st, s->Stats());
    EXPECT_EQ(st.records, 2u);
    EXPECT_EQ(st.bytes, 2 * kRecordBytes);
    EXPECT_EQ(st.hits, 1u);
  }
  auto s = OpenStore(Config());  // a restart re-indexes the files
  ASSERT_OK_AND_ASSIGN(auto st, s->Stats());
  EXPECT_EQ(st.records, 2u);
  ASSERT_OK_AND_ASSIGN(kv::StoredBlock got, s->Get(a.key));
  EXPECT_EQ(got.payload, PayloadFor(a.key, kPayload));
  const BlockKey missing = ChainBlock(9, 0, kv::kRootBlockKey).key;
  EXPECT_THAT(s->Get(missing), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(KvStoreTest, PutIsIdempotentAndDeleteRemoves) {
  auto s = OpenStore(Config());
  const BlockMeta a = PutBlock(s.get(), 1, 0, kv::kRootBlockKey);
  PutBlock(s.get(), 1, 0, kv::kRootBlockKey);
  EXPECT_EQ(s->Stats()->records, 1u);
  EXPECT_EQ(s->Stats()->bytes, kRecordBytes);
  ASSERT_OK(s->Delete(a.key));
  ASSERT_OK(s->Delete(a.key));  // absent: still OK
  EXPECT_THAT(s->Get(a.key), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_FALSE(std::filesystem::exists(s->RecordPath(a.key)));
  EXPECT_EQ(s->Stats()->deleted, 1u);
}

TEST_F(KvStoreTest, RejectsBadRecordsAndOversizedOnes) {
  auto s = OpenStore(Config(/*capacity=*/900));
  EXPECT_THAT(s->PutRecord("garbage"), StatusIs(absl::StatusCode::kInvalidArgument));
  const BlockMeta m = ChainBlock(1, 0, kv::kRootBlockKey);
  EXPECT_THAT(s->Put(m, PayloadFor(m.key, kPayload)),
              StatusIs(absl::StatusCode::kResourceExhausted));
  BlockMeta bad = m;
  bad.tokens[0] ^= 1;
  EXPECT_THAT(s->Put(bad, "x"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(KvStoreTest, LongestPrefix) {
  auto s = OpenStore(Config());
  std::vector<BlockKey> chain;
  BlockKey parent = kv::kRootBlockKey;
  for (int i = 0; i < 5; ++i) {
    const BlockMeta m = ChainBlock(3, i, parent);
    chain.push_back(m.key);
    parent = m.key;
    if (i < 3) {
      ASSERT_OK(s->Put(m, PayloadFor(m.key, 10)));
    }
  }
  EXPECT_EQ(*s->LongestPrefix(chain), 3u);
  EXPECT_EQ(*s->LongestPrefix(std::span<const BlockKey>(chain).subspan(3)), 0u);
  EXPECT_EQ(*s->LongestPrefix({}), 0u);
}

// Every header field and the payload, damaged on disk: the read is a miss and the file goes.
TEST_F(KvStoreTest, CorruptRecordOnDiskIsMissAndRemoved) {
  auto s = OpenStore(Config());
  const std::vector<size_t> offsets = {0,  4,  6,  8,  16,  24,  40,  56,  60,
                                       61, 64, 72, 80, 500, 592, 600, 700, 999};
  uint64_t chain = 100;
  for (size_t off : offsets) {
    const BlockMeta m = PutBlock(s.get(), ++chain, 0, kv::kRootBlockKey);
    const std::string path = s->RecordPath(m.key);
    {
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(static_cast<std::streamoff>(off));
      char c = 0;
      f.read(&c, 1);
      c = static_cast<char>(c ^ 0x10);
      f.seekp(static_cast<std::streamoff>(off));
      f.write(&c, 1);
    }
    EXPECT_THAT(s->Get(m.key), StatusIs(absl::StatusCode::kNotFound)) << "offset " << off;
    EXPECT_FALSE(std::filesystem::exists(path)) << "offset " << off;
    EXPECT_FALSE(Has(s.get(), m.key));
  }
  // Truncated and extended files.
  const BlockMeta t = PutBlock(s.get(), ++chain, 0, kv::kRootBlockKey);
  std::filesystem::resize_file(s->RecordPath(t.key), 800);
  EXPECT_THAT(s->Get(t.key), StatusIs(absl::StatusCode::kNotFound));
  const BlockMeta e = PutBlock(s.get(), ++chain, 0, kv::kRootBlockKey);
  std::filesystem::resize_file(s->RecordPath(e.key), kRecordBytes + 1);
  EXPECT_THAT(s->Get(e.key), StatusIs(absl::StatusCode::kNotFound));
  // A record stored under another key's name.
  const BlockMeta x = PutBlock(s.get(), ++chain, 0, kv::kRootBlockKey);
  const BlockMeta y = PutBlock(s.get(), ++chain, 0, kv::kRootBlockKey);
  std::filesystem::copy_file(s->RecordPath(x.key), s->RecordPath(y.key),
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_THAT(s->Get(y.key), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK(s->Get(x.key).status());
  EXPECT_EQ(s->Stats()->evicted_corrupt, offsets.size() + 3);
  EXPECT_EQ(s->Stats()->records, 1u);
}

TEST_F(KvStoreTest, CorruptHeaderFoundAtStartupIsDropped) {
  BlockMeta good, bad;
  std::string bad_path;
  {
    auto s = OpenStore(Config());
    good = PutBlock(s.get(), 1, 0, kv::kRootBlockKey);
    bad = PutBlock(s.get(), 2, 0, kv::kRootBlockKey);
    bad_path = s->RecordPath(bad.key);
  }
  std::filesystem::resize_file(bad_path, 100);
  // Leftover temp file of an interrupted put.
  std::ofstream(dir_.path() + "/tmp/leftover.1.tmp") << "partial";
  auto s = OpenStore(Config());
  EXPECT_EQ(s->Stats()->records, 1u);
  EXPECT_EQ(s->Stats()->evicted_corrupt, 1u);
  EXPECT_FALSE(std::filesystem::exists(bad_path));
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/tmp/leftover.1.tmp"));
  EXPECT_OK(s->Get(good.key).status());
}

TEST_F(KvStoreTest, WatermarkGcEvictsInLruOrderAndRespectsHits) {
  // 10 records fill the capacity; high 0.9 -> GC runs above 9 records, low 0.5 -> down to 5.
  KvStoreConfig c = Config(10 * kRecordBytes);
  c.high_watermark = 0.9;
  c.low_watermark = 0.5;
  auto s = OpenStore(c);
  std::vector<BlockKey> k;
  for (int i = 0; i < 9; ++i) {
    k.push_back(PutBlock(s.get(), 10 + i, 0, kv::kRootBlockKey).key);
    clock_.Advance(kSecond);
  }
  EXPECT_EQ(s->RunGc().evicted_watermark, 0u);  // 9 records = 0.9: not above the watermark
  ASSERT_OK(s->Get(k[0]).status());             // the oldest becomes the most recent
  clock_.Advance(kSecond);
  k.push_back(PutBlock(s.get(), 19, 0, kv::kRootBlockKey).key);
  const GcResult r = s->RunGc();
  EXPECT_EQ(r.evicted_watermark, 5u);
  EXPECT_EQ(r.bytes_freed, 5 * kRecordBytes);
  // LRU order was k1..k8, k0 (hit), k9: k1..k5 go.
  for (int i = 1; i <= 5; ++i) EXPECT_FALSE(Has(s.get(), k[i])) << i;
  for (int i : {0, 6, 7, 8, 9}) EXPECT_TRUE(Has(s.get(), k[i])) << i;
  EXPECT_FALSE(std::filesystem::exists(s->RecordPath(k[1])));
  EXPECT_EQ(s->Stats()->bytes, 5 * kRecordBytes);
  EXPECT_EQ(s->Stats()->evicted_watermark, 5u);
}

TEST_F(KvStoreTest, SharedPrefixIsNotEvictedBeforeItsSuffixes) {
  // Tree: A -> B -> C and A -> D, written in that order (A is the least recently used).
  KvStoreConfig c = Config(4 * kRecordBytes);
  c.high_watermark = 0.5;
  c.low_watermark = 0.5;
  auto s = OpenStore(c);
  const BlockMeta a = PutBlock(s.get(), 1, 0, kv::kRootBlockKey);
  clock_.Advance(kSecond);
  const BlockMeta b = PutBlock(s.get(), 1, 1, a.key);
  clock_.Advance(kSecond);
  const BlockMeta cc = PutBlock(s.get(), 1, 2, b.key);
  clock_.Advance(kSecond);
  const BlockMeta d = PutBlock(s.get(), 2, 1, a.key);
  // Down to 2 records: leaves oldest first: C, then B (a leaf once C is gone); A stays.
  EXPECT_EQ(s->RunGc().evicted_watermark, 2u);
  EXPECT_TRUE(Has(s.get(), a.key));
  EXPECT_TRUE(Has(s.get(), d.key));
  EXPECT_FALSE(Has(s.get(), b.key));
  EXPECT_FALSE(Has(s.get(), cc.key));
  // Every remaining record is reachable from its root.
  const BlockKey chain_ad[] = {a.key, d.key};
  EXPECT_EQ(*s->LongestPrefix(chain_ad), 2u);
}

TEST_F(KvStoreTest, TtlPerTrafficClassWithInjectedClock) {
  KvStoreConfig c = Config();
  c.ttl_nanos = {7 * kDay, 3 * kDay};  // chat, agent
  auto s = OpenStore(c);
  const BlockMeta agent = PutBlock(s.get(), 1, 0, kv::kRootBlockKey, TrafficClass::kAgent);
  const BlockMeta chat = PutBlock(s.get(), 2, 0, kv::kRootBlockKey, TrafficClass::kChat);
  const BlockMeta chat_hit = PutBlock(s.get(), 3, 0, kv::kRootBlockKey, TrafficClass::kChat);
  const BlockMeta agent_hit = PutBlock(s.get(), 4, 0, kv::kRootBlockKey, TrafficClass::kAgent);

  clock_.Advance(2 * kDay);
  ASSERT_OK(s->Get(agent_hit.key).status());  // refreshed at day 2 -> expires after day 5
  clock_.Advance(kDay);                       // day 3: exactly the TTL, not past it
  EXPECT_EQ(s->RunGc().evicted_ttl, 0u);
  clock_.Advance(1);  // past 3 days
  EXPECT_EQ(s->RunGc().evicted_ttl, 1u);
  EXPECT_FALSE(OnDisk(s.get(), agent.key));
  EXPECT_TRUE(OnDisk(s.get(), chat.key));
  EXPECT_TRUE(OnDisk(s.get(), agent_hit.key));
  clock_.Advance(3 * kDay);  // day 6 + 1 ns
  const BlockKey only_hit[] = {chat_hit.key};
  ASSERT_EQ(*s->LongestPrefix(only_hit), 1u);  // refreshed at day 6 -> expires after day 13
  s->RunGc();
  EXPECT_FALSE(OnDisk(s.get(), agent_hit.key));  // last use day 2: 4 days ago
  clock_.Advance(kDay + 1);                      // day 7 + 2 ns
  EXPECT_EQ(s->RunGc().evicted_ttl, 1u);
  EXPECT_FALSE(OnDisk(s.get(), chat.key));
  EXPECT_TRUE(OnDisk(s.get(), chat_hit.key));
  EXPECT_EQ(s->Stats()->evicted_ttl, 3u);
}

TEST_F(KvStoreTest, ExpiredPrefixGoesAfterItsLastSuffix) {
  KvStoreConfig c = Config();
  c.ttl_nanos = {1 * kDay, 1 * kDay};
  auto s = OpenStore(c);
  const BlockMeta a = PutBlock(s.get(), 1, 0, kv::kRootBlockKey);
  clock_.Advance(kDay / 2);
  const BlockMeta b = PutBlock(s.get(), 1, 1, a.key);
  clock_.Advance(kDay / 2 + 1);  // a expired, b not: a is kept (its suffix is live)
  EXPECT_EQ(s->RunGc().evicted_ttl, 0u);
  EXPECT_TRUE(OnDisk(s.get(), a.key));
  clock_.Advance(2 * kDay);  // both expired: suffix first, then the prefix in the same pass
  EXPECT_EQ(s->RunGc().evicted_ttl, 2u);
  EXPECT_EQ(s->Stats()->records, 0u);
  EXPECT_EQ(b.parent, a.key);
}

TEST_F(KvStoreTest, MetricsText) {
  auto s = OpenStore(Config());
  const BlockMeta a = PutBlock(s.get(), 1, 0, kv::kRootBlockKey);
  ASSERT_OK(s->Get(a.key).status());
  EXPECT_THAT(s->Get(ChainBlock(5, 0, kv::kRootBlockKey).key),
              StatusIs(absl::StatusCode::kNotFound));
  const std::string text = s->MetricsText();
  EXPECT_THAT(text, ::testing::HasSubstr("\ndeepinfer_kvstore_records 1\n"));
  EXPECT_THAT(text, ::testing::HasSubstr("\ndeepinfer_kvstore_bytes 1000\n"));
  EXPECT_THAT(text, ::testing::HasSubstr("\ndeepinfer_kvstore_hits_total 1\n"));
  EXPECT_THAT(text, ::testing::HasSubstr("\ndeepinfer_kvstore_misses_total 1\n"));
  EXPECT_THAT(text, ::testing::HasSubstr("deepinfer_kvstore_evictions_total{reason=\"ttl\"} 0\n"));
  EXPECT_THAT(text, ::testing::HasSubstr("# TYPE deepinfer_kvstore_gc_seconds_total counter\n"));
}

}  // namespace
}  // namespace deepinfer::kvstore
