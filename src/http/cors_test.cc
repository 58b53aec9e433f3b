// CORS rules from the Fetch standard (§3.2 CORS protocol): which headers an actual response and a
// preflight get under each policy.
#include "http/cors.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deepinfer::http {
namespace {

using ::testing::Contains;
using ::testing::IsEmpty;
using ::testing::Key;
using ::testing::Not;
using ::testing::Pair;

CorsPolicy Origins(std::vector<std::string> origins) {
  CorsPolicy p;
  p.allowed_origins = std::move(origins);
  return p;
}

TEST(CorsTest, OffWithoutOriginsAndWithoutAnOriginHeader) {
  EXPECT_THAT(CorsResponseHeaders(CorsPolicy{}, "http://a.example"), IsEmpty());
  EXPECT_FALSE(CorsPreflightFor(CorsPolicy{}, "OPTIONS", "http://a.example", "POST", ""));
  EXPECT_THAT(CorsResponseHeaders(Origins({"*"}), ""), IsEmpty());
  // An OPTIONS without Access-Control-Request-Method is not a preflight.
  EXPECT_FALSE(CorsPreflightFor(Origins({"*"}), "OPTIONS", "http://a.example", "", ""));
  EXPECT_FALSE(CorsPreflightFor(Origins({"*"}), "POST", "http://a.example", "POST", ""));
}

TEST(CorsTest, WildcardOriginWithoutCredentialsAnswersStar) {
  const auto h = CorsResponseHeaders(Origins({"*"}), "http://a.example");
  EXPECT_THAT(h, Contains(Pair("Access-Control-Allow-Origin", "*")));
  EXPECT_THAT(h, Contains(Pair("Access-Control-Expose-Headers", "X-Request-Id")));
  EXPECT_THAT(h, Not(Contains(Key("Access-Control-Allow-Credentials"))));
}

TEST(CorsTest, ListedOriginIsEchoedWithVaryAndOthersGetNothing) {
  const CorsPolicy p = Origins({"http://a.example:3000"});
  EXPECT_THAT(CorsResponseHeaders(p, "http://a.example:3000"),
              Contains(Pair("Access-Control-Allow-Origin", "http://a.example:3000")));
  EXPECT_THAT(CorsResponseHeaders(p, "http://a.example:3000"), Contains(Pair("Vary", "Origin")));
  EXPECT_THAT(CorsResponseHeaders(p, "http://b.example"), IsEmpty());
  // Origins compare exactly: another port is another origin.
  EXPECT_THAT(CorsResponseHeaders(p, "http://a.example"), IsEmpty());
}

TEST(CorsTest, CredentialsNeverAnswerStar) {
  CorsPolicy p = Origins({"*"});
  p.allow_credentials = true;
  const auto h = CorsResponseHeaders(p, "http://a.example");
  EXPECT_THAT(h, Contains(Pair("Access-Control-Allow-Origin", "http://a.example")));
  EXPECT_THAT(h, Contains(Pair("Access-Control-Allow-Credentials", "true")));
}

TEST(CorsTest, PreflightAllowedEchoesRequestedHeadersUnderWildcard) {
  const auto pre = CorsPreflightFor(Origins({"*"}), "OPTIONS", "http://a.example", "POST",
                                    "Authorization, Content-Type");
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->status, 200);
  EXPECT_THAT(pre->headers, Contains(Pair("Access-Control-Allow-Origin", "*")));
  EXPECT_THAT(pre->headers, Contains(Pair("Access-Control-Allow-Headers",
                                          "authorization, content-type")));
  EXPECT_THAT(pre->headers, Contains(Key("Access-Control-Allow-Methods")));
  EXPECT_THAT(pre->headers, Contains(Pair("Access-Control-Max-Age", "600")));
}

TEST(CorsTest, PreflightRefusesOriginMethodOrHeader) {
  CorsPolicy p = Origins({"http://a.example"});
  p.allowed_methods = {"POST"};
  p.allowed_headers = {"Authorization"};
  auto ok = CorsPreflightFor(p, "OPTIONS", "http://a.example", "post", "authorization, accept");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_THAT(ok->headers, Contains(Pair("Access-Control-Allow-Methods", "POST")));
  auto bad_origin = CorsPreflightFor(p, "OPTIONS", "http://evil.example", "POST", "");
  ASSERT_TRUE(bad_origin);
  EXPECT_EQ(bad_origin->status, 400);
  EXPECT_THAT(bad_origin->headers, Not(Contains(Key("Access-Control-Allow-Origin"))));
  auto bad_method = CorsPreflightFor(p, "OPTIONS", "http://a.example", "DELETE", "");
  ASSERT_TRUE(bad_method);
  EXPECT_EQ(bad_method->status, 400);
  EXPECT_EQ(bad_method->body, "Disallowed CORS method\n");
  auto bad_header = CorsPreflightFor(p, "OPTIONS", "http://a.example", "POST", "x-secret");
  ASSERT_TRUE(bad_header);
  EXPECT_EQ(bad_header->status, 400);
}

}  // namespace
}  // namespace deepinfer::http
