#include "kvstore/config.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deepinfer::kvstore {
namespace {

using ::deepinfer::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ParseDurationTest, Units) {
  EXPECT_EQ(*ParseDuration("3d"), 3LL * 86400 * 1000000000);
  EXPECT_EQ(*ParseDuration("12h"), 12LL * 3600 * 1000000000);
  EXPECT_EQ(*ParseDuration("30m"), 30LL * 60 * 1000000000);
  EXPECT_EQ(*ParseDuration("45s"), 45LL * 1000000000);
  EXPECT_EQ(*ParseDuration("45"), 45LL * 1000000000);
  EXPECT_EQ(*ParseDuration("250ms"), 250LL * 1000000);
}

TEST(ParseDurationTest, BadInputNamesIt) {
  EXPECT_THAT(ParseDuration("3w"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("3w")));
  EXPECT_THAT(ParseDuration(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseDuration("d"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseDuration("-1s"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseDuration("99999999999999999999d"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ParseByteSizeTest, Units) {
  EXPECT_EQ(*ParseByteSize("1073741824"), 1073741824u);
  EXPECT_EQ(*ParseByteSize("10G"), 10ull * 1024 * 1024 * 1024);
  EXPECT_EQ(*ParseByteSize("512M"), 512ull * 1024 * 1024);
  EXPECT_EQ(*ParseByteSize("64K"), 64ull * 1024);
  EXPECT_EQ(*ParseByteSize("2T"), 2ull << 40);
  EXPECT_EQ(*ParseByteSize("10GiB"), 10ull << 30);
  EXPECT_EQ(*ParseByteSize("3gb"), 3ull << 30);
}

TEST(ParseByteSizeTest, BadInputNamesIt) {
  EXPECT_THAT(ParseByteSize("10X"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("10X")));
  EXPECT_THAT(ParseByteSize("G"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseByteSize("99999999999T"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(KvStoreConfigTest, Validate) {
  KvStoreConfig c;
  EXPECT_THAT(c.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--dir")));
  c.dir = "/tmp/x";
  EXPECT_THAT(c.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--capacity")));
  c.capacity_bytes = 100;
  EXPECT_OK(c.Validate());
  c.low_watermark = 0.95;
  EXPECT_THAT(c.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--low-watermark")));
  c.low_watermark = 0.5;
  c.high_watermark = 1.5;
  EXPECT_THAT(c.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--high-watermark")));
  c.high_watermark = 0.9;
  c.ttl_nanos[1] = 0;
  EXPECT_THAT(c.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--ttl-agent")));
}

}  // namespace
}  // namespace deepinfer::kvstore
