#include "tools/engine_flags.h"

#include <fstream>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/config.h"
#include "common/status.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deepinfer::cli {
namespace {

using ::deepinfer::testing::StatusIs;
using ::testing::HasSubstr;
using Mode = engine::EngineConfig::PrefixCacheMode;

absl::StatusOr<engine::EngineConfig> Apply(std::vector<std::string> args) {
  FlagSet flags("serve");
  AddPrefixCacheFlags(flags);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  RETURN_IF_ERROR(flags.Parse(static_cast<int>(argv.size()), argv.data()));
  engine::EngineConfig config;
  RETURN_IF_ERROR(ApplyPrefixCacheFlags(flags, &config));
  return config;
}

TEST(EngineFlagsTest, DefaultsArePrefixCachingOnReplayAndOneGiBOfSnapshots) {
  ASSERT_OK_AND_ASSIGN(engine::EngineConfig c, Apply({}));
  EXPECT_TRUE(c.enable_prefix_caching);
  EXPECT_EQ(c.prefix_cache_mode, Mode::kReplay);
  EXPECT_EQ(c.snapshot_memory_bytes, int64_t{1} << 30);
}

TEST(EngineFlagsTest, EveryFlagReachesTheConfig) {
  ASSERT_OK_AND_ASSIGN(engine::EngineConfig c, Apply({"--no-prefix-caching", "--prefix-cache-mode",
                                                      "exact", "--snapshot-memory=512M"}));
  EXPECT_FALSE(c.enable_prefix_caching);
  EXPECT_EQ(c.prefix_cache_mode, Mode::kExact);
  EXPECT_EQ(c.snapshot_memory_bytes, int64_t{512} << 20);
  ASSERT_OK_AND_ASSIGN(c, Apply({"--prefix-cache-mode=replay", "--snapshot-memory", "0"}));
  EXPECT_EQ(c.prefix_cache_mode, Mode::kReplay);
  EXPECT_EQ(c.snapshot_memory_bytes, 0);  // no snapshots
}

TEST(EngineFlagsTest, BadValuesAreErrorsNamingTheFlag) {
  EXPECT_THAT(Apply({"--prefix-cache-mode", "fast"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--prefix-cache-mode: 'fast' is not one of replay, exact")));
  EXPECT_THAT(Apply({"--snapshot-memory", "lots"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--snapshot-memory")));
  EXPECT_THAT(Apply({"--snapshot-memory", "-1G"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--snapshot-memory")));
}

TEST(EngineFlagsTest, ByteSizes) {
  EXPECT_EQ(*ParseByteSize("f", "1073741824"), int64_t{1} << 30);
  EXPECT_EQ(*ParseByteSize("f", "2G"), int64_t{2} << 30);
  EXPECT_EQ(*ParseByteSize("f", "1.5GiB"), int64_t{3} << 29);
  EXPECT_EQ(*ParseByteSize("f", "64kb"), 65536);
  EXPECT_EQ(*ParseByteSize("f", "0", /*allow_zero=*/true), 0);
  EXPECT_THAT(ParseByteSize("kv-cache-memory", "0"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--kv-cache-memory: '0' is not a positive size")));
  EXPECT_THAT(ParseByteSize("f", "3T"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseByteSize("f", "1e30G"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseByteSize("f", "nanG"), StatusIs(absl::StatusCode::kInvalidArgument));
}

absl::StatusOr<engine::EngineConfig> ApplyDecoding(std::vector<std::string> args) {
  FlagSet flags("serve");
  AddDecodingFlags(flags);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  RETURN_IF_ERROR(flags.Parse(static_cast<int>(argv.size()), argv.data()));
  engine::EngineConfig config;
  RETURN_IF_ERROR(ApplyDecodingFlags(flags, &config));
  return config;
}

TEST(DecodingFlagsTest, DefaultsAreJumpForwardOnAndNoSpeculation) {
  ASSERT_OK_AND_ASSIGN(engine::EngineConfig c, ApplyDecoding({}));
  EXPECT_TRUE(c.jump_forward);
  EXPECT_EQ(c.speculative.method, engine::SpeculativeConfig::Method::kNone);
}

TEST(DecodingFlagsTest, FlagsReachTheConfigAndBadValuesNameTheFlag) {
  ASSERT_OK_AND_ASSIGN(engine::EngineConfig c,
                       ApplyDecoding({"--no-jump-forward", "--speculative-method", "ngram",
                                      "--num-speculative-tokens", "4", "--prompt-lookup-min", "1",
                                      "--prompt-lookup-max", "3"}));
  EXPECT_FALSE(c.jump_forward);
  EXPECT_EQ(c.speculative.method, engine::SpeculativeConfig::Method::kNgram);
  EXPECT_EQ(c.speculative.num_speculative_tokens, 4);
  EXPECT_EQ(c.speculative.prompt_lookup_min, 1);
  EXPECT_EQ(c.speculative.prompt_lookup_max, 3);
  ASSERT_OK_AND_ASSIGN(c, ApplyDecoding({"--speculative-method", "mtp"}));
  EXPECT_EQ(c.speculative.method, engine::SpeculativeConfig::Method::kMtp);
  EXPECT_EQ(c.speculative.num_speculative_tokens, 1);
  // MTP chains up to 5 drafts (the window rings' spare slots, issue #26).
  ASSERT_OK_AND_ASSIGN(c, ApplyDecoding({"--speculative-method", "mtp",
                                         "--num-speculative-tokens", "5"}));
  EXPECT_EQ(c.speculative.num_speculative_tokens, 5);
  EXPECT_THAT(ApplyDecoding({"--speculative-method", "eagle"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--speculative-method")));
  EXPECT_THAT(ApplyDecoding({"--num-speculative-tokens", "6"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--num-speculative-tokens")));
  EXPECT_THAT(ApplyDecoding({"--prompt-lookup-min", "4", "--prompt-lookup-max", "2"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--prompt-lookup-min")));
}

// vLLM's prompt-lookup rule: neither size given = 5..5, one given = both that value, min > max
// an error naming the flag.
TEST(DecodingFlagsTest, PromptLookupSizesFollowVllm) {
  auto sizes = [](std::vector<std::string> extra) {
    std::vector<std::string> args = {"--speculative-method", "ngram"};
    args.insert(args.end(), extra.begin(), extra.end());
    absl::StatusOr<engine::EngineConfig> c = ApplyDecoding(args);
    CHECK(c.ok()) << c.status();
    return std::pair<int, int>(c->speculative.prompt_lookup_min, c->speculative.prompt_lookup_max);
  };
  EXPECT_EQ(sizes({}), std::make_pair(5, 5));
  EXPECT_EQ(sizes({"--prompt-lookup-max", "1"}), std::make_pair(1, 1));
  EXPECT_EQ(sizes({"--prompt-lookup-min", "6"}), std::make_pair(6, 6));
  EXPECT_EQ(sizes({"--prompt-lookup-min", "2", "--prompt-lookup-max", "4"}), std::make_pair(2, 4));
  EXPECT_THAT(ApplyDecoding({"--prompt-lookup-min", "0"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--prompt-lookup-min")));
}

// The seed's environment switches feed the flags' defaults, and a flag always wins:
// DEEPINFER_USE_NEXTN_DECODE = k selects MTP with k drafts, DEEPINFER_ENABLE_MTP_VARLEN = 1 the
// async planner.
TEST(DecodingFlagsTest, EnvironmentSwitchesAndFlagsOverrideThem) {
  const EnvConfig saved = Env();
  EnvConfig env = saved;
  env.use_nextn_decode = 3;
  env.enable_mtp_varlen = true;
  SetEnvConfigForTesting(env);
  ASSERT_OK_AND_ASSIGN(engine::EngineConfig c, ApplyDecoding({}));
  EXPECT_EQ(c.speculative.method, engine::SpeculativeConfig::Method::kMtp);
  EXPECT_EQ(c.speculative.num_speculative_tokens, 3);
  EXPECT_EQ(c.speculative.varlen, engine::VarlenMode::kAsyncBudget);
  ASSERT_OK_AND_ASSIGN(c, ApplyDecoding({"--num-speculative-tokens", "2", "--speculative-varlen",
                                         "off"}));
  EXPECT_EQ(c.speculative.method, engine::SpeculativeConfig::Method::kMtp);
  EXPECT_EQ(c.speculative.num_speculative_tokens, 2);
  EXPECT_EQ(c.speculative.varlen, engine::VarlenMode::kOff);
  ASSERT_OK_AND_ASSIGN(c, ApplyDecoding({"--speculative-method", "ngram"}));
  EXPECT_EQ(c.speculative.method, engine::SpeculativeConfig::Method::kNgram);
  EXPECT_EQ(c.speculative.num_speculative_tokens, 3);
  ASSERT_OK_AND_ASSIGN(c, ApplyDecoding({"--speculative-method", "none"}));
  EXPECT_EQ(c.speculative.method, engine::SpeculativeConfig::Method::kNone);
  env.use_nextn_decode = 0;
  env.enable_mtp_varlen = false;
  SetEnvConfigForTesting(env);
  ASSERT_OK_AND_ASSIGN(c, ApplyDecoding({}));
  EXPECT_EQ(c.speculative.method, engine::SpeculativeConfig::Method::kNone);
  SetEnvConfigForTesting(saved);
}

// --speculative-method dspark: the DSpark block of a V4.1 model; its default length is 0 (the
// model's block, resolved by Engine::Create), a flag sets it explicitly.
TEST(DecodingFlagsTest, DsparkDefaultsToTheModelsBlock) {
  ASSERT_OK_AND_ASSIGN(engine::EngineConfig c, ApplyDecoding({"--speculative-method", "dspark"}));
  EXPECT_EQ(c.speculative.method, engine::SpeculativeConfig::Method::kDspark);
  EXPECT_EQ(c.speculative.num_speculative_tokens, 0);
  ASSERT_OK_AND_ASSIGN(c, ApplyDecoding({"--speculative-method", "dspark",
                                         "--num-speculative-tokens", "3"}));
  EXPECT_EQ(c.speculative.num_speculative_tokens, 3);
  EXPECT_FALSE(c.speculative.sampled_drafts);
  ASSERT_OK_AND_ASSIGN(c, ApplyDecoding({"--speculative-method", "dspark",
                                         "--speculative-draft-sampling", "sampled"}));
  EXPECT_TRUE(c.speculative.sampled_drafts);
  EXPECT_THAT(ApplyDecoding({"--speculative-method", "ngram", "--speculative-draft-sampling",
                             "sampled"})
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--speculative-draft-sampling")));
  EXPECT_THAT(ApplyDecoding({"--speculative-method", "dspark", "--speculative-draft-sampling",
                             "random"})
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--speculative-draft-sampling")));
}

// --speculative-method scripted loads --speculative-script into a custom drafter; the two flags
// need each other and a bad file is an error naming the flag.
TEST(DecodingFlagsTest, ScriptedDrafterReadsItsScript) {
  const std::string path = ::testing::TempDir() + "/engine_flags_script.txt";
  {
    std::ofstream f(path);
    f << "# prompt then continuation\n1 2 3 4/9 5\n";
  }
  ASSERT_OK_AND_ASSIGN(engine::EngineConfig c,
                       ApplyDecoding({"--speculative-method", "scripted", "--speculative-script",
                                      path, "--num-speculative-tokens", "5"}));
  EXPECT_EQ(c.speculative.method, engine::SpeculativeConfig::Method::kCustom);
  EXPECT_EQ(c.speculative.num_speculative_tokens, 5);
  ASSERT_NE(c.speculative.drafter, nullptr);
  const std::vector<int32_t> committed = {1, 2};
  engine::DraftContext ctx;
  ctx.tokens = committed;
  EXPECT_EQ(c.speculative.drafter->Propose(ctx, 5), (std::vector<int32_t>{3, 9, 5}));
  EXPECT_THAT(ApplyDecoding({"--speculative-method", "scripted"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--speculative-script")));
  EXPECT_THAT(ApplyDecoding({"--speculative-script", path}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--speculative-script")));
  EXPECT_THAT(
      ApplyDecoding({"--speculative-method", "scripted", "--speculative-script", path + ".missing"})
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--speculative-script")));
}

// --speculative-varlen / --speculative-cost-table / --speculative-varlen-min-concurrency
// (docs/speculative-decoding.md): the mode, a loaded or profiled table and the gate reach the
// config; bad values name the flag.
TEST(DecodingFlagsTest, VarlenFlags) {
  ASSERT_OK_AND_ASSIGN(engine::EngineConfig c, ApplyDecoding({"--speculative-method", "ngram"}));
  EXPECT_EQ(c.speculative.varlen, engine::VarlenMode::kOff);
  ASSERT_OK_AND_ASSIGN(c, ApplyDecoding({"--speculative-method", "ngram", "--speculative-varlen",
                                         "async", "--speculative-varlen-min-concurrency", "16"}));
  EXPECT_EQ(c.speculative.varlen, engine::VarlenMode::kAsyncBudget);
  EXPECT_TRUE(c.speculative.profile_cost_table);
  EXPECT_EQ(c.speculative.varlen_min_concurrency, 16);
  EXPECT_TRUE(c.speculative.varlen_benefit_gate);  // measured by default
  ASSERT_OK_AND_ASSIGN(c, ApplyDecoding({"--speculative-method", "ngram", "--speculative-varlen",
                                         "async", "--speculative-varlen-gate", "off"}));
  EXPECT_FALSE(c.speculative.varlen_benefit_gate);
  EXPECT_THAT(ApplyDecoding({"--speculative-method", "ngram", "--speculative-varlen", "async",
                             "--speculative-varlen-gate", "maybe"})
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--speculative-varlen-gate")));
  const std::string path = ::testing::TempDir() + "/engine_flags_cost.json";
  {
    std::ofstream f(path);
    f << R"({"verify": [{"tokens": 1, "ms": 2.0}, {"tokens": 64, "ms": 9.0}]})";
  }
  ASSERT_OK_AND_ASSIGN(c, ApplyDecoding({"--speculative-method", "ngram", "--speculative-varlen",
                                         "sync", "--speculative-cost-table", path}));
  EXPECT_EQ(c.speculative.varlen, engine::VarlenMode::kSyncGreedyStop);
  EXPECT_FALSE(c.speculative.profile_cost_table);
  ASSERT_NE(c.speculative.cost_table, nullptr);
  EXPECT_DOUBLE_EQ(c.speculative.cost_table->StepMs(64), 9.0);
  EXPECT_THAT(ApplyDecoding({"--speculative-method", "ngram", "--speculative-varlen", "fast"})
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--speculative-varlen")));
  EXPECT_THAT(ApplyDecoding({"--speculative-varlen", "async"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--speculative-method")));
  EXPECT_THAT(ApplyDecoding({"--speculative-method", "ngram", "--speculative-varlen", "async",
                             "--speculative-cost-table", "/nonexistent.json"})
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--speculative-cost-table")));
  EXPECT_THAT(ApplyDecoding({"--speculative-method", "ngram", "--speculative-varlen", "async",
                             "--speculative-varlen-min-concurrency", "-1"})
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--speculative-varlen-min-concurrency")));
}

}  // namespace
}  // namespace deepinfer::cli
