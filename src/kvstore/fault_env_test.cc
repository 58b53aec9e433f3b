// Crash safety of the KV store: whatever the file layer does (process killed between write and
// rename, torn writes, ENOSPC, EIO, a rename that lost data), a restarted store returns only
// complete records or misses — never a wrong or partial one.
#include "kvstore/fault_env.h"

#include <cerrno>
#include <filesystem>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/store.h"
#include "kvstore/test_util.h"

namespace deepinfer::kvstore {
namespace {

using ::deepinfer::testing::StatusIs;
using kv::BlockKey;
using kv::BlockMeta;
using testing::ChainBlock;
using testing::PayloadFor;
using testing::TempDir;

constexpr size_t kPayload = 3000;

KvStoreConfig Config(const std::string& dir, bool sync) {
  KvStoreConfig c;
  c.dir = dir;
  c.capacity_bytes = 1 << 30;
  c.background_gc = false;
  c.sync = sync;
  return c;
}

// Every key either reads back exactly its payload or is a miss; returns how many were present.
int CheckOnlyCompleteRecords(KvStore* s, const std::vector<BlockMeta>& metas) {
  int present = 0;
  for (const BlockMeta& m : metas) {
    auto got = s->Get(m.key);
    if (got.ok()) {
      ++present;
      EXPECT_EQ(got->payload, PayloadFor(m.key, kPayload)) << m.key.ToHex();
      EXPECT_EQ(got->meta.tokens, m.tokens);
    } else {
      EXPECT_THAT(got, StatusIs(absl::StatusCode::kNotFound)) << m.key.ToHex();
    }
  }
  return present;
}

std::vector<BlockMeta> Chain(uint64_t id, int n) {
  std::vector<BlockMeta> out;
  BlockKey parent = kv::kRootBlockKey;
  for (int i = 0; i < n; ++i) {
    out.push_back(ChainBlock(id, i, parent));
    parent = out.back().key;
  }
  return out;
}

// Crash after every possible number of file operations while writing 3 records, with and
// without fsync, with the unsynced tail dropped or torn at a random point.
TEST(FaultInjectionTest, CrashAtEveryOperationLeavesOnlyCompleteRecords) {
  for (bool sync : {true, false}) {
    for (bool torn : {false, true}) {
      for (int crash_after = 0; crash_after <= 16; ++crash_after) {
        SCOPED_TRACE(::testing::Message()
                     << "sync=" << sync << " torn=" << torn << " crash_after=" << crash_after);
        TempDir dir;
        const std::vector<BlockMeta> old_blocks = Chain(1, 2);
        const std::vector<BlockMeta> new_blocks = Chain(2, 3);
        {
          ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(Config(dir.path(), true)));
          for (const BlockMeta& m : old_blocks) ASSERT_OK(s->Put(m, PayloadFor(m.key, kPayload)));
        }
        FaultInjectionEnv env(Env::Posix());
        {
          ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(Config(dir.path(), sync), &env));
          env.CrashAfter(crash_after, torn, /*seed=*/crash_after + 1);
          for (const BlockMeta& m : new_blocks) {
            absl::Status st = s->Put(m, PayloadFor(m.key, kPayload));
            if (!st.ok()) {
              EXPECT_THAT(st, StatusIs(absl::StatusCode::kUnavailable));
            }
          }
        }
        // Restart on the real file system.
        ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(Config(dir.path(), true)));
        EXPECT_EQ(CheckOnlyCompleteRecords(s.get(), old_blocks), 2);
        const int present = CheckOnlyCompleteRecords(s.get(), new_blocks);
        if (sync && !env.crashed()) {
          EXPECT_EQ(present, 3);
        }
        EXPECT_EQ(testing::CountFiles(dir.path() + "/tmp"), 0u);
      }
    }
  }
}

