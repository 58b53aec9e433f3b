// kvstore::RadosStore on the throwaway Ceph cluster of scripts/ceph-test-cluster.sh, which this
// binary starts before its first test and tears down after its last (one ctest entry,
// `kvstore_rados_test`): the BlockStore conformance suite (kv/block_store_conformance.h), then the
// RADOS-only tests: the operation deadline (paused OSDs, unreachable monitor), the object layout
// (one object per record, metadata in xattrs), the GC worker's guards, and degraded reads with
// one of the three OSDs killed mid-run.
#include "kvstore/rados_store.h"

#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kv/block_store_conformance.h"
#include "kvstore/ceph_test_cluster.h"

namespace deepinfer::kvstore {
namespace {

using ::deepinfer::testing::StatusIs;
using kv::conformance::Block;
using kv::conformance::Chain;
using kv::conformance::Keys;
using kv::conformance::Limits;
using kv::conformance::Payload;

testing::CephTestCluster* cluster = nullptr;

// Whether the object of `key` exists (false on an error, which fails the test).
bool Exists(RadosStore* s, const kv::BlockKey& key) {
  absl::StatusOr<bool> e = s->ObjectExists(key);
  EXPECT_OK(e.status());
  return e.ok() && *e;
}

// Starts the cluster once for the whole binary.
class ClusterEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    cluster = new testing::CephTestCluster();
    ASSERT_TRUE(cluster->ok()) << "the throwaway Ceph cluster did not start "
                                  "(scripts/ceph-test-cluster.sh; logs under its DIR/log)";
    std::fprintf(stderr, "ceph test cluster started in %.1f s\n", cluster->start_seconds());
  }
  void TearDown() override {
    delete cluster;
    cluster = nullptr;
  }
};
const ::testing::Environment* const kEnv =
    ::testing::AddGlobalTestEnvironment(new ClusterEnvironment);

// A namespace no other test (or earlier run against an adopted cluster) uses.
std::string FreshNamespace() {
  static std::atomic<int> n{0};
  return absl::StrCat("t", getpid(), "-", MonotonicNanos() % 1000000007, "-", n++);
}

RadosStoreConfig TestConfig(const std::string& ns, const Limits& l, int64_t timeout_ms = 30000) {
  RadosStoreConfig c = cluster->Config(ns, timeout_ms);
  c.capacity_bytes = l.capacity_bytes;
  c.high_watermark = l.high_watermark;
  c.low_watermark = l.low_watermark;
  c.ttl_nanos[static_cast<int>(kv::TrafficClass::kChat)] = l.ttl_chat;
  c.ttl_nanos[static_cast<int>(kv::TrafficClass::kAgent)] = l.ttl_agent;
  return c;
}

// The conformance backend: a RadosStore in a fresh namespace of pool `kv`.
class RadosBackend {
 public:
  RadosBackend(FakeClock* clock, const Limits& limits)
      : clock_(clock), config_(TestConfig(FreshNamespace(), limits)) {
    auto s = RadosStore::Open(config_, clock);
    EXPECT_OK(s.status());
    if (s.ok()) store_ = std::move(*s);
  }
  kv::BlockStore* store() { return store_.get(); }
  // Another client: its own cluster connection, as a second engine has.
  std::unique_ptr<kv::BlockStore> NewClient() {
    auto s = RadosStore::Open(config_, clock_);
    EXPECT_OK(s.status());
    return s.ok() ? std::move(*s) : nullptr;
  }
  void RunGc() {
    const GcResult r = store_->RunGc();
    EXPECT_TRUE(r.scanned);
  }
  absl::Status WriteRaw(const kv::BlockKey& k, std::string_view bytes) {
    // A damaged object keeps the metadata xattrs of the good one it replaced.
    const kv::BlockMeta meta = [&] {
      kv::BlockMeta m;
      m.key = k;
      return m;
    }();
    return store_->WriteRawObject(k, bytes, &meta);
  }
  absl::StatusOr<bool> RawExists(const kv::BlockKey& k) { return store_->ObjectExists(k); }

 private:
  FakeClock* const clock_;
  const RadosStoreConfig config_;
  std::unique_ptr<RadosStore> store_;
};

}  // namespace
}  // namespace deepinfer::kvstore

namespace deepinfer::kv::conformance {
INSTANTIATE_TYPED_TEST_SUITE_P(RadosStore, BlockStoreConformance,
                               ::testing::Types<kvstore::RadosBackend>);
}  // namespace deepinfer::kv::conformance

