// Shared-directory mode of KvStore (store.h): several store objects on one directory, as the
// `--kv-store-dir` engines and a `deepinfer kvstore --gc-only` process use it, plus one test
// with real second processes (fork).
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/fault_env.h"
#include "kvstore/store.h"
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
constexpr int64_t kHour = 3600 * kSecond;
constexpr int64_t kDay = 24 * kHour;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const std::string& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
}

// Sets `path`'s mtime to `age` before now (real wall clock, as the GC reads it).
void Age(const std::string& path, int64_t age) {
  ASSERT_OK(Env::Posix()->SetModifiedUnixNanos(path, Env::Posix()->NowUnixNanos() - age));
}

int64_t Mtime(const std::string& path) { return *Env::Posix()->ModifiedUnixNanos(path); }

// Records the names of the files it creates.
class RecordingEnv : public FaultInjectionEnv {
 public:
  RecordingEnv() : FaultInjectionEnv(Env::Posix()) {}
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      created_.push_back(path);
    }
    return FaultInjectionEnv::NewWritableFile(path);
  }
  std::vector<std::string> created() {
    std::lock_guard<std::mutex> lock(mu_);
    return created_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> created_;
};

// Simulates a reader hitting `target` right after the GC's scan stat it: the first stat of
// `target` returns the old mtime and then refreshes it, as a concurrent LongestPrefix would.
class TouchAfterScanEnv : public FaultInjectionEnv {
 public:
  explicit TouchAfterScanEnv(std::string target)
      : FaultInjectionEnv(Env::Posix()), target_(std::move(target)) {}
  absl::StatusOr<int64_t> ModifiedUnixNanos(const std::string& path) override {
    absl::StatusOr<int64_t> m = FaultInjectionEnv::ModifiedUnixNanos(path);
    if (path == target_ && !touched_) {
      touched_ = true;
      EXPECT_OK(Env::Posix()->SetModifiedUnixNanos(path, NowUnixNanos()));
    }
    return m;
  }

 private:
  const std::string target_;
  bool touched_ = false;
};

class SharedStoreTest : public ::testing::Test {
 protected:
  KvStoreConfig Config(uint64_t capacity = 1 << 30) {
    KvStoreConfig c;
    c.dir = dir_.path();
    c.capacity_bytes = capacity;
    c.background_gc = false;
    c.sync = false;
    c.shared = true;
    return c;
  }
  std::unique_ptr<KvStore> OpenStore(const KvStoreConfig& c, Env* env = Env::Posix()) {
    auto s = KvStore::Open(c, env, &clock_);
    EXPECT_OK(s.status());
    return s.ok() ? std::move(*s) : nullptr;
  }
  BlockMeta PutBlock(KvStore* s, uint64_t chain, int i, const BlockKey& parent,
                     TrafficClass cls = TrafficClass::kChat) {
    BlockMeta m = ChainBlock(chain, i, parent, cls);
    EXPECT_OK(s->Put(m, PayloadFor(m.key, kPayload)));
    return m;
  }
  // Puts a chain of `n` blocks; returns their keys.
  std::vector<BlockKey> PutChain(KvStore* s, uint64_t chain, int n,
                                 TrafficClass cls = TrafficClass::kChat) {
    std::vector<BlockKey> keys;
    BlockKey parent = kv::kRootBlockKey;
    for (int i = 0; i < n; ++i) {
      parent = PutBlock(s, chain, i, parent, cls).key;
      keys.push_back(parent);
    }
    return keys;
  }
  bool OnDisk(KvStore* s, const BlockKey& k) { return std::filesystem::exists(s->RecordPath(k)); }

  TempDir dir_;
  FakeClock clock_{1000 * kDay};
};

