#include "common/status.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deepinfer {
namespace {

using ::deepinfer::testing::IsOk;
using ::deepinfer::testing::StatusIs;
using ::testing::HasSubstr;

absl::Status FailIf(bool fail) {
  if (fail) return absl::NotFoundError("missing");
  return absl::OkStatus();
}

absl::StatusOr<int> ValueOrFail(bool fail, int v) {
  if (fail) return absl::InvalidArgumentError("bad");
  return v;
}

int g_after_return_if_error = 0;
absl::Status UsesReturnIfError(bool fail) {
  RETURN_IF_ERROR(FailIf(fail));
  ++g_after_return_if_error;
  return absl::OkStatus();
}

absl::StatusOr<int> UsesAssignOrReturn(bool fail) {
  ASSIGN_OR_RETURN(int v, ValueOrFail(fail, 20));
  ASSIGN_OR_RETURN(auto w, ValueOrFail(false, 22));
  return v + w;
}

TEST(StatusMacros, ReturnIfErrorPropagatesCodeAndStopsEarly) {
  g_after_return_if_error = 0;
  EXPECT_THAT(UsesReturnIfError(true), StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing")));
  EXPECT_EQ(g_after_return_if_error, 0);
  EXPECT_THAT(UsesReturnIfError(false), IsOk());
  EXPECT_EQ(g_after_return_if_error, 1);
}

TEST(StatusMacros, AssignOrReturnMovesValueOrPropagates) {
  auto ok = UsesAssignOrReturn(false);
  ASSERT_THAT(ok, IsOk());
  EXPECT_EQ(*ok, 42);
  EXPECT_THAT(UsesAssignOrReturn(true), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(StatusMacros, AssignOrReturnWorksWithMoveOnlyTypes) {
  auto make = []() -> absl::StatusOr<std::unique_ptr<int>> { return std::make_unique<int>(7); };
  auto use = [&]() -> absl::StatusOr<int> {
    ASSIGN_OR_RETURN(std::unique_ptr<int> p, make());
    return *p;
  };
  EXPECT_EQ(*use(), 7);
}

TEST(Annotate, PrependsContextKeepsCode) {
  absl::Status s = Annotate(absl::DataLossError("checksum"), "model.safetensors");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kDataLoss, "model.safetensors: checksum"));
  EXPECT_THAT(Annotate(absl::OkStatus(), "x"), IsOk());
}

TEST(Matchers, AssertOkAndAssign) {
  ASSERT_OK_AND_ASSIGN(int v, ValueOrFail(false, 5));
  EXPECT_EQ(v, 5);
}

}  // namespace
}  // namespace deepinfer
