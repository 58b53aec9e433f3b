#include "common/check.h"

#include "gtest/gtest.h"

namespace deepinfer {
namespace {

TEST(CheckDeathTest, FailingCheckAbortsWithFileLineAndMessage) {
  EXPECT_DEATH({ CHECK(1 + 1 == 3) << "arithmetic " << 42; },
               "check_test.cc:[0-9]+: CHECK failed: 1 \\+ 1 == 3 arithmetic 42");
}

TEST(CheckDeathTest, CheckOpPrintsBothValues) {
  int a = 3, b = 4;
  EXPECT_DEATH({ CHECK_EQ(a, b); }, "\\(3 vs 4\\)");
}

TEST(Check, PassingCheckDoesNotEvaluateMessage) {
  int evaluated = 0;
  auto side_effect = [&] { return ++evaluated; };
  CHECK(true) << side_effect();
  CHECK_LT(1, 2) << side_effect();
  EXPECT_EQ(evaluated, 0);
}

}  // namespace
}  // namespace deepinfer