TEST_F(SharedStoreTest, RecordWrittenByOneIsAHitInTheOtherWithIdenticalBytes) {
  auto a = OpenStore(Config());
  auto b = OpenStore(Config());
  const std::vector<BlockKey> keys = PutChain(a.get(), 1, 3);
  EXPECT_EQ(*b->LongestPrefix(keys), 3u);
  for (int i = 0; i < 3; ++i) {
    const BlockMeta m = ChainBlock(1, i, i == 0 ? kv::kRootBlockKey : keys[i - 1]);
    ASSERT_OK_AND_ASSIGN(std::string got, b->GetRecord(keys[i]));
    ASSERT_OK_AND_ASSIGN(std::string want, kv::EncodeBlockRecord(m, PayloadFor(m.key, kPayload)));
    EXPECT_EQ(got, want);
    EXPECT_EQ(got, ReadAll(a->RecordPath(keys[i])));
  }
  // And back: b extends the chain, a sees all four.
  const BlockMeta d = PutBlock(b.get(), 1, 3, keys[2]);
  std::vector<BlockKey> four = keys;
  four.push_back(d.key);
  EXPECT_EQ(*a->LongestPrefix(four), 4u);
  ASSERT_OK_AND_ASSIGN(kv::StoredBlock got, a->Get(d.key));
  EXPECT_EQ(got.payload, PayloadFor(d.key, kPayload));
  EXPECT_EQ(got.meta.parent, keys[2]);

  // A put of a block another writer stored does not rewrite it (same inode), only touches it.
  struct stat before, after;
  ASSERT_EQ(::stat(a->RecordPath(keys[0]).c_str(), &before), 0);
  Age(a->RecordPath(keys[0]), kHour);
  PutBlock(b.get(), 1, 0, kv::kRootBlockKey);
  ASSERT_EQ(::stat(a->RecordPath(keys[0]).c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino);
  EXPECT_LT(Env::Posix()->NowUnixNanos() - Mtime(a->RecordPath(keys[0])), kHour / 2);

  // Delete in one store removes the other's record; both then miss.
  ASSERT_OK(b->Delete(d.key));
  EXPECT_EQ(*a->LongestPrefix(four), 3u);
  EXPECT_THAT(a->Get(d.key), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(SharedStoreTest, TempNamesAreUniquePerWriterAndPut) {
  RecordingEnv env;
  auto a = OpenStore(Config(), &env);
  auto b = OpenStore(Config(), &env);
  EXPECT_NE(a->writer_id(), b->writer_id());
  EXPECT_NE(a->writer_id().find(absl::StrCat(".", getpid(), ".")), std::string::npos);
  const BlockMeta m = ChainBlock(5, 0, kv::kRootBlockKey);
  for (int round = 0; round < 3; ++round) {  // the same key, written again and again
    for (KvStore* s : {a.get(), b.get()}) {
      ASSERT_OK(s->Put(m, PayloadFor(m.key, kPayload)));
      ASSERT_OK(s->Delete(m.key));
    }
  }
  const std::vector<std::string> names = env.created();
  ASSERT_EQ(names.size(), 6u);
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& id = i % 2 == 0 ? a->writer_id() : b->writer_id();
    EXPECT_THAT(names[i], ::testing::StartsWith(dir_.path() + "/tmp/" + m.key.ToHex() + "." + id));
    EXPECT_THAT(names[i], ::testing::EndsWith(".tmp"));
  }
}

TEST_F(SharedStoreTest, OpenAndGcDeleteOnlyTempFilesOlderThanTheGrace) {
  ASSERT_TRUE(std::filesystem::create_directories(dir_.path() + "/tmp"));
  const std::string young = dir_.path() + "/tmp/aa.other-host.1.0.0.tmp";
  const std::string old = dir_.path() + "/tmp/bb.other-host.1.0.1.tmp";
  WriteAll(young, "being written");
  WriteAll(old, "abandoned");
  Age(old, 20 * 60 * kSecond);  // grace: 10 minutes
  auto s = OpenStore(Config());
  EXPECT_TRUE(std::filesystem::exists(young));
  EXPECT_FALSE(std::filesystem::exists(old));
  GcResult r = s->RunGc();
  EXPECT_EQ(r.temp_files_removed, 0u);
  EXPECT_TRUE(std::filesystem::exists(young));
  Age(young, 11 * 60 * kSecond);  // its writer died
  r = s->RunGc();
  EXPECT_EQ(r.temp_files_removed, 1u);
  EXPECT_FALSE(std::filesystem::exists(young));
}

TEST_F(SharedStoreTest, GcOnlyAppliesTtlPerClassFromMtimes) {
  auto writer = OpenStore(Config());
  const BlockKey chat_old = PutChain(writer.get(), 1, 1)[0];
  const BlockKey chat_4d = PutChain(writer.get(), 2, 1)[0];
  const BlockKey agent_4d = PutChain(writer.get(), 3, 1, TrafficClass::kAgent)[0];
  const std::vector<BlockKey> chain = PutChain(writer.get(), 4, 2);
  Age(writer->RecordPath(chat_old), 8 * kDay);
  Age(writer->RecordPath(chat_4d), 4 * kDay);
  Age(writer->RecordPath(agent_4d), 4 * kDay);
  Age(writer->RecordPath(chain[0]), 10 * kDay);  // expired, but its suffix is in use
  Age(writer->RecordPath(chain[1]), kHour);

  auto gc = OpenStore(Config());
  const GcResult r = gc->RunGc();
  EXPECT_TRUE(r.scanned);
  EXPECT_EQ(r.evicted_ttl, 2u);
  EXPECT_EQ(r.evicted_watermark, 0u);
  EXPECT_EQ(r.bytes_freed, 2 * kRecordBytes);
  EXPECT_EQ(r.records, 3u);
  EXPECT_EQ(r.bytes, 3 * kRecordBytes);
  EXPECT_FALSE(OnDisk(gc.get(), chat_old));
  EXPECT_FALSE(OnDisk(gc.get(), agent_4d));
  EXPECT_TRUE(OnDisk(gc.get(), chat_4d));
  EXPECT_TRUE(OnDisk(gc.get(), chain[0]));
  EXPECT_TRUE(OnDisk(gc.get(), chain[1]));
  ASSERT_OK_AND_ASSIGN(auto st, gc->Stats());
  EXPECT_EQ(st.records, 3u);
  EXPECT_EQ(st.evicted_ttl, 2u);
  // The suffix expires too: both go in one pass, suffix first.
  Age(writer->RecordPath(chain[1]), 8 * kDay);
  EXPECT_EQ(gc->RunGc().evicted_ttl, 2u);
  EXPECT_EQ(*writer->LongestPrefix(chain), 0u);
}

TEST_F(SharedStoreTest, GcOnlyEvictsLeastRecentlyUsedByMtimeAboveTheWatermark) {
  auto writer = OpenStore(Config());
  std::vector<BlockKey> keys;
  for (int i = 0; i < 10; ++i) {
    keys.push_back(PutChain(writer.get(), 10 + i, 1)[0]);
    Age(writer->RecordPath(keys.back()), (10 - i) * kHour);  // keys[0] is the oldest
  }
  auto gc = OpenStore(Config(10 * kRecordBytes));  // 10 records > 0.9 * 10: down to 8
  const GcResult r = gc->RunGc();
  EXPECT_EQ(r.evicted_watermark, 2u);
  EXPECT_EQ(r.records, 8u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(OnDisk(gc.get(), keys[i]), i >= 2) << i;
}

TEST_F(SharedStoreTest, GcNeverRemovesARecordAnotherInstanceJustTouched) {
  auto writer = OpenStore(Config());
  auto reader = OpenStore(Config());
  const BlockKey looked_up = PutChain(writer.get(), 1, 1)[0];
  const BlockKey fetched = PutChain(writer.get(), 2, 1)[0];
  const BlockKey unused = PutChain(writer.get(), 3, 1)[0];
  for (const BlockKey& k : {looked_up, fetched, unused}) Age(writer->RecordPath(k), 8 * kDay);
  const BlockKey one[] = {looked_up};
  EXPECT_EQ(*reader->LongestPrefix(one), 1u);  // refreshes the mtime: it is older than grace/4
  ASSERT_OK(reader->Get(fetched).status());
  auto gc = OpenStore(Config());
  EXPECT_EQ(gc->RunGc().evicted_ttl, 1u);
  EXPECT_TRUE(OnDisk(gc.get(), looked_up));
  EXPECT_TRUE(OnDisk(gc.get(), fetched));
  EXPECT_FALSE(OnDisk(gc.get(), unused));

  // Over the watermark, records hit within the grace are kept even when they are the LRU.
  auto small = OpenStore(Config(kRecordBytes));
  const GcResult r = small->RunGc();
  EXPECT_EQ(r.evicted_watermark, 0u);
  EXPECT_EQ(r.kept_recent, 2u);
  EXPECT_TRUE(OnDisk(gc.get(), looked_up));
  EXPECT_TRUE(OnDisk(gc.get(), fetched));
}

TEST_F(SharedStoreTest, GcReChecksTheMtimeJustBeforeUnlinking) {
  auto writer = OpenStore(Config());
  const BlockKey k = PutChain(writer.get(), 1, 1)[0];
  const BlockKey other = PutChain(writer.get(), 2, 1)[0];
  Age(writer->RecordPath(k), 8 * kDay);
  Age(writer->RecordPath(other), 8 * kDay);
  TouchAfterScanEnv env(writer->RecordPath(k));  // a reader hits k after the scan saw it old
  auto gc = OpenStore(Config(), &env);
  const GcResult r = gc->RunGc();
  EXPECT_EQ(r.evicted_ttl, 1u);
  EXPECT_EQ(r.kept_recent, 1u);
  EXPECT_TRUE(OnDisk(gc.get(), k));
  EXPECT_FALSE(OnDisk(gc.get(), other));
}

TEST_F(SharedStoreTest, DamagedRecordOfAnotherProcessIsAMissAndDeleted) {
  auto writer = OpenStore(Config());
  const std::vector<BlockKey> keys = PutChain(writer.get(), 1, 4);
  const std::string p0 = writer->RecordPath(keys[0]);
  const std::string original0 = ReadAll(p0);
  WriteAll(p0, original0.substr(0, 700));  // truncated
  std::string flipped = ReadAll(writer->RecordPath(keys[1]));
  flipped[800] ^= 1;  // payload bit flip
  WriteAll(writer->RecordPath(keys[1]), flipped);
  WriteAll(writer->RecordPath(keys[2]), original0);  // a whole record, of another key

  auto reader = OpenStore(Config());
  for (int i = 0; i < 3; ++i) {
    EXPECT_THAT(reader->Get(keys[i]), StatusIs(absl::StatusCode::kNotFound)) << i;
    EXPECT_FALSE(OnDisk(reader.get(), keys[i])) << i;
  }
  ASSERT_OK_AND_ASSIGN(auto st, reader->Stats());
  EXPECT_EQ(st.evicted_corrupt, 3u);
  EXPECT_EQ(st.misses, 3u);
  EXPECT_EQ(*reader->LongestPrefix(keys), 0u);
  // A damaged header found by the GC's rescan is deleted too.
  WriteAll(writer->RecordPath(keys[0]), std::string(kRecordBytes, 'x'));
  auto gc = OpenStore(Config());
  EXPECT_EQ(gc->RunGc().records, 1u);
  EXPECT_FALSE(OnDisk(gc.get(), keys[0]));
  EXPECT_TRUE(OnDisk(gc.get(), keys[3]));
}

// Forks a child that runs `body` (its exit status) and waits for it.
template <typename F>
int RunInChild(F body) {
  const pid_t pid = fork();
  if (pid == 0) _exit(body());
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

TEST_F(SharedStoreTest, RealSecondProcessesWriteAndCollect) {
  const KvStoreConfig config = Config();
  std::vector<BlockKey> keys;
  BlockKey parent = kv::kRootBlockKey;
  for (int i = 0; i < 4; ++i) {
    keys.push_back(ChainBlock(9, i, parent).key);
    parent = keys.back();
  }
  // A writer process.
  EXPECT_EQ(RunInChild([&] {
              auto s = KvStore::Open(config);
              if (!s.ok()) return 10;
              BlockKey p = kv::kRootBlockKey;
              for (int i = 0; i < 4; ++i) {
                const BlockMeta m = ChainBlock(9, i, p);
                if (!(*s)->Put(m, PayloadFor(m.key, kPayload)).ok()) return 11;
                p = m.key;
              }
              return 0;
            }),
            0);
  auto reader = OpenStore(config);
  EXPECT_EQ(*reader->LongestPrefix(keys), 4u);
  for (const BlockKey& k : keys) {
    ASSERT_OK_AND_ASSIGN(kv::StoredBlock b, reader->Get(k));
    EXPECT_EQ(b.payload, PayloadFor(k, kPayload));
  }
  // All expire; this process then hits the first two. A GC process removes the other two.
  for (const BlockKey& k : keys) Age(reader->RecordPath(k), 8 * kDay);
  const std::span<const BlockKey> two(keys.data(), 2);
  EXPECT_EQ(*reader->LongestPrefix(two), 2u);
  EXPECT_EQ(RunInChild([&] {
              auto s = KvStore::Open(config);
              if (!s.ok()) return 100;
              return static_cast<int>((*s)->RunGc().evicted_ttl);
            }),
            2);
  EXPECT_EQ(*reader->LongestPrefix(keys), 2u);
  EXPECT_FALSE(OnDisk(reader.get(), keys[2]));
}

}  // namespace
}  // namespace deepinfer::kvstore
