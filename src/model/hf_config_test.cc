#include "model/hf_config.h"

#include <filesystem>
#include <string>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deepinfer::model {
namespace {

using ::deepinfer::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kConfig[] = R"({
  "architectures": ["LlamaForCausalLM"],
  "hidden_size": 64, "ffn": 4096.0, "ratio": 2.5, "tie": true, "name": "x",
  "eos_token_id": 2, "eos_list": [1, 2], "nothing": null,
  "rope_scaling": {"rope_type": "linear", "factor": "big"}
})";

TEST(HfConfigTest, TypedGetters) {
  ASSERT_OK_AND_ASSIGN(HfConfig c, HfConfig::Parse(kConfig, "cfg.json"));
  EXPECT_EQ(*c.GetInt("hidden_size"), 64);
  EXPECT_EQ(*c.GetInt("ffn"), 4096);  // integral float accepted
  EXPECT_EQ(*c.GetDouble("ratio"), 2.5);
  EXPECT_EQ(*c.GetDouble("hidden_size"), 64.0);
  EXPECT_TRUE(*c.GetBool("tie"));
  EXPECT_EQ(*c.GetString("name"), "x");
  EXPECT_THAT(*c.GetIntList("eos_token_id"), ElementsAre(2));
  EXPECT_THAT(*c.GetIntList("eos_list"), ElementsAre(1, 2));
  EXPECT_EQ(*c.Architecture(), "LlamaForCausalLM");
  // Defaults apply to absent and null keys.
  EXPECT_EQ(*c.GetInt("absent", 7), 7);
  EXPECT_EQ(*c.GetInt("nothing", 7), 7);
  EXPECT_FALSE(c.Has("nothing"));
  EXPECT_FALSE(*c.GetBool("absent", false));
}

TEST(HfConfigTest, ErrorsNameFileAndKey) {
  ASSERT_OK_AND_ASSIGN(HfConfig c, HfConfig::Parse(kConfig, "cfg.json"));
  EXPECT_THAT(c.GetInt("absent"), StatusIs(absl::StatusCode::kInvalidArgument,
                                           AllOf(HasSubstr("cfg.json"), HasSubstr("'absent'"))));
  EXPECT_THAT(c.GetInt("ratio"), StatusIs(absl::StatusCode::kInvalidArgument,
                                          AllOf(HasSubstr("'ratio'"), HasSubstr("integer"))));
  EXPECT_THAT(c.GetInt("name", 3), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(c.GetString("hidden_size"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(c.GetBool("name"), StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK_AND_ASSIGN(HfConfig rs, c.GetObject("rope_scaling"));
  EXPECT_EQ(*rs.GetString("rope_type"), "linear");
  EXPECT_THAT(rs.GetDouble("factor"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'rope_scaling.factor'")));
  EXPECT_THAT(c.GetObject("name"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(HfConfigTest, BadDocuments) {
  EXPECT_THAT(HfConfig::Parse("{", "a.json"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a.json")));
  EXPECT_THAT(HfConfig::Parse("[1]", "a.json"), StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK_AND_ASSIGN(HfConfig c, HfConfig::Parse(R"({"architectures": []})", "a.json"));
  EXPECT_THAT(c.Architecture(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(HfConfig::Load("/nonexistent/dir"), StatusIs(absl::StatusCode::kNotFound));
}

TEST(HfConfigTest, LoadsStories260K) {
  const std::string dir = std::string(DEEPINFER_SHARED_DIR) + "/models/stories260K";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  ASSERT_OK_AND_ASSIGN(HfConfig c, HfConfig::Load(dir));
  EXPECT_EQ(*c.Architecture(), "LlamaForCausalLM");
  EXPECT_EQ(*c.GetInt("num_key_value_heads"), 4);
  EXPECT_FALSE(c.Has("rope_scaling"));  // null in the file
}

}  // namespace
}  // namespace deepinfer::model
