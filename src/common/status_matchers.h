// GoogleTest matchers for absl::Status / absl::StatusOr (test-only header).
//
//   EXPECT_THAT(f(), IsOk());
//   EXPECT_THAT(f(), StatusIs(absl::StatusCode::kInvalidArgument));
//   EXPECT_THAT(f(), StatusIs(absl::StatusCode::kNotFound, HasSubstr("tensor")));
//   ASSERT_OK_AND_ASSIGN(auto v, MakeV());
// Failures are asserted by a specific code, never just "not OK" (STYLE.md habit 10).
#ifndef DEEPINFER_COMMON_STATUS_MATCHERS_H_
#define DEEPINFER_COMMON_STATUS_MATCHERS_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deepinfer::testing {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

MATCHER(IsOk, "is OK") {
  const absl::Status& s = ::deepinfer::testing::GetStatus(arg);
  if (!s.ok()) *result_listener << "status is " << s.ToString();
  return s.ok();
}

MATCHER_P(StatusIs, code,
          std::string("has status code ") + std::string(absl::StatusCodeToString(code))) {
  const absl::Status& s = ::deepinfer::testing::GetStatus(arg);
  *result_listener << "status is " << s.ToString();
  return s.code() == code;
}

MATCHER_P2(StatusIs, code, message_matcher,
           std::string("has status code ") + std::string(absl::StatusCodeToString(code))) {
  const absl::Status& s = ::deepinfer::testing::GetStatus(arg);
  *result_listener << "status is " << s.ToString();
  return s.code() == code &&
         ::testing::Matches(message_matcher)(std::string(s.message()));
}

}  // namespace deepinfer::testing

#define DEEPINFER_MATCHERS_CONCAT_INNER_(a, b) a##b
#define DEEPINFER_MATCHERS_CONCAT_(a, b) DEEPINFER_MATCHERS_CONCAT_INNER_(a, b)

#define ASSERT_OK(expr) ASSERT_THAT(expr, ::deepinfer::testing::IsOk())
#define EXPECT_OK(expr) EXPECT_THAT(expr, ::deepinfer::testing::IsOk())
#define ASSERT_OK_AND_ASSIGN(lhs, expr)                                                    \
  auto DEEPINFER_MATCHERS_CONCAT_(_sor_, __LINE__) = (expr);                               \
  ASSERT_TRUE(DEEPINFER_MATCHERS_CONCAT_(_sor_, __LINE__).ok())                            \
      << DEEPINFER_MATCHERS_CONCAT_(_sor_, __LINE__).status().ToString();                  \
  lhs = std::move(DEEPINFER_MATCHERS_CONCAT_(_sor_, __LINE__)).value()

#endif  // DEEPINFER_COMMON_STATUS_MATCHERS_H_
