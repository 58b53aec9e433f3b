#include "common/config.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deepinfer {
namespace {

using ::deepinfer::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(EnvConfig, DefaultsWhenNothingSet) {
  std::vector<std::string> warnings;
  ASSERT_OK_AND_ASSIGN(EnvConfig c,
                       ParseEnvConfig({{"PATH", "/bin"}, {"HOME", "/root"}}, &warnings));
  EXPECT_EQ(c.hf_model_dir, "");
  EXPECT_FALSE(c.batch_invariant);
  EXPECT_FALSE(c.enable_mtp_varlen);
  EXPECT_EQ(c.use_nextn_decode, 0);
  EXPECT_EQ(c.yoco_prefill_truncation_mode, "compact");
  EXPECT_EQ(c.yoco_prefill_keep_tokens, 140);
  EXPECT_EQ(c.accelerator, "cpu");
  EXPECT_EQ(c.num_threads, 0);
  EXPECT_EQ(c.force_isa, IsaLevel::kAuto);
  EXPECT_TRUE(c.repack_weights);
  EXPECT_TRUE(warnings.empty());
}

TEST(EnvConfig, ParsesEveryVariable) {
  ASSERT_OK_AND_ASSIGN(EnvConfig c, ParseEnvConfig(
                                        {
                                            {"DEEPINFER_HF_MODEL_DIR", "/models/x"},
                                            {"DEEPINFER_BATCH_INVARIANT", "1"},
                                            {"DEEPINFER_ENABLE_MTP_VARLEN", "true"},
                                            {"DEEPINFER_USE_NEXTN_DECODE", "5"},
                                            {"DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE", "none"},
                                            {"DEEPINFER_YOCO_PREFILL_KEEP_TOKENS", "256"},
                                            {"DEEPINFER_ACCELERATOR", "CUDA"},
                                            {"DEEPINFER_NUM_THREADS", "3"},
                                            {"DEEPINFER_FORCE_ISA", "avx2"},
                                            {"DEEPINFER_REPACK_WEIGHTS", "0"},
                                            {"DEEPINFER_LOG_LEVEL", "warning"},
                                        },
                                        nullptr));
  EXPECT_EQ(c.hf_model_dir, "/models/x");
  EXPECT_TRUE(c.batch_invariant);
  EXPECT_TRUE(c.enable_mtp_varlen);
  EXPECT_EQ(c.use_nextn_decode, 5);
  EXPECT_EQ(c.yoco_prefill_truncation_mode, "none");
  EXPECT_EQ(c.yoco_prefill_keep_tokens, 256);
  EXPECT_EQ(c.accelerator, "cuda");
  EXPECT_FALSE(c.repack_weights);
  EXPECT_EQ(c.num_threads, 3);
  EXPECT_EQ(c.force_isa, IsaLevel::kAvx2);
  EXPECT_EQ(c.log_level, LogLevel::kWarning);
}

// Every DEEPINFER_FORCE_ISA level (issue #30), and the two emulations of the BF16-dot GEMM,
// which cap the vector kernels at avx512 and select the emulated tile arithmetic.
TEST(EnvConfig, ForceIsaLevelsAndBf16DotEmulations) {
  struct Case {
    const char* value;
    IsaLevel isa;
    Bf16DotEmulation emulation;
  } cases[] = {
      {"auto", IsaLevel::kAuto, Bf16DotEmulation::kNone},
      {"scalar", IsaLevel::kScalar, Bf16DotEmulation::kNone},
      {"avx2", IsaLevel::kAvx2, Bf16DotEmulation::kNone},
      {"avx512", IsaLevel::kAvx512, Bf16DotEmulation::kNone},
      {"AVX512BF16", IsaLevel::kAvx512Bf16, Bf16DotEmulation::kNone},
      {"amx", IsaLevel::kAmx, Bf16DotEmulation::kNone},
      {"amxemu", IsaLevel::kAvx512, Bf16DotEmulation::kAmx},
      {"avx512bf16emu", IsaLevel::kAvx512, Bf16DotEmulation::kVdp},
  };
  for (const Case& c : cases) {
    ASSERT_OK_AND_ASSIGN(EnvConfig config,
                         ParseEnvConfig({{"DEEPINFER_FORCE_ISA", c.value}}, nullptr));
    EXPECT_EQ(config.force_isa, c.isa) << c.value;
    EXPECT_EQ(config.bf16_dot_emulation, c.emulation) << c.value;
  }
  EXPECT_THAT(ParseEnvConfig({{"DEEPINFER_FORCE_ISA", "amx2"}}, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("DEEPINFER_FORCE_ISA"), HasSubstr("amx2"),
                             HasSubstr("avx512bf16, amx, amxemu, avx512bf16emu"))));
}

