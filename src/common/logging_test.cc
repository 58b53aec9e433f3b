#include "common/logging.h"

#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace deepinfer {
namespace {

using ::deepinfer::testing::StatusIs;

TEST(Logging, LineHasTimestampLevelAndLocation) {
  ::testing::internal::CaptureStderr();
  LOG(INFO) << "hello " << 42;
  std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(out, ::testing::MatchesRegex(
                       "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\\.[0-9]{6}Z INFO "
                       "logging_test\\.cc:[0-9]+\\] hello 42\n"));
}

TEST(Logging, BelowMinLevelIsDroppedAndNotEvaluated) {
  SetMinLogLevel(LogLevel::kWarning);
  int evaluated = 0;
  ::testing::internal::CaptureStderr();
  LOG(INFO) << ++evaluated;
  LOG(WARNING) << "kept";
  std::string out = ::testing::internal::GetCapturedStderr();
  SetMinLogLevel(LogLevel::kInfo);
  EXPECT_EQ(evaluated, 0);
  EXPECT_THAT(out, ::testing::HasSubstr("WARN"));
  EXPECT_THAT(out, ::testing::HasSubstr("kept"));
}

TEST(Logging, ParseLogLevel) {
  EXPECT_EQ(*ParseLogLevel("DEBUG"), LogLevel::kDebug);
  EXPECT_EQ(*ParseLogLevel("error"), LogLevel::kError);
  EXPECT_THAT(ParseLogLevel("verbose"), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace deepinfer
