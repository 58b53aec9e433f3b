// generation_config.json defaults (vLLM's --generation-config auto): the six fields, their
// ranges, and a missing file meaning no defaults.
#include "api/generation_config.h"

#include <filesystem>
#include <unistd.h>

#include <fstream>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deepinfer::api {
namespace {

using ::deepinfer::testing::StatusIs;
using ::testing::HasSubstr;

TEST(GenerationConfigTest, ReadsTheSamplingFields) {
  // DeepSeek-V3's file has this shape (plus token ids, which are not sampling defaults).
  ASSERT_OK_AND_ASSIGN(
      SamplingDefaults d,
      ParseGenerationConfig(R"({"_from_model_config": true, "bos_token_id": 0, "eos_token_id": 1,
                                "do_sample": true, "temperature": 0.6, "top_p": 0.95,
                                "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1,
                                "max_new_tokens": 2048, "transformers_version": "4.46.3"})",
                            "g.json"));
  EXPECT_EQ(d.temperature, 0.6);
  EXPECT_EQ(d.top_p, 0.95);
  EXPECT_EQ(d.top_k, 20);
  EXPECT_EQ(d.min_p, 0.05);
  EXPECT_EQ(d.repetition_penalty, 1.1);
  EXPECT_EQ(d.max_new_tokens, 2048);
  EXPECT_FALSE(d.empty());
  EXPECT_THAT(d.Describe(), HasSubstr("temperature=0.6"));
  ASSERT_OK_AND_ASSIGN(SamplingDefaults none, ParseGenerationConfig(R"({"eos_token_id": 1})", "g"));
  EXPECT_TRUE(none.empty());
}

TEST(GenerationConfigTest, BadValuesNameTheFileAndField) {
  EXPECT_THAT(ParseGenerationConfig(R"({"temperature": "hot"})", "m/generation_config.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("m/generation_config.json: field 'temperature'")));
  EXPECT_THAT(ParseGenerationConfig(R"({"top_p": 0})", "g"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("top_p")));
  EXPECT_THAT(ParseGenerationConfig(R"({"top_k": 1.5})", "g"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("top_k")));
  EXPECT_THAT(ParseGenerationConfig(R"({"max_new_tokens": 0})", "g"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_new_tokens")));
  EXPECT_THAT(ParseGenerationConfig("[1]", "g"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(GenerationConfigTest, ReadsTheModelDirectory) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("gen_config_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  ASSERT_OK_AND_ASSIGN(SamplingDefaults none, ReadGenerationConfig(dir.string()));
  EXPECT_TRUE(none.empty());  // no file: no defaults
  std::ofstream(dir / "generation_config.json") << R"({"temperature": 0.3})";
  ASSERT_OK_AND_ASSIGN(SamplingDefaults d, ReadGenerationConfig(dir.string()));
  EXPECT_EQ(d.temperature, 0.3);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace deepinfer::api