TEST(FaultInjectionTest, KilledBetweenWriteAndRename) {
  TempDir dir;
  FaultInjectionEnv env(Env::Posix());
  const BlockMeta m = ChainBlock(1, 0, kv::kRootBlockKey);
  {
    ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(Config(dir.path(), true), &env));
    // create, append, sync succeed; the process dies at the rename.
    env.CrashAfter(3);
    EXPECT_THAT(s->Put(m, PayloadFor(m.key, kPayload)), StatusIs(absl::StatusCode::kUnavailable));
    EXPECT_TRUE(env.crashed());
  }
  EXPECT_EQ(testing::CountFiles(dir.path() + "/tmp"), 1u);  // the complete temp file is left
  ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(Config(dir.path(), true)));
  EXPECT_THAT(s->Get(m.key), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(testing::CountFiles(dir.path()), 0u);  // temp removed at startup
}

TEST(FaultInjectionTest, NoSpaceFailsThePutAndLeavesNothing) {
  TempDir dir;
  FaultInjectionEnv env(Env::Posix());
  ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(Config(dir.path(), true), &env));
  const BlockMeta m = ChainBlock(1, 0, kv::kRootBlockKey);
  env.FailOp(FaultInjectionEnv::Op::kAppend, ENOSPC, 1);  // short write, then ENOSPC
  EXPECT_THAT(s->Put(m, PayloadFor(m.key, kPayload)),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(s->Get(m.key), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(testing::CountFiles(dir.path()), 0u);
  // Space is back: the same put succeeds.
  ASSERT_OK(s->Put(m, PayloadFor(m.key, kPayload)));
  ASSERT_OK_AND_ASSIGN(kv::StoredBlock got, s->Get(m.key));
  EXPECT_EQ(got.payload, PayloadFor(m.key, kPayload));
}

TEST(FaultInjectionTest, IoErrorsOnSyncRenameAndRead) {
  TempDir dir;
  FaultInjectionEnv env(Env::Posix());
  ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(Config(dir.path(), true), &env));
  const BlockMeta m = ChainBlock(1, 0, kv::kRootBlockKey);
  env.FailOp(FaultInjectionEnv::Op::kSync, EIO, 1);
  EXPECT_THAT(s->Put(m, PayloadFor(m.key, kPayload)), StatusIs(absl::StatusCode::kUnavailable));
  env.FailOp(FaultInjectionEnv::Op::kRename, EIO, 1);
  EXPECT_THAT(s->Put(m, PayloadFor(m.key, kPayload)), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(s->Get(m.key), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(testing::CountFiles(dir.path()), 0u);

  ASSERT_OK(s->Put(m, PayloadFor(m.key, kPayload)));
  env.FailOp(FaultInjectionEnv::Op::kRead, EIO, 1);
  // A failed read is reported (not data, not a deletion: the disk may recover).
  EXPECT_THAT(s->Get(m.key), StatusIs(absl::StatusCode::kUnavailable));
  ASSERT_OK_AND_ASSIGN(kv::StoredBlock got, s->Get(m.key));
  EXPECT_EQ(got.payload, PayloadFor(m.key, kPayload));
}

TEST(FaultInjectionTest, TornRenameIsDetectedOnReadAndAtRestart) {
  TempDir dir;
  FaultInjectionEnv env(Env::Posix());
  const BlockMeta a = ChainBlock(1, 0, kv::kRootBlockKey);
  const BlockMeta b = ChainBlock(2, 0, kv::kRootBlockKey);
  {
    ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(Config(dir.path(), true), &env));
    env.SetTornRename(true);  // the file system acknowledges but keeps half of each file
    ASSERT_OK(s->Put(a, PayloadFor(a.key, kPayload)));
    ASSERT_OK(s->Put(b, PayloadFor(b.key, kPayload)));
    env.ClearFaults();
    EXPECT_THAT(s->Get(a.key), StatusIs(absl::StatusCode::kNotFound));
    EXPECT_FALSE(std::filesystem::exists(s->RecordPath(a.key)));
    EXPECT_EQ(s->Stats()->evicted_corrupt, 1u);
  }
  ASSERT_OK_AND_ASSIGN(auto s, KvStore::Open(Config(dir.path(), true)));
  EXPECT_THAT(s->Get(b.key), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(s->Stats()->records, 0u);
  EXPECT_EQ(testing::CountFiles(dir.path()), 0u);
}

}  // namespace
}  // namespace deepinfer::kvstore
