#include "kv/host_tier.h"

#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace deepinfer::kv {
namespace {

using ::deepinfer::testing::StatusIs;

BlockKey Key(uint64_t i) { return BlockKey{i * 0x9E3779B97F4A7C15ull + 1, i}; }
std::string Bytes(uint64_t i, size_t n) {
  std::string s(n, '\0');
  for (size_t j = 0; j < n; ++j) s[j] = static_cast<char>((i * 7 + j) & 0xFF);
  return s;
}

class HostTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    name_ = absl::StrCat("/deepinfer-kv-test-", getpid(), "-",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    (void)HostTier::Unlink(name_);
  }
  void TearDown() override { (void)HostTier::Unlink(name_); }
  std::string name_;
};

TEST_F(HostTierTest, PutGetAndMiss) {
  ASSERT_OK_AND_ASSIGN(auto tier, HostTier::Create(name_, 4096, 4));
  EXPECT_THAT(tier->Get(Key(1)), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK(tier->Put(Key(1), Bytes(1, 4096)));
  ASSERT_OK(tier->Put(Key(2), Bytes(2, 10)));
  ASSERT_OK_AND_ASSIGN(std::string got, tier->Get(Key(1)));
  EXPECT_EQ(got, Bytes(1, 4096));
  ASSERT_OK_AND_ASSIGN(got, tier->Get(Key(2)));
  EXPECT_EQ(got, Bytes(2, 10));
  EXPECT_TRUE(tier->Contains(Key(2)));
  EXPECT_THAT(tier->Put(Key(3), Bytes(3, 4097)), StatusIs(absl::StatusCode::kInvalidArgument));
  const HostTierStats st = tier->Stats();
  EXPECT_EQ(st.used_slots, 2u);
  EXPECT_EQ(st.hits, 2u);
  EXPECT_EQ(st.misses, 1u);
}

TEST_F(HostTierTest, CreateTwiceAndBadNames) {
  ASSERT_OK_AND_ASSIGN(auto tier, HostTier::Create(name_, 64, 2));
  EXPECT_THAT(HostTier::Create(name_, 64, 2), StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(HostTier::Create("no-slash", 64, 2), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(HostTier::Create("/a/b", 64, 2), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(HostTier::Open("/deepinfer-kv-test-absent-xyz"),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(HostTierTest, EvictsLeastRecentlyUsedAndRespectsHits) {
  ASSERT_OK_AND_ASSIGN(auto tier, HostTier::Create(name_, 128, 3));
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_OK(tier->Put(Key(i), Bytes(i, 100)));
  // Order by recency (oldest first): 1, 2, 3. A hit on 1 makes 2 the oldest.
  ASSERT_OK(tier->Get(Key(1)).status());
  ASSERT_OK(tier->Put(Key(4), Bytes(4, 100)));
  EXPECT_FALSE(tier->Contains(Key(2)));
  EXPECT_TRUE(tier->Contains(Key(1)));
  EXPECT_TRUE(tier->Contains(Key(3)));
  ASSERT_OK(tier->Put(Key(5), Bytes(5, 100)));  // evicts 3
  EXPECT_FALSE(tier->Contains(Key(3)));
  EXPECT_EQ(tier->Stats().evictions, 2u);
  ASSERT_OK_AND_ASSIGN(std::string got, tier->Get(Key(5)));
  EXPECT_EQ(got, Bytes(5, 100));
}

TEST_F(HostTierTest, PinnedSlotsAreNeverEvicted) {
  ASSERT_OK_AND_ASSIGN(auto tier, HostTier::Create(name_, 64, 2));
  ASSERT_OK(tier->Put(Key(1), Bytes(1, 64)));
  ASSERT_OK(tier->Put(Key(2), Bytes(2, 64)));
  ASSERT_OK_AND_ASSIGN(PinnedSlot p1, tier->Acquire(Key(1)));
  ASSERT_OK_AND_ASSIGN(PinnedSlot p2, tier->Acquire(Key(2)));
  EXPECT_THAT(tier->Put(Key(3), Bytes(3, 64)), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(tier->Erase(Key(1)), StatusIs(absl::StatusCode::kFailedPrecondition));
  p2.Release();
  ASSERT_OK(tier->Put(Key(3), Bytes(3, 64)));  // evicts 2 (1 is pinned, though older)
  EXPECT_TRUE(tier->Contains(Key(1)));
  EXPECT_FALSE(tier->Contains(Key(2)));
  EXPECT_EQ(p1.view(), Bytes(1, 64));
  p1.Release();
  ASSERT_OK(tier->Erase(Key(1)));
  EXPECT_FALSE(tier->Contains(Key(1)));
  EXPECT_EQ(tier->Stats().used_slots, 1u);
}

// Two processes share one arena: a forked "fetcher" fills blocks that the parent "engine"
// reads, and reads back a block the parent wrote.
TEST_F(HostTierTest, SharedAcrossProcesses) {
  ASSERT_OK_AND_ASSIGN(auto tier, HostTier::Create(name_, 1 << 16, 8));
  ASSERT_OK(tier->Put(Key(100), Bytes(100, 5000)));
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto child = HostTier::Open(name_);
    if (!child.ok()) _exit(10);
    for (uint64_t i = 1; i <= 5; ++i) {
      if (!(*child)->Put(Key(i), Bytes(i, 1000 * i)).ok()) _exit(11);
    }
    auto got = (*child)->Get(Key(100));
    if (!got.ok() || *got != Bytes(100, 5000)) _exit(12);
    _exit(0);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus));
  ASSERT_EQ(WEXITSTATUS(wstatus), 0);
  for (uint64_t i = 1; i <= 5; ++i) {
    ASSERT_OK_AND_ASSIGN(std::string got, tier->Get(Key(i)));
    EXPECT_EQ(got, Bytes(i, 1000 * i)) << i;
  }
  ASSERT_OK_AND_ASSIGN(auto reopened, HostTier::Open(name_));
  EXPECT_EQ(reopened->Stats().used_slots, 6u);
  EXPECT_EQ(reopened->slot_bytes(), 1u << 16);
}

}  // namespace
}  // namespace deepinfer::kv
