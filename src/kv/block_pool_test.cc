#include "kv/block_pool.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace deepinfer::kv {
namespace {

using ::deepinfer::testing::StatusIs;

TEST(BlockPoolTest, RejectsBadSizes) {
  EXPECT_THAT(BlockPool::Create(0, 64).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(BlockPool::Create(4, 0).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(BlockPool::Create(4, 65).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(BlockPoolTest, AllocateIsAllOrNothingAndIdsAreDistinct) {
  ASSERT_OK_AND_ASSIGN(auto pool, BlockPool::Create(5, 128));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pool->base()) % 64, 0u);
  std::vector<int32_t> a;
  ASSERT_TRUE(pool->Allocate(3, &a));
  EXPECT_EQ(pool->num_used(), 3);
  std::vector<int32_t> b;
  EXPECT_FALSE(pool->Allocate(3, &b));  // only 2 free
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(pool->num_free(), 2);
  ASSERT_TRUE(pool->Allocate(2, &b));
  std::set<int32_t> all(a.begin(), a.end());
  all.insert(b.begin(), b.end());
  EXPECT_EQ(all.size(), 5u);
  for (int32_t id : all) EXPECT_TRUE(id >= 0 && id < 5);
  pool->Release(a);
  pool->Release(b);
  EXPECT_EQ(pool->num_free(), 5);
}

TEST(BlockPoolTest, RefCountKeepsSharedBlockUntilLastRelease) {
  ASSERT_OK_AND_ASSIGN(auto pool, BlockPool::Create(2, 64));
  std::vector<int32_t> a;
  ASSERT_TRUE(pool->Allocate(1, &a));
  pool->IncRef(a[0]);
  EXPECT_EQ(pool->ref_count(a[0]), 2);
  pool->Release(a);
  EXPECT_EQ(pool->num_free(), 1);
  pool->Release(a);
  EXPECT_EQ(pool->num_free(), 2);
  EXPECT_EQ(pool->ref_count(a[0]), 0);
}

TEST(BlockPoolDeathTest, DoubleFreeAborts) {
  ASSERT_OK_AND_ASSIGN(auto pool, BlockPool::Create(2, 64));
  std::vector<int32_t> a;
  ASSERT_TRUE(pool->Allocate(1, &a));
  pool->Release(a);
  EXPECT_DEATH(pool->Release(a), "double free");
}

}  // namespace
}  // namespace deepinfer::kv
