// PyJson tests: expected strings are what CPython's json.loads / json.dumps(ensure_ascii=False)
// and repr(float) produce (written by hand from the documented rules, spec §1.7).
#include "protocol/py_json.h"

#include <cmath>
#include <limits>
#include <string>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deepinfer::protocol {
namespace {

using ::deepinfer::testing::StatusIs;

std::string RoundTrip(std::string_view text) {
  absl::StatusOr<PyJson> j = PyJson::Parse(text);
  EXPECT_TRUE(j.ok()) << text << ": " << j.status();
  return j.ok() ? j->Dump() : "";
}

TEST(PyJsonTest, FloatRepr) {
  EXPECT_EQ(PyFloatRepr(1.0), "1.0");
  EXPECT_EQ(PyFloatRepr(1e-07), "1e-07");
  EXPECT_EQ(PyFloatRepr(1.5e300), "1.5e+300");
  EXPECT_EQ(PyFloatRepr(0.1), "0.1");
  EXPECT_EQ(PyFloatRepr(1e16), "1e+16");
  EXPECT_EQ(PyFloatRepr(1e15), "1000000000000000.0");
  EXPECT_EQ(PyFloatRepr(123456789012345678.0), "1.2345678901234568e+17");
  EXPECT_EQ(PyFloatRepr(0.0001), "0.0001");
  EXPECT_EQ(PyFloatRepr(0.00001), "1e-05");
  EXPECT_EQ(PyFloatRepr(-0.0), "-0.0");
  EXPECT_EQ(PyFloatRepr(0.0), "0.0");
  EXPECT_EQ(PyFloatRepr(2.5), "2.5");
  EXPECT_EQ(PyFloatRepr(-1234.5678), "-1234.5678");
  EXPECT_EQ(PyFloatRepr(5e-324), "5e-324");
  EXPECT_EQ(PyFloatRepr(1.7976931348623157e308), "1.7976931348623157e+308");
  EXPECT_EQ(PyFloatRepr(std::numeric_limits<double>::infinity()), "Infinity");
  EXPECT_EQ(PyFloatRepr(-std::numeric_limits<double>::infinity()), "-Infinity");
  EXPECT_EQ(PyFloatRepr(std::nan("")), "NaN");
}

TEST(PyJsonTest, DumpsLikePython) {
  EXPECT_EQ(RoundTrip(R"({"z":1,"a":[1.0,1e-07,1E5,-0,12345678901234567890123,-0.0,2.50]})"),
            R"({"z": 1, "a": [1.0, 1e-07, 100000.0, 0, 12345678901234567890123, -0.0, 2.5]})");
  EXPECT_EQ(RoundTrip(R"({"s":"\u00e9/\/\u0001\n\"\\\t\r\b\f\u007f","t":true,"f":false,"n":null})"),
            "{\"s\": \"é//\\u0001\\n\\\"\\\\\\t\\r\\b\\f\x7f\", \"t\": true, \"f\": false, "
            "\"n\": null}");
  EXPECT_EQ(RoundTrip(R"("\ud83e\udd80")"), "\"🦀\"");
  EXPECT_EQ(RoundTrip("  [ ]  "), "[]");
  EXPECT_EQ(RoundTrip("{}"), "{}");
  EXPECT_EQ(RoundTrip("1e400"), "Infinity");
  EXPECT_EQ(RoundTrip("-1e400"), "-Infinity");
  EXPECT_EQ(RoundTrip("1e-400"), "0.0");
  // Python's dict: a repeated key keeps its first slot and takes the last value.
  EXPECT_EQ(RoundTrip(R"({"a":1,"b":2,"a":3})"), R"({"a": 3, "b": 2})");
}

TEST(PyJsonTest, RejectsInvalid) {
  for (std::string_view bad :
       {"", "[1,]", "{\"a\" 1}", "NaN", "Infinity", "01", "1.", "-", "\"\\ud800\"", "\"\\udc00x\"",
        "\"a\x01\"", "\"\xff\"", "[1] x", "tru", "\"\\x\"", "{\"a\":1,}", "'a'"}) {
    EXPECT_THAT(PyJson::Parse(bad), StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
  std::string deep(129, '[');
  deep += std::string(129, ']');
  EXPECT_THAT(PyJson::Parse(deep), StatusIs(absl::StatusCode::kOutOfRange));
  std::string ok(128, '[');
  ok += std::string(128, ']');
  ASSERT_OK_AND_ASSIGN(PyJson j, PyJson::Parse(ok));
  EXPECT_EQ(j.Depth(), 128);
}

TEST(PyJsonTest, FromNlohmannKeepsOrderAndNumbers) {
  const auto j = nlohmann::ordered_json::parse(R"({"z": 1, "a": [1.0, 18446744073709551615, -3]})");
  ASSERT_OK_AND_ASSIGN(PyJson p, PyJson::FromNlohmann(j));
  EXPECT_EQ(p.Dump(), R"({"z": 1, "a": [1.0, 18446744073709551615, -3]})");
}

TEST(PyJsonTest, Utf8Validation) {
  EXPECT_TRUE(IsValidUtf8("héllo 中文 🦀"));
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // > U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xe4\xb8"));          // truncated
}

}  // namespace
}  // namespace deepinfer::protocol
