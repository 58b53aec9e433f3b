// `deepinfer generate` end to end on stories260K: the printed ids are the golden continuation.
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tools/commands.h"

namespace deepinfer::cli {
namespace {

const std::string kModelDir = std::string(DEEPINFER_SHARED_DIR) + "/models/stories260K";

// stories260K's golden continuation (shared/models/stories260K/golden), discarded if unreadable.
nlohmann::json ReadGolden() {
  std::ifstream in(kModelDir + "/golden/once_upon_a_time.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str(), nullptr, false);
}

int RunCmd(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return RunGenerate(static_cast<int>(argv.size()), argv.data());
}

TEST(CmdGenerateTest, PrintsGoldenContinuation) {
  if (!std::filesystem::exists(kModelDir + "/config.json"))
    GTEST_SKIP() << kModelDir << " is absent";
  const nlohmann::json g = ReadGolden();
  ASSERT_FALSE(g.is_discarded());
  std::vector<int> prompt = g["prompt_ids"].get<std::vector<int>>();
  std::vector<int> expected = g["generated_ids"].get<std::vector<int>>();
  expected.resize(20);
  ::testing::internal::CaptureStdout();
  const int rc = RunCmd(
      {"--model", kModelDir, "--prompt-ids", absl::StrJoin(prompt, ","), "--max-tokens", "20"});
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, absl::StrJoin(expected, ",") + "\n");
}

// Runs `generate` and returns {exit code, stdout, stderr}.
struct Result {
  int rc;
  std::string out, err;
};
Result Capture(std::vector<std::string> args) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  Result r;
  r.rc = RunCmd(std::move(args));
  r.out = ::testing::internal::GetCapturedStdout();
  r.err = ::testing::internal::GetCapturedStderr();
  return r;
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path =
      (std::filesystem::path(::testing::TempDir()) / ("cmd_generate_test_" + name)).string();
  std::ofstream(path) << text;
  return path;
}

// Structured-output flags; outputs checked by std::regex / nlohmann::json (independent of the
// grammar stack). Temperature 1 and several seeds so that the constraint, not the model, decides.
TEST(CmdGenerateTest, StructuredOutputFlagsConstrainTheOutput) {
  if (!std::filesystem::exists(kModelDir + "/config.json"))
    GTEST_SKIP() << kModelDir << " is absent";
  const std::vector<std::string> base = {
      "--model",       kModelDir, "--prompt",     "Once upon a time",
      "--temperature", "1",       "--max-tokens", "60"};
  auto with = [&](std::vector<std::string> extra, int seed) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back("--seed");
    args.push_back(std::to_string(seed));
    return Capture(args);
  };
  const std::string schema_file = WriteTemp(
      "schema.json",
      R"({"type":"object","properties":{"ok":{"type":"boolean"},"n":{"type":"integer","minimum":1,"maximum":9}},"required":["ok","n"]})");
  const std::string grammar_file = WriteTemp("list.ebnf", R"(root ::= word ("," word){0,3}
word ::= "yes" | "no"
)");
  const std::regex re("[0-9]{3}-[a-z]+");
  const std::regex list("(yes|no)(,(yes|no)){0,3}");
  for (int seed = 1; seed <= 3; ++seed) {
    Result r = with({"--regex", "[0-9]{3}-[a-z]+"}, seed);
    ASSERT_EQ(r.rc, 0) << r.err;
    ASSERT_FALSE(r.out.empty());
    EXPECT_TRUE(std::regex_match(r.out.substr(0, r.out.size() - 1), re)) << r.out;

    for (const std::string& schema :
         {schema_file, std::string(R"({"type":"object","properties":{"ok":{"type":"boolean"},)"
                                   R"("n":{"type":"integer","minimum":1,"maximum":9}},)"
                                   R"("required":["ok","n"]})")}) {
      r = with({"--json-schema", schema}, seed);
      ASSERT_EQ(r.rc, 0) << r.err;
      const nlohmann::json doc = nlohmann::json::parse(r.out, nullptr, false);
      ASSERT_TRUE(doc.is_object()) << r.out;
      EXPECT_TRUE(doc.contains("ok") && doc["ok"].is_boolean()) << r.out;
      EXPECT_TRUE(doc.contains("n") && doc["n"].is_number_integer() && doc["n"].get<int>() >= 1 &&
                  doc["n"].get<int>() <= 9)
          << r.out;
    }

    r = with({"--json-object"}, seed);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_TRUE(nlohmann::json::parse(r.out, nullptr, false).is_object()) << r.out;

    r = with({"--grammar", grammar_file}, seed);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_TRUE(std::regex_match(r.out.substr(0, r.out.size() - 1), list)) << r.out;
  }
}

