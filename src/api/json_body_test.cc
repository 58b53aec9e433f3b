#include "api/json_body.h"

#include <string>

#include "api/errors.h"
#include "common/clock.h"
#include "gtest/gtest.h"

namespace deepinfer::api {
namespace {

using Json = nlohmann::ordered_json;

TEST(JsonBodyTest, SameTreeAndKeyOrderAsNlohmann) {
  const std::string text =
      R"({"z": 1, "a": [true, null, 1.5, -3, 18446744073709551615, "s\u00e9"],)"
      R"( "m": {"b": {"y": 2, "x": 1}, "a": []}, "e": {}})";
  absl::StatusOr<Json> j = ParseJsonLinear(text);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(j->dump(), Json::parse(text).dump());
  EXPECT_EQ(j->dump(), R"({"z":1,"a":[true,null,1.5,-3,18446744073709551615,"sé"],)"
                       R"("m":{"b":{"y":2,"x":1},"a":[]},"e":{}})");
}

TEST(JsonBodyTest, DuplicateKeyLastValueAtFirstPositionSmallAndLarge) {
  EXPECT_EQ(ParseJsonLinear(R"({"a":1,"b":2,"a":3})")->dump(), R"({"a":3,"b":2})");
  // Past the scan limit the hash index decides; same rule.
  std::string big = "{";
  for (int i = 0; i < 40; ++i) big += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + ",";
  big += "\"k3\":\"again\"}";
  absl::StatusOr<Json> j = ParseJsonLinear(big);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->size(), 40u);
  EXPECT_EQ((*j)["k3"], "again");
  EXPECT_EQ(j->begin().key(), "k0");
  EXPECT_EQ(std::next(j->begin(), 3).key(), "k3");
}

TEST(JsonBodyTest, SyntaxErrorIsInvalidArgument) {
  for (const char* bad : {"{", "{\"a\":}", "[1,]", "", "{\"a\":1} x"}) {
    absl::StatusOr<Json> j = ParseJsonLinear(bad);
    ASSERT_FALSE(j.ok()) << bad;
    EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(ErrorCode(j.status()), "");
  }
}

// 300,000 keys (4 MB): the ordered_json parser's duplicate scan made this ~2 minutes (40,000
// keys took 2 s, quadratic); linear it is a fraction of a second.
TEST(JsonBodyTest, ManyKeysParseInLinearTime) {
  std::string text = "{";
  const int n = 300000;
  for (int i = 0; i < n; ++i) {
    if (i > 0) text += ",";
    text += "\"" + std::to_string(i) + "\":1";
  }
  text += "}";
  Stopwatch watch;
  absl::StatusOr<Json> j = ParseJsonLinear(text);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(j->size(), static_cast<size_t>(n));
  EXPECT_EQ(std::prev(j->end()).key(), std::to_string(n - 1));
  EXPECT_LT(watch.ElapsedSeconds(), 3.0);
}

TEST(JsonBodyTest, DeadlinePassedIsRequestTooComplex) {
  std::string text = "[";
  for (int i = 0; i < 10000; ++i) text += "0,";
  text += "0]";
  absl::StatusOr<Json> j = ParseJsonLinear(text, MonotonicNanos() - 1);
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorCode(j.status()), "request_too_complex");
}

}  // namespace
}  // namespace deepinfer::api
