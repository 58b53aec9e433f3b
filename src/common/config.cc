#include "common/config.h"

#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/strings.h"

extern char** environ;

namespace deepinfer {
namespace {

absl::Status BadValue(std::string_view name, std::string_view value, std::string_view expected) {
  return absl::InvalidArgumentError(absl::StrCat("environment variable ", AbslView(name), "='",
                                                 AbslView(value), "' is invalid: expected ",
                                                 AbslView(expected)));
}

absl::StatusOr<bool> ParseBool(std::string_view name, std::string_view value) {
  std::string v = absl::AsciiStrToLower(absl::StripAsciiWhitespace(AbslView(value)));
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "off" || v == "no" || v.empty()) return false;
  return BadValue(name, value, "0 or 1");
}

absl::StatusOr<int> ParseInt(std::string_view name, std::string_view value, int lo, int hi) {
  int v;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(AbslView(value)), &v) || v < lo || v > hi) {
    return BadValue(name, value, absl::StrCat("an integer in [", lo, ", ", hi, "]"));
  }
  return v;
}

absl::StatusOr<std::string> ParseChoice(std::string_view name, std::string_view value,
                                        const std::vector<std::string>& choices) {
  std::string v = absl::AsciiStrToLower(absl::StripAsciiWhitespace(AbslView(value)));
  for (const auto& c : choices) {
    if (v == c) return v;
  }
  return BadValue(name, value, absl::StrCat("one of ", absl::StrJoin(choices, ", ")));
}

std::mutex g_mu;
EnvConfig* g_config = nullptr;  // never destroyed

}  // namespace

const std::vector<EnvVarDoc>& EnvVarDocs() {
  static const auto* docs = new std::vector<EnvVarDoc>{
      {"DEEPINFER_HF_MODEL_DIR", "", "model directory used when --model is absent"},
      {"DEEPINFER_BATCH_INVARIANT", "0",
       "1: results identical whatever the batch composition (fixed reduction order)"},
      {"DEEPINFER_ENABLE_MTP_VARLEN", "0",
       "1: confidence-scheduled variable-length speculative verification"},
      {"DEEPINFER_USE_NEXTN_DECODE", "0",
       "0..5: maximum draft length for speculative decoding (0 = off; > 0 selects mtp when "
       "--speculative-method is absent)"},
      {"DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE", "compact",
       "none|compact: V4.1 decoder-side prefill truncation"},
      {"DEEPINFER_YOCO_PREFILL_KEEP_TOKENS", "140",
       "prompt rows the V4.1 decoder runs on under compact truncation (>= 1; the model raises "
       "it to its window + 6, 134 for the release)"},
      {"DEEPINFER_ACCELERATOR", "cpu", "cpu|cuda: kernel backend"},
      {"DEEPINFER_NUM_THREADS", "0", "kernel threads (0 = all cores)"},
      {"DEEPINFER_FORCE_ISA", "auto",
       "auto|scalar|avx2|avx512|avx512bf16|amx: cap the CPU kernel instruction set (auto stops at "
       "avx512bf16); amxemu|avx512bf16emu: emulated BF16-dot GEMM (tests)"},
      {"DEEPINFER_REPACK_WEIGHTS", "1",
       "0: keep FP4 experts in the checkpoint layout (no repacked copy; slower CPU decode)"},
      {"DEEPINFER_BF16_ACTIVATIONS", "0",
       "1: Llama rounds linear inputs to BF16 (as llama.cpp does for BF16 weights) so BF16 "
       "weights take the BF16 dot-product kernels; 0: FP32 inputs (the goldens' numerics)"},
      {"DEEPINFER_LOG_LEVEL", "info", "debug|info|warning|error"},
      {"DEEPINFER_SHARED_DIR", "", "tests only: path to the shared/ folder of models and goldens"},
  };
  return *docs;
}

