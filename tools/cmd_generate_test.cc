// `deepinfer generate` end to end on stories260K: the printed ids are the golden continuation.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tools/commands.h"

namespace deepinfer::cli {
namespace {

const std::string kModelDir = std::string(DEEPINFER_SHARED_DIR) + "/models/stories260K";

int RunCmd(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return RunGenerate(static_cast<int>(argv.size()), argv.data());
}

TEST(CmdGenerateTest, PrintsGoldenContinuation) {
  if (!std::filesystem::exists(kModelDir + "/config.json"))
    GTEST_SKIP() << kModelDir << " is absent";
  std::ifstream in(kModelDir + "/golden/once_upon_a_time.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json g = nlohmann::json::parse(ss.str(), nullptr, false);
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

TEST(CmdGenerateTest, BadUsage) {
  EXPECT_EQ(RunCmd({"--prompt-ids", "1"}), 2);                             // no --model
  EXPECT_EQ(RunCmd({"--model", "/x", "--prompt-ids", "1,a"}), 2);          // bad id list
  EXPECT_EQ(RunCmd({"--model", "/nonexistent", "--prompt-ids", "1"}), 1);  // load failure
}

}  // namespace
}  // namespace deepinfer::cli