TEST(CmdGenerateTest, StructuredOutputFlagErrorsNameTheFlag) {
  // Checked before the model loads, so the model directory does not matter here.
  const std::string m = kModelDir;
  using ::testing::HasSubstr;
  Result r = Capture({"--model", m, "--prompt", "x", "--regex", "a", "--json-object"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--json-object and --regex cannot be combined"));
  r = Capture({"--model", m, "--prompt", "x", "--grammar", "/nonexistent/g.ebnf"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--grammar: "));
  EXPECT_THAT(r.err, HasSubstr("/nonexistent/g.ebnf"));
  r = Capture({"--model", m, "--prompt", "x", "--json-schema", "/nonexistent/s.json"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--json-schema: "));
  r = Capture(
      {"--model", m, "--prompt", "x", "--json-schema", R"({"type":"integer","multipleOf":2})"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--json-schema"));
  EXPECT_THAT(r.err, HasSubstr("multipleOf"));
  r = Capture({"--model", m, "--prompt", "x", "--regex", "(a"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--regex (a: "));
  r = Capture({"--model", m, "--prompt", "x", "--grammar", WriteTemp("bad.ebnf", "root ::= \"a")});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--grammar"));
  r = Capture({"--model", m, "--prompt-ids", "1,2", "--regex", "a"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--regex needs --model and --prompt"));
  EXPECT_THAT(Capture({"--help"}).out, HasSubstr("--json-schema"));
  // Out-of-range counts are flag errors, not silently narrowed to 32 bits.
  for (const char* bad : {"0", "-5", "4294967297", "99999999999"}) {
    r = Capture({"--model", m, "--prompt", "x", "--regex", "a", "--max-tokens", bad});
    EXPECT_EQ(r.rc, 2) << bad;
    EXPECT_THAT(r.err, HasSubstr("--max-tokens must be in [1, ")) << bad;
  }
}

TEST(CmdGenerateTest, RepeatedFlagsAndSeedRangeAreFlagErrors) {
  using ::testing::HasSubstr;
  // A constraint flag given twice is an error naming it, not last-one-wins.
  Result r = Capture({"--model", "/x", "--prompt", "p", "--regex", "a", "--regex", "b"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("flag --regex given more than once"));
  r = Capture({"--model", "/x", "--prompt", "p", "--json-schema", "{}", "--json-schema={}"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("flag --json-schema given more than once"));
  // Seeds at both ends of [-2^63, 2^64-1] pass the flag checks (the run then fails to load the
  // absent model: exit 1, not the flag error's 2); one past either end is a flag error.
  for (const char* ok : {"-9223372036854775808", "-1", "18446744073709551615"}) {
    r = Capture({"--model", "/nonexistent", "--prompt", "p", "--seed", ok});
    EXPECT_EQ(r.rc, 1) << ok << ": " << r.err;
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("--seed"))) << ok;
  }
  for (const char* bad : {"-9223372036854775809", "18446744073709551616", "7.5"}) {
    r = Capture({"--model", "/nonexistent", "--prompt", "p", "--seed", bad});
    EXPECT_EQ(r.rc, 2) << bad;
    EXPECT_THAT(r.err, HasSubstr("flag --seed expects an integer in [")) << bad;
  }
}

// --prompt runs through the engine with serve's decoding flags: n-gram speculation (k = 1..5)
// prints the text speculation off prints (greedy); with --prompt-ids (no engine) those flags are
// a usage error naming the flag.
TEST(CmdGenerateTest, SpeculativeFlagsWithPromptEqualSpeculationOff) {
  if (!std::filesystem::exists(kModelDir + "/config.json"))
    GTEST_SKIP() << kModelDir << " is absent";
  const std::vector<std::string> base = {"--model", kModelDir, "--prompt",
                                         "Once upon a time, there was a little girl. Once upon",
                                         "--max-tokens", "40"};
  const Result off = Capture(base);
  ASSERT_EQ(off.rc, 0) << off.err;
  for (const char* k : {"1", "3", "5"}) {
    std::vector<std::string> args = base;
    for (const char* a : {"--speculative-method", "ngram", "--prompt-lookup-min", "1",
                          "--prompt-lookup-max", "4", "--num-speculative-tokens"}) {
      args.push_back(a);
    }
    args.push_back(k);
    const Result on = Capture(args);
    EXPECT_EQ(on.rc, 0) << on.err;
    EXPECT_EQ(on.out, off.out) << "k " << k;
  }
  const Result bad = Capture({"--model", kModelDir, "--prompt-ids", "1,2,3", "--speculative-method",
                              "ngram"});
  EXPECT_EQ(bad.rc, 2);
  EXPECT_THAT(bad.err, ::testing::HasSubstr("--speculative-method"));
  const Result wrong = Capture({"--model", kModelDir, "--prompt", "Once", "--speculative-method",
                                "eagle"});
  EXPECT_EQ(wrong.rc, 2);
  EXPECT_THAT(wrong.err, ::testing::HasSubstr("--speculative-method"));
}

TEST(CmdGenerateTest, BadUsage) {
  EXPECT_EQ(RunCmd({"--prompt-ids", "1"}), 2);  // no --model
  // Issue 22 §4: sampling flags with --prompt-ids are rejected, not silently ignored.
  for (const char* f : {"--temperature", "--top-p", "--top-k", "--seed"}) {
    EXPECT_EQ(RunCmd({"--model", "/x", "--prompt-ids", "1", f, "1"}), 2) << f;
  }
  EXPECT_EQ(RunCmd({"--model", "/x", "--prompt-ids", "1,a"}), 2);          // bad id list
  EXPECT_EQ(RunCmd({"--model", "/nonexistent", "--prompt-ids", "1"}), 1);  // load failure
}

// The printed continuation is decoded relative to the prompt, like the server's completions: its
// leading SentencePiece space survives. Expected text from the golden's pieces ('▁' = space), as
// Python SentencePiece produced them: "Once upon a time," is prompt_ids + the first generated id,
// so the greedy continuation is generated_ids[1..], whose first piece is "▁there".
TEST(CmdGenerateTest, ContinuationKeepsItsLeadingSpace) {
  if (!std::filesystem::exists(kModelDir + "/config.json"))
    GTEST_SKIP() << kModelDir << " is absent";
  const nlohmann::json g = ReadGolden();
  ASSERT_FALSE(g.is_discarded());
  const std::vector<std::string> pieces = g["generated_pieces"].get<std::vector<std::string>>();
  ASSERT_GE(pieces.size(), 5u);
  std::string expected = "Once upon a time,";
  for (size_t i = 1; i < 5; ++i) {
    expected += absl::StrReplaceAll(pieces[i], {{"\u2581", " "}});
  }
  Result r = Capture({"--model", kModelDir, "--prompt", "Once upon a time,", "--max-tokens", "4"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, expected + "\n");  // "Once upon a time, there was a little"
  // An empty prompt is the BOS alone (stories260K has one): it runs.
  r = Capture({"--model", kModelDir, "--prompt", "", "--max-tokens", "2"});
  EXPECT_EQ(r.rc, 0) << r.err;
}

TEST(CmdGenerateTest, FlagErrorsAreOneLineAndExitTwo) {
  using ::testing::HasSubstr;
  using ::testing::Not;
  // The command name is printed once.
  Result r = Capture({"--model", "/x", "--prompt", "p", "--max-tokens", "abc"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("deepinfer generate: flag --max-tokens expects an integer"));
  EXPECT_THAT(r.err, Not(HasSubstr("deepinfer generate: deepinfer generate:")));
  // --prompt with --prompt-ids is a flag error.
  r = Capture({"--model", "/x", "--prompt", "p", "--prompt-ids", "1,2"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--prompt and --prompt-ids cannot be combined"));
  // --prompt without --model names what is missing.
  r = Capture({"--prompt", "p"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--prompt needs --model"));
  // Out-of-range sampling values are flag errors (2), caught before loading the (absent) model.
  for (const std::vector<std::string>& bad : {std::vector<std::string>{"--temperature", "-1"},
                                              {"--temperature", "1000"},
                                              {"--top-p", "0"},
                                              {"--top-p", "1.5"},
                                              {"--top-k", "-2"}}) {
    std::vector<std::string> args = {"--model", "/nonexistent", "--prompt", "p"};
    args.insert(args.end(), bad.begin(), bad.end());
    r = Capture(args);
    EXPECT_EQ(r.rc, 2) << bad[0] << " " << bad[1] << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(bad[0])) << bad[0] << " " << bad[1];
  }
  // --top-k: the message says what validation accepts, and 0 / -1 (off) and 5 pass the flag
  // checks (the absent model then fails to load: exit 1).
  r = Capture({"--model", "/nonexistent", "--prompt", "p", "--top-k", "-2"});
  EXPECT_THAT(r.err, HasSubstr("--top-k must be -1 or 0 (off) or a positive count"));
  for (const char* ok : {"-1", "0", "5"}) {
    r = Capture({"--model", "/nonexistent", "--prompt", "p", "--top-k", ok});
    EXPECT_EQ(r.rc, 1) << ok << ": " << r.err;
  }
}

TEST(CmdGenerateTest, HelpShowsRealDefaults) {
  using ::testing::HasSubstr;
  using ::testing::Not;
  // The usage printed after a parse error shows declared defaults, not the values given.
  Result r = Capture({"--model", "/given/model", "--max-tokens", "7", "--bogus"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, Not(HasSubstr("(default: /given/model)")));
  EXPECT_THAT(r.err, HasSubstr("number of tokens to generate (default: 16)"));
  r = Capture({"--help"});
  EXPECT_EQ(r.rc, 0);
  // The seed is unset (random) by default, and the help says only that.
  EXPECT_THAT(r.out, HasSubstr("(default: unset, a random seed)"));
  EXPECT_THAT(r.out, Not(HasSubstr("random) (default: 0)")));
}

}  // namespace
}  // namespace deepinfer::cli