TEST(EnvConfig, BadValuesAreClearInvalidArgumentErrors) {
  struct Case {
    const char* name;
    const char* value;
    const char* expected;
  } cases[] = {
      {"DEEPINFER_BATCH_INVARIANT", "maybe", "0 or 1"},
      {"DEEPINFER_USE_NEXTN_DECODE", "-1", "integer in [0, 5]"},
      {"DEEPINFER_USE_NEXTN_DECODE", "6", "integer in [0, 5]"},
      {"DEEPINFER_USE_NEXTN_DECODE", "five", "integer"},
      {"DEEPINFER_YOCO_PREFILL_KEEP_TOKENS", "0", "[1,"},
      {"DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE", "loose", "none, compact"},
      {"DEEPINFER_ACCELERATOR", "tpu", "cpu, cuda"},
      {"DEEPINFER_NUM_THREADS", "1e3", "integer"},
      {"DEEPINFER_FORCE_ISA", "sse2", "auto, scalar, avx2, avx512"},
      {"DEEPINFER_LOG_LEVEL", "loud", "debug"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ParseEnvConfig({{c.name, c.value}}, nullptr),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr(c.name), HasSubstr(c.value), HasSubstr(c.expected))))
        << c.name << "=" << c.value;
  }
}

TEST(EnvConfig, UnknownDeepinferVariableWarnsOthersIgnored) {
  std::vector<std::string> warnings;
  ASSERT_OK_AND_ASSIGN(
      EnvConfig c,
      ParseEnvConfig({{"DEEPINFER_BATCH_INVARIENT", "1"}, {"NOT_OURS", "1"}}, &warnings));
  EXPECT_FALSE(c.batch_invariant);
  EXPECT_THAT(warnings, ElementsAre(HasSubstr("DEEPINFER_BATCH_INVARIENT")));
}

TEST(EnvConfig, EveryDocumentedVariableParses) {
  for (const EnvVarDoc& d : EnvVarDocs()) {
    std::vector<std::string> warnings;
    EXPECT_OK(ParseEnvConfig({{d.name, d.default_value}}, &warnings)) << d.name;
    EXPECT_TRUE(warnings.empty()) << d.name;
  }
}

// Issue 22 §4: a backend that is not built is a start-up error; settings that do nothing yet
// warn.
TEST(EnvConfigTest, UnsupportedSettingsAreAnErrorOrAWarning) {
  std::vector<std::string> warnings;
  EnvConfig c;
  EXPECT_TRUE(CheckEnvConfigSupported(c, &warnings).ok());
  EXPECT_TRUE(warnings.empty());
  c.accelerator = "cuda";
  absl::Status s = CheckEnvConfigSupported(c, &warnings);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(s.message()).find("DEEPINFER_ACCELERATOR=cuda"), std::string::npos);
  c.accelerator = "cpu";
  // Both speculative switches are honoured (MTP chains up to 5 drafts; async variable-length
  // verification): no warning.
  c.use_nextn_decode = 5;
  c.enable_mtp_varlen = true;
  EXPECT_TRUE(CheckEnvConfigSupported(c, &warnings).ok());
  EXPECT_TRUE(warnings.empty());
}

}  // namespace
}  // namespace deepinfer
