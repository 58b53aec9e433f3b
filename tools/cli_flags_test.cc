#include "tools/cli_flags.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deepinfer::cli {
namespace {

using ::deepinfer::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

FlagSet MakeFlags() {
  FlagSet f("serve");
  f.AddString("port", "8000", "port");
  f.AddString("model", "", "model dir");
  f.AddBool("async-scheduling", true, "overlap");
  f.AddString("prompt-ids", "", "ids");
  return f;
}

absl::Status ParseArgs(FlagSet& f, std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return f.Parse(argv.size(), argv.data());
}

TEST(FlagSet, ParsesBothSyntaxesAndBools) {
  FlagSet f = MakeFlags();
  ASSERT_OK(ParseArgs(
      f, {"--port", "9000", "--model=/m", "--no-async-scheduling", "--prompt-ids", "1, 403,407"}));
  EXPECT_EQ(*f.GetInt("port"), 9000);
  EXPECT_EQ(f.GetString("model"), "/m");
  EXPECT_TRUE(f.IsSet("model"));
  EXPECT_FALSE(f.GetBool("async-scheduling"));
  EXPECT_EQ(*f.GetIntList("prompt-ids"), (std::vector<int32_t>{1, 403, 407}));
}

TEST(FlagSet, DefaultsApplyWhenAbsent) {
  FlagSet f = MakeFlags();
  ASSERT_OK(ParseArgs(f, {}));
  EXPECT_EQ(*f.GetInt("port"), 8000);
  EXPECT_FALSE(f.IsSet("port"));
  EXPECT_TRUE(f.GetBool("async-scheduling"));
}

TEST(FlagSet, ErrorsNameTheFlag) {
  FlagSet f = MakeFlags();
  EXPECT_THAT(ParseArgs(f, {"--prot", "1"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown flag --prot (did you mean --port?)")));
  FlagSet g = MakeFlags();
  EXPECT_THAT(ParseArgs(g, {"--model"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--model needs a value")));
  FlagSet h = MakeFlags();
  ASSERT_OK(ParseArgs(h, {"--port=abc", "--prompt-ids=1,x"}));
  EXPECT_THAT(h.GetInt("port"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--port")));
  EXPECT_THAT(h.GetIntList("prompt-ids"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'x'")));
  FlagSet k = MakeFlags();
  EXPECT_THAT(ParseArgs(k, {"stray"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unexpected argument")));
}

TEST(FlagSet, SeedTakesTheFull64BitRangeBothWays) {
  const std::pair<const char*, uint64_t> good[] = {
      {"0", 0},
      {"18446744073709551615", 0xffffffffffffffffull},  // 2^64-1
      {"-1", 0xffffffffffffffffull},                    // modulo 2^64
      {"-9223372036854775808", 0x8000000000000000ull},  // -2^63
      {"9223372036854775808", 0x8000000000000000ull},   // 2^63
  };
  for (const auto& [text, want] : good) {
    FlagSet f("generate");
    f.AddString("seed", "0", "seed");
    ASSERT_OK(ParseArgs(f, {"--seed", text}));
    ASSERT_OK_AND_ASSIGN(uint64_t got, f.GetSeed("seed"));
    EXPECT_EQ(got, want) << text;
  }
  for (const char* text : {"18446744073709551616", "-9223372036854775809", "1.5", "x", ""}) {
    FlagSet f("generate");
    f.AddString("seed", "0", "seed");
    ASSERT_OK(ParseArgs(f, {std::string("--seed=") + text}));
    EXPECT_THAT(f.GetSeed("seed"),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("flag --seed expects an integer in [-9223372036854775808, "
                                   "18446744073709551615]")))
        << text;
  }
}

TEST(FlagSet, RepeatingAFlagIsAnErrorNamingIt) {
  const std::vector<std::vector<std::string>> repeated = {
      {"--port", "1", "--port", "1"},  // even with the same value
      {"--model=/a", "--model", "/b"},
      {"--async-scheduling", "--no-async-scheduling"},
      {"--no-async-scheduling", "--async-scheduling=false"},
  };
  const std::vector<std::string> names = {"--port", "--model", "--async-scheduling",
                                          "--async-scheduling"};
  for (size_t i = 0; i < repeated.size(); ++i) {
    FlagSet f = MakeFlags();
    EXPECT_THAT(ParseArgs(f, repeated[i]),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("flag " + names[i] + " given more than once")))
        << i;
  }
  FlagSet ok = MakeFlags();  // distinct flags are fine
  EXPECT_OK(ParseArgs(ok, {"--port", "1", "--model", "/m", "--async-scheduling"}));
}

TEST(FlagSet, UsageShowsDeclaredDefaultsNotParsedValues) {
  FlagSet f = MakeFlags();
  ASSERT_OK(ParseArgs(f, {"--port", "9000", "--model", "/given"}));
  const std::string usage = f.Usage();
  EXPECT_THAT(usage, HasSubstr("port (default: 8000)"));
  EXPECT_THAT(usage, ::testing::Not(HasSubstr("9000")));
  EXPECT_THAT(usage, ::testing::Not(HasSubstr("/given")));
}

std::vector<std::string> ListOf(const FlagSet& f, const std::string& name) {
  absl::StatusOr<std::vector<std::string>> v = f.GetList(name);
  EXPECT_OK(v.status());
  return v.ok() ? *v : std::vector<std::string>{};
}

TEST(FlagSet, ListFlagsTakeSeveralArgumentsCommasAndJsonArrays) {
  FlagSet f = MakeFlags();
  f.AddList("served-model-name", "", "names");
  f.AddList("allowed-origins", "", "origins");
  f.AddList("allowed-methods", "*", "methods");
  // vLLM's syntaxes: nargs='+' for names, a JSON list for origins.
  ASSERT_OK(ParseArgs(f, {"--served-model-name", "main", "alias", "--allowed-origins",
                          R"(["http://a:3000", "http://b"])", "--port", "1"}));
  EXPECT_THAT(ListOf(f, "served-model-name"), ElementsAre("main", "alias"));
  EXPECT_THAT(ListOf(f, "allowed-origins"), ElementsAre("http://a:3000", "http://b"));
  EXPECT_THAT(ListOf(f, "allowed-methods"), ElementsAre("*"));
  EXPECT_EQ(f.GetString("port"), "1");
  FlagSet g = MakeFlags();
  g.AddList("allowed-origins", "", "origins");
  ASSERT_OK(ParseArgs(g, {"--allowed-origins=http://a, http://b,"}));
  EXPECT_THAT(ListOf(g, "allowed-origins"), ElementsAre("http://a", "http://b"));
  FlagSet h = MakeFlags();
  h.AddList("allowed-origins", "", "origins");
  ASSERT_OK(ParseArgs(h, {"--allowed-origins", "[1, 2]"}));
  EXPECT_THAT(h.GetList("allowed-origins"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--allowed-origins")));
}

// The message of every FlagSet error already starts with "deepinfer <command>: "; printing it
// under the command's prefix must not repeat it ("deepinfer serve: deepinfer serve: ...").
TEST(FlagSet, CommandErrorsCarryThePrefixOnce) {
  FlagSet f = MakeFlags();
  ASSERT_OK(ParseArgs(f, {"--port", "x"}));
  const absl::Status bad = f.GetInt("port").status();
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(PrintCommandError("serve", bad, 2), 2);
  EXPECT_EQ(PrintCommandError("serve", absl::NotFoundError("no model"), 1), 1);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err,
            "deepinfer serve: flag --port expects an integer, got 'x'\n"
            "deepinfer serve: no model\n");
}

}  // namespace
}  // namespace deepinfer::cli
