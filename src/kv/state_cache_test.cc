#include "kv/state_cache.h"

#include <set>

#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace deepinfer::kv {
namespace {

using ::deepinfer::testing::StatusIs;

TEST(StateCacheTest, RejectsBadSizes) {
  EXPECT_THAT(StateCache::Create(0, 64).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(StateCache::Create(2, 10).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(StateCacheTest, SlotsAreDistinctAndReturn) {
  ASSERT_OK_AND_ASSIGN(auto cache, StateCache::Create(3, 128));
  std::set<int32_t> got;
  for (int i = 0; i < 3; ++i) {
    auto s = cache->Allocate();
    ASSERT_TRUE(s.has_value());
    got.insert(*s);
  }
  EXPECT_EQ(got.size(), 3u);
  EXPECT_FALSE(cache->Allocate().has_value());
  for (int32_t s : got) cache->Free(s);
  EXPECT_EQ(cache->num_free(), 3);
}

TEST(StateCacheTest, ZeroByteSlotsAreBookkeepingOnly) {
  ASSERT_OK_AND_ASSIGN(auto cache, StateCache::Create(2, 0));
  EXPECT_EQ(cache->base(), nullptr);
  auto s = cache->Allocate();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(cache->num_used(), 1);
  cache->Free(*s);
}

TEST(StateCacheDeathTest, DoubleFreeAborts) {
  ASSERT_OK_AND_ASSIGN(auto cache, StateCache::Create(1, 64));
  auto s = cache->Allocate();
  cache->Free(*s);
  EXPECT_DEATH(cache->Free(*s), "double free");
}

}  // namespace
}  // namespace deepinfer::kv