namespace deepinfer::kvstore {
namespace {

constexpr int64_t kStart = kv::conformance::kStartNanos;

TEST(RadosStoreLayout, OneObjectPerRecordNamedByKeyHex) {
  FakeClock clock(kStart);
  auto store = RadosStore::Open(TestConfig(FreshNamespace(), Limits()), &clock);
  ASSERT_OK(store.status());
  const auto chain = Chain(1, 3);
  for (const auto& m : chain) ASSERT_OK((*store)->Put(m, Payload(m.key)));
  for (const auto& m : chain) {
    EXPECT_EQ(RadosStore::ObjectName(m.key), m.key.ToHex());
    EXPECT_TRUE(Exists(store->get(), m.key));
  }
  // A GC pass over this namespace sees exactly these three records and their bytes.
  const GcResult r = (*store)->RunGc();
  EXPECT_TRUE(r.scanned);
  EXPECT_EQ(r.records, 3u);
  EXPECT_EQ(r.bytes, 3 * kv::conformance::kRecordBytes);
}

TEST(RadosStoreLayout, ObjectWithoutMetadataXattrsIsJudgedByItsHeader) {
  // Without a last-use xattr the GC goes by the object's mtime: a real wall clock here.
  FakeClock clock(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count());
  auto store = RadosStore::Open(TestConfig(FreshNamespace(), Limits()), &clock);
  ASSERT_OK(store.status());
  const auto good = Block(2, 0, kv::kRootBlockKey);
  const auto bad = Block(3, 0, kv::kRootBlockKey);
  auto rec = kv::EncodeBlockRecord(good, Payload(good.key));
  ASSERT_OK(rec.status());
  ASSERT_OK((*store)->WriteRawObject(good.key, *rec, nullptr));  // a record, no xattrs
  ASSERT_OK((*store)->WriteRawObject(bad.key, "junk", nullptr));
  const GcResult r = (*store)->RunGc();
  EXPECT_EQ(r.records, 1u);
  EXPECT_TRUE(Exists(store->get(), good.key));
  EXPECT_FALSE(Exists(store->get(), bad.key));
  ASSERT_OK_AND_ASSIGN(kv::StoredBlock b, (*store)->Get(good.key));
  EXPECT_EQ(b.payload, Payload(good.key));
}

TEST(RadosStoreGc, KeepsRecordsUsedWithinTheHitGrace) {
  FakeClock clock(kStart);
  Limits l;
  l.capacity_bytes = 2 * kv::conformance::kRecordBytes;
  l.low_watermark = 0.5;
  auto store = RadosStore::Open(TestConfig(FreshNamespace(), l), &clock);
  ASSERT_OK(store.status());
  const auto a = Block(4, 0, kv::kRootBlockKey);
  const auto b = Block(5, 0, kv::kRootBlockKey);
  ASSERT_OK((*store)->Put(a, Payload(a.key)));
  ASSERT_OK((*store)->Put(b, Payload(b.key)));
  clock.Advance(10 * kv::conformance::kSecond);  // within the 60 s grace: a fetch may follow
  const GcResult r = (*store)->RunGc();
  EXPECT_EQ(r.evicted_watermark, 0u);
  EXPECT_GE(r.kept_recent, 1u);
  clock.Advance(kv::conformance::kHour);
  EXPECT_EQ((*store)->RunGc().evicted_watermark, 1u);
}

TEST(RadosStoreUrl, ParsesEveryParameter) {
  ASSERT_OK_AND_ASSIGN(RadosStoreConfig c,
                       ParseRadosUrl("rados://kvpool?conf=/etc/ceph/x.conf&id=eng&keyring=/k&"
                                     "ns=prod&timeout_ms=2500"));
  EXPECT_EQ(c.pool, "kvpool");
  EXPECT_EQ(c.conf_path, "/etc/ceph/x.conf");
  EXPECT_EQ(c.client_id, "eng");
  EXPECT_EQ(c.keyring, "/k");
  EXPECT_EQ(c.name_space, "prod");
  EXPECT_EQ(c.timeout_ms, 2500);
  ASSERT_OK_AND_ASSIGN(RadosStoreConfig d, ParseRadosUrl("rados://p"));
  EXPECT_EQ(d.client_id, "admin");
  for (const char* bad : {"kv", "rados://", "rados://p?x=1", "rados://p?conf", "rados://a/b",
                          "rados://p?timeout_ms=abc", "rados://p?timeout_ms=5"}) {
    EXPECT_THAT(ParseRadosUrl(bad), StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
}

TEST(RadosStoreDeadline, UnreachableMonitorIsUnavailableWithinTheDeadline) {
  // A conf whose monitor address has nothing listening.
  const std::string conf = cluster->conf() + ".unreachable";
  {
    std::ofstream f(conf);
    f << "[global]\nmon_host = 127.0.0.1:9\nauth_client_required = cephx\nkeyring = "
      << cluster->conf().substr(0, cluster->conf().rfind('/')) << "/keyring\n";
  }
  RadosStoreConfig c = cluster->Config("x", /*timeout_ms=*/2000);
  c.conf_path = conf;
  Stopwatch sw;
  auto store = RadosStore::Open(c);
  EXPECT_THAT(store.status(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_LT(sw.ElapsedSeconds(), 15.0);
  std::remove(conf.c_str());
}

// OSDs 0 and 1 paused (SIGSTOP: a hung disk or network): the pool is below min_size, every
// operation on it fails Unavailable when its deadline passes, and works again once they resume.
TEST(RadosStoreDeadline, OperationsOnAnInactivePoolFailUnavailableInTime) {
  if (!cluster->owned()) GTEST_SKIP() << "adopted cluster: not pausing its OSDs";
  FakeClock clock(kStart);
  const std::string ns = FreshNamespace();
  auto slow = RadosStore::Open(TestConfig(ns, Limits(), /*timeout_ms=*/3000), &clock);
  ASSERT_OK(slow.status());
  const auto chain = Chain(6, 8);
  for (const auto& m : chain) ASSERT_OK((*slow)->Put(m, Payload(m.key)));
  ASSERT_EQ(cluster->Script("pause-osd", "0"), 0);
  ASSERT_EQ(cluster->Script("pause-osd", "1"), 0);
  Stopwatch sw;
  absl::StatusOr<kv::StoredBlock> got = absl::UnknownError("");
  // Some block has a PG whose primary is paused (8 PGs, 2 of 3 OSDs paused: all of them).
  got = (*slow)->Get(chain[0].key);
  const double get_s = sw.ElapsedSeconds();
  sw.Reset();
  const auto fresh = Block(7, 0, kv::kRootBlockKey);
  absl::Status put = (*slow)->Put(fresh, Payload(fresh.key));
  const double put_s = sw.ElapsedSeconds();
  ASSERT_EQ(cluster->Script("resume-osd", "0"), 0);
  ASSERT_EQ(cluster->Script("resume-osd", "1"), 0);
  EXPECT_THAT(got.status(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(put, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_GE(get_s, 2.5);
  EXPECT_LT(get_s, 10.0);
  EXPECT_LT(put_s, 10.0);
  // Back: the blocks written before are intact (a longer deadline covers re-peering).
  auto store = RadosStore::Open(TestConfig(ns, Limits()), &clock);
  ASSERT_OK(store.status());
  for (const auto& m : chain) {
    ASSERT_OK_AND_ASSIGN(kv::StoredBlock b, (*store)->Get(m.key));
    EXPECT_EQ(b.payload, Payload(m.key));
  }
  // The failed put left nothing or the whole record.
  auto f = (*store)->Get(fresh.key);
  if (f.ok()) {
    EXPECT_EQ(f->payload, Payload(fresh.key));
  } else {
    EXPECT_THAT(f.status(), StatusIs(absl::StatusCode::kNotFound));
  }
}

// The RADOS counterpart of the directory store's disk-full test (FaultInjectionTest.
// NoSpaceFailsThePutAndLeavesNothing): a pool over its quota fails puts with ResourceExhausted
// right away (FULL_TRY: never blocked until the deadline), reads and deletes keep working, and
// puts succeed again once the quota is lifted. Own pool `kvfull` (quotas are per pool).
TEST(RadosStoreFull, APoolOverItsQuotaFailsPutsCleanly) {
  if (!cluster->owned()) GTEST_SKIP() << "adopted cluster: not creating pools in it";
  ASSERT_EQ(cluster->Ceph("osd pool create kvfull 4 4 erasure ec21"), 0);
  ASSERT_EQ(cluster->Ceph("osd pool set kvfull min_size 2"), 0);
  ASSERT_EQ(cluster->Ceph("osd pool application enable kvfull deepinfer"), 0);
  FakeClock clock(kStart);
  RadosStoreConfig c = cluster->Config("", /*timeout_ms=*/20000);
  c.pool = "kvfull";
  c.client_id = "admin";  // client.deepinfer may use pool kv only
  auto store = RadosStore::Open(c, &clock);
  ASSERT_OK(store.status());
  const auto first = Block(8, 0, kv::kRootBlockKey);
  ASSERT_OK((*store)->Put(first, Payload(first.key)));
  ASSERT_EQ(cluster->Ceph("osd pool set-quota kvfull max_objects 1"), 0);
  // The monitor flags the pool full once the manager reports its usage (seconds).
  absl::Status last;
  int i = 0;
  Stopwatch sw;
  for (; sw.ElapsedSeconds() < 60; ++i) {
    const auto m = Block(9, i, kv::kRootBlockKey);
    Stopwatch op;
    last = (*store)->Put(m, Payload(m.key));
    EXPECT_LT(op.ElapsedSeconds(), 15.0) << "a put on a full pool must not wait for space";
    if (absl::IsResourceExhausted(last)) break;
    ASSERT_OK(last) << "a put either succeeds or fails ResourceExhausted";
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  EXPECT_THAT(last, StatusIs(absl::StatusCode::kResourceExhausted));
  ASSERT_OK_AND_ASSIGN(kv::StoredBlock b, (*store)->Get(first.key));
  EXPECT_EQ(b.payload, Payload(first.key));
  EXPECT_OK((*store)->Delete(first.key));  // freeing space works on a full pool
  ASSERT_EQ(cluster->Ceph("osd pool set-quota kvfull max_objects 0"), 0);
  absl::Status again;
  for (Stopwatch w; w.ElapsedSeconds() < 60;) {
    const auto m = Block(10, 0, kv::kRootBlockKey);
    again = (*store)->Put(m, Payload(m.key));
    if (again.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  EXPECT_OK(again);
}

// Degraded reads: kill one of the three OSDs (SIGKILL, its memstore is lost) while a writer
// runs. k=2 m=1 with min_size 2: every block written before reads back byte-identical, writes
// either succeed or fail cleanly, and nothing ever reads back wrong. Then the OSD is replaced
// (re-formatted under its id) and backfilled. Last in this binary: it degrades the cluster.
TEST(RadosStoreOsdLoss, DegradedReadsAndWritesWithOneOsdDown) {
  if (!cluster->owned()) GTEST_SKIP() << "adopted cluster: not killing its OSDs";
  FakeClock clock(kStart);
  const std::string ns = FreshNamespace();
  auto store = RadosStore::Open(TestConfig(ns, Limits(), /*timeout_ms=*/60000), &clock);
  ASSERT_OK(store.status());
  constexpr size_t kBlockPayload = 18752;  // a dsv4-tiny-a block (docs/kv-format.md §6)
  std::vector<kv::BlockMeta> before;
  for (int c = 0; c < 8; ++c) {
    for (const auto& m : Chain(1000 + c, 8)) before.push_back(m);
  }
  for (const auto& m : before) ASSERT_OK((*store)->Put(m, Payload(m.key, kBlockPayload)));

  // A writer keeps putting new blocks through the loss.
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<kv::BlockMeta> written, failed;
  std::vector<std::string> bad_codes;
  std::thread writer([&] {
    auto w = RadosStore::Open(TestConfig(ns, Limits(), 60000), &clock);
    if (!w.ok()) return;
    for (int c = 0; !stop.load(); ++c) {
      for (const auto& m : Chain(5000 + c, 4)) {
        absl::Status s = (*w)->Put(m, Payload(m.key, kBlockPayload));
        std::lock_guard<std::mutex> lock(mu);
        if (s.ok()) {
          written.push_back(m);
        } else {
          failed.push_back(m);
          if (!absl::IsUnavailable(s) && !absl::IsResourceExhausted(s)) {
            bad_codes.push_back(s.ToString());
          }
        }
      }
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(cluster->Script("stop-osd", "2"), 0);
  Stopwatch sw;
  int wrong = 0, missing = 0;
  for (const auto& m : before) {
    auto b = (*store)->Get(m.key);
    if (!b.ok()) {
      ++missing;
      ADD_FAILURE() << m.key.ToHex() << ": " << b.status();
    } else if (b->payload != Payload(m.key, kBlockPayload) || b->meta.key != m.key) {
      ++wrong;
    }
  }
  const double degraded_read_s = sw.ElapsedSeconds();
  std::this_thread::sleep_for(std::chrono::seconds(2));  // writes on the degraded pool
  stop = true;
  writer.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(missing, 0);
  EXPECT_THAT(bad_codes, ::testing::IsEmpty());
  std::fprintf(stderr,
               "OSD loss: %zu blocks read back degraded in %.1f s; writer: %zu ok, %zu failed\n",
               before.size(), degraded_read_s, written.size(), failed.size());
  EXPECT_GT(written.size(), 0u);
  for (const auto& m : written) {
    ASSERT_OK_AND_ASSIGN(kv::StoredBlock b, (*store)->Get(m.key));
    EXPECT_TRUE(b.payload == Payload(m.key, kBlockPayload));
  }
  for (const auto& m : failed) {
    auto b = (*store)->Get(m.key);
    if (b.ok()) {
      EXPECT_TRUE(b->payload == Payload(m.key, kBlockPayload));
    }
  }
  // Replace the OSD; everything still reads back (from any two of the three shards).
  ASSERT_EQ(cluster->Script("start-osd", "2"), 0);
  for (const auto& m : before) {
    ASSERT_OK_AND_ASSIGN(kv::StoredBlock b, (*store)->Get(m.key));
    EXPECT_TRUE(b.payload == Payload(m.key, kBlockPayload));
  }
}

}  // namespace
}  // namespace deepinfer::kvstore