absl::StatusOr<EnvConfig> ParseEnvConfig(const std::map<std::string, std::string>& env,
                                         std::vector<std::string>* warnings) {
  EnvConfig c;
  for (const auto& [name, value] : env) {
    if (!absl::StartsWith(name, "DEEPINFER_")) continue;
    if (name == "DEEPINFER_HF_MODEL_DIR") {
      c.hf_model_dir = value;
    } else if (name == "DEEPINFER_BATCH_INVARIANT") {
      auto v = ParseBool(name, value);
      if (!v.ok()) return v.status();
      c.batch_invariant = *v;
    } else if (name == "DEEPINFER_ENABLE_MTP_VARLEN") {
      auto v = ParseBool(name, value);
      if (!v.ok()) return v.status();
      c.enable_mtp_varlen = *v;
    } else if (name == "DEEPINFER_USE_NEXTN_DECODE") {
      auto v = ParseInt(name, value, 0, 5);
      if (!v.ok()) return v.status();
      c.use_nextn_decode = *v;
    } else if (name == "DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE") {
      auto v = ParseChoice(name, value, {"none", "compact"});
      if (!v.ok()) return v.status();
      c.yoco_prefill_truncation_mode = *v;
    } else if (name == "DEEPINFER_YOCO_PREFILL_KEEP_TOKENS") {
      // The floor is the loaded model's window + 6 (134 for the release, 22 for dsv41-tiny-a),
      // which only the model knows: DeepseekV41Model::set_prefill_truncation raises it there.
      auto v = ParseInt(name, value, 1, 1 << 30);
      if (!v.ok()) return v.status();
      c.yoco_prefill_keep_tokens = *v;
    } else if (name == "DEEPINFER_ACCELERATOR") {
      auto v = ParseChoice(name, value, {"cpu", "cuda"});
      if (!v.ok()) return v.status();
      c.accelerator = *v;
    } else if (name == "DEEPINFER_NUM_THREADS") {
      auto v = ParseInt(name, value, 0, 1024);
      if (!v.ok()) return v.status();
      c.num_threads = *v;
    } else if (name == "DEEPINFER_FORCE_ISA") {
      auto v = ParseChoice(
          name, value,
          {"auto", "scalar", "avx2", "avx512", "avx512bf16", "amx", "amxemu", "avx512bf16emu"});
      if (!v.ok()) return v.status();
      c.force_isa = *v == "scalar"       ? IsaLevel::kScalar
                    : *v == "avx2"       ? IsaLevel::kAvx2
                    : *v == "avx512"     ? IsaLevel::kAvx512
                    : *v == "avx512bf16" ? IsaLevel::kAvx512Bf16
                    : *v == "amx"        ? IsaLevel::kAmx
                    : *v == "auto"       ? IsaLevel::kAuto
                                         : IsaLevel::kAvx512;  // the emulations
      c.bf16_dot_emulation = *v == "amxemu"          ? Bf16DotEmulation::kAmx
                             : *v == "avx512bf16emu" ? Bf16DotEmulation::kVdp
                                                     : Bf16DotEmulation::kNone;
    } else if (name == "DEEPINFER_REPACK_WEIGHTS") {
      auto v = ParseBool(name, value);
      if (!v.ok()) return v.status();
      c.repack_weights = *v;
    } else if (name == "DEEPINFER_BF16_ACTIVATIONS") {
      auto v = ParseBool(name, value);
      if (!v.ok()) return v.status();
      c.bf16_activations = *v;
    } else if (name == "DEEPINFER_LOG_LEVEL") {
      auto v = ParseLogLevel(std::string_view(value));
      if (!v.ok()) return BadValue(name, value, "debug, info, warning or error");
      c.log_level = *v;
    } else if (name == "DEEPINFER_SHARED_DIR") {
      // Read by tests (and the e2e harness) directly; accepted here so it does not warn.
    } else if (warnings != nullptr) {
      warnings->push_back(
          absl::StrCat("unknown environment variable ", name, " (not a deepinfer setting; typo?)"));
    }
  }
  return c;
}

namespace {
std::map<std::string, std::string> ProcessEnv() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    if (!absl::StartsWith(AbslView(kv), "DEEPINFER_")) continue;
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return env;
}
}  // namespace

absl::Status CheckEnvConfigSupported(const EnvConfig& config, std::vector<std::string>* warnings) {
  if (config.accelerator != "cpu") {
    return absl::FailedPreconditionError(absl::StrCat(
        "DEEPINFER_ACCELERATOR=", config.accelerator, ": this build has no ", config.accelerator,
        " backend (only cpu exists today); unset it or use DEEPINFER_ACCELERATOR=cpu"));
  }
  return absl::OkStatus();
}

absl::Status InitEnvConfigFromProcess() {
  std::vector<std::string> warnings;
  auto parsed = ParseEnvConfig(ProcessEnv(), &warnings);
  if (!parsed.ok()) return parsed.status();
  if (absl::Status s = CheckEnvConfigSupported(*parsed, &warnings); !s.ok()) return s;
  for (const auto& w : warnings) LOG(WARNING) << w;
  SetMinLogLevel(parsed->log_level);
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_config == nullptr) g_config = new EnvConfig();
  *g_config = *parsed;
  return absl::OkStatus();
}

const EnvConfig& Env() {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_config != nullptr) return *g_config;
  }
  absl::Status s = InitEnvConfigFromProcess();
  if (!s.ok()) {
    LOG(ERROR) << s.message() << "; using defaults";
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_config == nullptr) g_config = new EnvConfig();
  }
  std::lock_guard<std::mutex> lock(g_mu);
  return *g_config;
}

void SetEnvConfigForTesting(const EnvConfig& config) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_config == nullptr) g_config = new EnvConfig();
  *g_config = config;
}

}  // namespace deepinfer
