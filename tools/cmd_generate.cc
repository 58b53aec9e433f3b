// `deepinfer generate`: greedy generation from token ids, straight on a CausalLM.
//
//   deepinfer generate --model DIR --prompt-ids 1,403,407 --max-tokens 32
//   deepinfer generate --model DIR --prompt "Once upon a time" [--temperature 0.8 --seed 1]
// With --prompt the text is encoded by the model's tokenizer (BOS added when the model has one)
// and generated through the engine (continuous batching, sampler); the text is printed.
// Structured output (with --prompt; docs/structured-output.md "Offline API"): one of
//   --json-schema FILE_OR_JSON | --json-object | --regex RE | --grammar FILE.ebnf
// constrains the output (SamplingParams::so_args, compiled by engine::LLM); then only the
// generated text is printed (exactly the constrained bytes, no prompt), e.g. for piping to jq.
// With --prompt-ids, greedy decoding prints the generated ids, comma-separated, on stdout
// (timings on stderr). This is a minimal loop with its own KV arena (one sequence, identity
// block table), not the engine: it exists to check a model end to end.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/clock.h"
#include "common/file_util.h"
#include "common/logging.h"
#include "common/status.h"
#include "engine/llm.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "tools/cli_flags.h"
#include "tools/commands.h"
#include "tools/engine_flags.h"

namespace deepinfer::cli {
namespace {

constexpr std::string_view kPrefix = "deepinfer generate: ";

// Prints "deepinfer generate: <message>" once (FlagSet's errors already carry the prefix) and
// returns `rc`: 2 for flag and usage errors, 1 for failures of the run itself.
int Report(const absl::Status& s, int rc) {
  std::string_view m(s.message().data(), s.message().size());
  if (m.substr(0, kPrefix.size()) == kPrefix) m.remove_prefix(kPrefix.size());
  std::fprintf(stderr, "%s%.*s\n", std::string(kPrefix).c_str(), static_cast<int>(m.size()),
               m.data());
  return rc;
}

int Fail(const absl::Status& s) { return Report(s, 1); }
int FlagError(const absl::Status& s) { return Report(s, 2); }
int FlagError(const std::string& message) { return Report(absl::InvalidArgumentError(message), 2); }

// The structured-output flag given (at most one), as so_args; `flag` names it for errors.
struct StructuredOutputFlag {
  std::string flag;  // e.g. "--regex"; empty when none was given
  std::optional<engine::StructuredOutputArgs> args;
};

// Reads the structured-output flags. Errors: InvalidArgument naming the flag (two given, a file
// that cannot be read, a constraint that does not parse).
absl::StatusOr<StructuredOutputFlag> ParseStructuredOutputFlags(const FlagSet& flags) {
  using Type = engine::StructuredOutputArgs::SchemaType;
  StructuredOutputFlag out;
  for (const std::string name : {"json-schema", "json-object", "regex", "grammar"}) {
    if (!flags.IsSet(name) || (name == "json-object" && !flags.GetBool(name))) continue;
    if (!out.flag.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          out.flag, " and --", name, " cannot be combined (give one structured-output flag)"));
    }
    out.flag = absl::StrCat("--", name);
    engine::StructuredOutputArgs a;
    const std::string value = name == "json-object" ? "" : flags.GetString(name);
    if (name == "json-schema") {
      a.schema_type = Type::kJsonSchema;
      // Inline JSON starts with '{' (or is a boolean schema); anything else is a file path.
      const size_t first = value.find_first_not_of(" \t\r\n");
      if (first != std::string::npos &&
          (value[first] == '{' || value == "true" || value == "false")) {
        a.schema = value;
      } else {
        absl::StatusOr<std::string> text = ReadFileToString(value);
        if (!text.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat("--json-schema: ", std::string(text.status().message())));
        }
        a.schema = *std::move(text);
      }
    } else if (name == "json-object") {
      a.schema_type = Type::kJsonObject;
    } else if (name == "regex") {
      a.schema_type = Type::kRegex;
      a.schema = value;
    } else {
      a.schema_type = Type::kEbnf;
      absl::StatusOr<std::string> text = ReadFileToString(value);
      if (!text.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--grammar: ", std::string(text.status().message())));
      }
      a.schema = *std::move(text);
    }
    if (absl::Status s = engine::CheckStructuredOutputArgs(a); !s.ok()) {
      const std::string shown = value.size() > 60 ? value.substr(0, 60) + "..." : value;
      return absl::InvalidArgumentError(
          absl::StrCat(out.flag, shown.empty() ? "" : " ", shown, ": ", std::string(s.message())));
    }
    out.args = std::move(a);
  }
  return out;
}

// --prompt TEXT: tokenizer + Engine (sampling flags apply). Prints the generated text.
// Upper bound of --max-tokens (tokens): far above any context this CLI can hold, far below int.
constexpr int kMaxGenerateTokens = 1 << 24;

int GenerateWithEngine(const FlagSet& flags) {
  const std::string dir = flags.GetString("model");
  absl::StatusOr<int64_t> max_tokens = flags.GetInt("max-tokens");
  absl::StatusOr<double> temperature = flags.GetDouble("temperature");
  absl::StatusOr<double> top_p = flags.GetDouble("top-p");
  absl::StatusOr<int64_t> top_k = flags.GetInt("top-k");
  absl::StatusOr<uint64_t> seed =
      flags.IsSet("seed") ? flags.GetSeed("seed") : absl::StatusOr<uint64_t>(0);
  absl::StatusOr<StructuredOutputFlag> so_flag = ParseStructuredOutputFlags(flags);
  for (const absl::Status& s : {max_tokens.status(), temperature.status(), top_p.status(),
                                top_k.status(), seed.status(), so_flag.status()}) {
    if (!s.ok()) return FlagError(s);
  }
  // Checked here, before the narrowing casts below and before loading the model.
  if (*max_tokens < 1 || *max_tokens > kMaxGenerateTokens) {
    return FlagError(
        absl::StrCat("--max-tokens must be in [1, ", kMaxGenerateTokens, "], got ", *max_tokens));
  }
  if (*top_k < -1 || *top_k > std::numeric_limits<int32_t>::max()) {
    return FlagError(
        absl::StrCat("--top-k must be -1 or 0 (off) or a positive count, got ", *top_k));
  }
  engine::SamplingParams params;
  params.max_tokens = static_cast<int>(*max_tokens);
  params.temperature = static_cast<float>(*temperature);
  params.top_p = static_cast<float>(*top_p);
  params.top_k = static_cast<int>(*top_k);
  params.ignore_eos = flags.GetBool("ignore-eos");
  if (flags.IsSet("seed")) params.seed = *seed;
  // The engine's range checks (temperature, top-p) are flag errors too, before the model loads.
  if (absl::Status s = params.Validate(); !s.ok()) {
    const std::string m(s.message());
    const char* flag = m.find("top_p") != std::string::npos         ? "--top-p"
                       : m.find("top_k") != std::string::npos       ? "--top-k"
                       : m.find("temperature") != std::string::npos ? "--temperature"
                                                                    : "a sampling flag";
    return FlagError(absl::StrCat(flag, ": ", m));
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromDirectory(dir);
  if (!tok.ok()) return Fail(tok.status());
  model::LoadOptions load_options;
  load_options.fp32_activations = flags.GetBool("fp32-activations");
  absl::StatusOr<std::unique_ptr<model::CausalLM>> loaded = model::LoadModel(dir, load_options);
  if (!loaded.ok()) return Fail(loaded.status());
  std::vector<int32_t> prompt;
  const int32_t bos =
      (*loaded)->info().bos_token_id >= 0 ? (*loaded)->info().bos_token_id : (*tok)->bos_id();
  if (bos >= 0) prompt.push_back(bos);
  const std::vector<int32_t> text_ids = (*tok)->EncodeText(flags.GetString("prompt"));
  prompt.insert(prompt.end(), text_ids.begin(), text_ids.end());
  if (prompt.empty()) {
    return FlagError("--prompt is empty and the model has no BOS token to start from");
  }
  engine::EngineConfig config;
  config.max_num_seqs = 1;
  config.kv_memory_bytes = int64_t{256} << 20;
  config.async_scheduling = !flags.GetBool("no-async-scheduling");
  // Jump-forward and speculative decoding as in `serve` (the same flags and environment).
  if (absl::Status s = ApplyDecodingFlags(flags, &config); !s.ok()) return FlagError(s);
  absl::StatusOr<std::unique_ptr<engine::LLM>> llm =
      engine::LLM::Create(std::move(*loaded), config, **tok);
  if (!llm.ok()) return Fail(llm.status());
  params.so_args = so_flag->args;
  Stopwatch watch;
  absl::StatusOr<std::vector<engine::GenerateOutput>> out = (*llm)->Generate({prompt}, params);
  if (!out.ok()) {
    if (so_flag->args.has_value() && (out.status().code() == absl::StatusCode::kInvalidArgument ||
                                      out.status().code() == absl::StatusCode::kDeadlineExceeded)) {
      return Fail(Annotate(out.status(), so_flag->flag));
    }
    return Fail(out.status());
  }
  const engine::SampleOutput& s = (*out)[0].samples[0];
  if (so_flag->args.has_value()) {
    // Exactly the bytes the grammar constrained (Decode would normalise leading spaces).
    std::string text;
    for (int32_t id : s.token_ids) {
      if (!(*tok)->GetTokenInfo(id).is_special) text += (*tok)->TokenBytes(id);
    }
    std::printf("%s\n", text.c_str());
  } else {
    // Decoded relative to the prompt, as the server's completions do: the detokenizer is primed
    // with the prompt ids so SentencePiece's sequence-start space strip applies to the prompt,
    // and the continuation keeps its leading space ("Once" + " upon a time").
    StreamingDetokenizer detok(tok->get(), /*skip_special=*/true);
    for (int32_t id : prompt) detok.Push(id);
    std::string text;
    for (int32_t id : s.token_ids) text += detok.Push(id);
    text += detok.Flush();
    std::printf("%s%s\n", flags.GetString("prompt").c_str(), text.c_str());
  }
  std::fprintf(stderr, "%zu prompt tokens, %zu generated (finish: %s) in %.3f s\n", prompt.size(),
               s.token_ids.size(), std::string(engine::FinishReasonName(s.finish)).c_str(),
               watch.ElapsedSeconds());
  return 0;
}

}  // namespace

int RunGenerate(int argc, char** argv) {
  FlagSet flags("generate");
  flags.AddString("model", "", "Hugging Face model directory (config.json + *.safetensors)");
  flags.AddString("prompt-ids", "", "comma-separated prompt token ids, e.g. 1,403,407");
  flags.AddString("max-tokens", "16", "number of tokens to generate");
  flags.AddBool("ignore-eos", false, "keep generating after an end-of-sequence token");
  flags.AddBool("fp32-activations", false, "FP32 activations everywhere (debug numerics)");
  flags.AddString("prompt", "",
                  "prompt text (encoded with the model's tokenizer; uses the engine)");
  flags.AddString("temperature", "0", "with --prompt: sampling temperature (0 = greedy)");
  flags.AddString("top-p", "1", "with --prompt: nucleus sampling threshold");
  flags.AddString("top-k", "-1", "with --prompt: keep the k most likely tokens (-1 or 0 = off)");
  flags.AddString("seed", "",
                  "with --prompt: sampling seed, an integer in [-2^63, 2^64-1], negatives taken "
                  "modulo 2^64 (default: unset, a random seed)");
  flags.AddBool("no-async-scheduling", false, "with --prompt: disable async engine scheduling");
  flags.AddString("json-schema", "",
                  "with --prompt: constrain the output to this JSON schema (inline JSON starting "
                  "with '{', or a file); prints only the generated text");
  flags.AddBool("json-object", false, "with --prompt: constrain the output to a JSON object");
  flags.AddString("regex", "",
                  "with --prompt: the whole output matches this regex (ECMA-262 subset, "
                  "docs/structured-output.md)");
  flags.AddString("grammar", "",
                  "with --prompt: constrain the output to the EBNF grammar in this file (start "
                  "rule root)");
  AddDecodingFlags(flags);  // with --prompt (the engine path)
  if (std::optional<int> exit_code = flags.ParseCommandLine(argc, argv)) return *exit_code;
  if (flags.IsSet("prompt") && flags.IsSet("prompt-ids")) {
    return FlagError("--prompt and --prompt-ids cannot be combined (give one)");
  }
  if (flags.IsSet("prompt")) {
    if (flags.GetString("model").empty()) return FlagError("--prompt needs --model");
    return GenerateWithEngine(flags);  // an empty prompt is the model's BOS alone
  }
  // --prompt-ids is greedy decoding straight on the model: flags of the engine path (sampling,
  // jump-forward and speculative decoding) would be ignored, so they are usage errors.
  auto engine_only = [&](std::initializer_list<const char*> names, const char* why) {
    for (const char* so : names) {
      if (flags.IsSet(so) && flags.IsSet("prompt-ids")) {
        std::fprintf(stderr, "deepinfer generate: --%s applies to --prompt %s\n", so, why);
        return true;
      }
    }
    return false;
  };
  if (engine_only({"temperature", "top-p", "top-k", "seed"},
                  "(text); --prompt-ids decodes greedily") ||
      engine_only({"speculative-method", "num-speculative-tokens", "prompt-lookup-min",
                   "prompt-lookup-max", "speculative-script", "speculative-draft-sampling",
                   "speculative-varlen", "speculative-cost-table",
                   "speculative-varlen-min-concurrency", "speculative-varlen-gate",
                   "jump-forward"},
                  "(text, through the engine); --prompt-ids decodes straight on the model")) {
    return 2;
  }
  for (const char* so : {"json-schema", "json-object", "regex", "grammar"}) {
    if (flags.IsSet(so) && (std::string(so) != "json-object" || flags.GetBool(so))) {
      std::fprintf(stderr, "deepinfer generate: --%s needs --model and --prompt (text)\n", so);
      return 2;
    }
  }
  if (flags.GetString("model").empty() || flags.GetString("prompt-ids").empty()) {
    std::fprintf(stderr,
                 "deepinfer generate: --model and --prompt or --prompt-ids are required\n\n%s",
                 flags.Usage().c_str());
    return 2;
  }
  absl::StatusOr<std::vector<int32_t>> prompt = flags.GetIntList("prompt-ids");
  absl::StatusOr<int64_t> max_tokens = flags.GetInt("max-tokens");
  if (!prompt.ok() || !max_tokens.ok() || *max_tokens < 0 || prompt->empty()) {
    return FlagError(!prompt.ok() ? prompt.status()
                     : !max_tokens.ok()
                         ? max_tokens.status()
                         : absl::InvalidArgumentError("--max-tokens must be >= 0 and --prompt-ids "
                                                      "non-empty"));
  }

  model::LoadOptions load_options;
  load_options.fp32_activations = flags.GetBool("fp32-activations");
  Stopwatch load_watch;
  absl::StatusOr<std::unique_ptr<model::CausalLM>> loaded =
      model::LoadModel(flags.GetString("model"), load_options);
  if (!loaded.ok()) return Fail(loaded.status());
  model::CausalLM& lm = **loaded;
  const model::ModelInfo& info = lm.info();
  LOG(INFO) << "loaded " << info.architecture << " (" << info.num_parameters << " parameters, "
            << info.weight_bytes << " bytes) in " << load_watch.ElapsedSeconds() << " s";

  const int64_t total = static_cast<int64_t>(prompt->size()) + *max_tokens;
  if (total > info.max_context) {
    return Fail(absl::OutOfRangeError(absl::StrCat("prompt + max-tokens = ", total,
                                                   " exceeds the model's context of ",
                                                   info.max_context, " tokens")));
  }
  // One sequence: blocks 0..n-1 of a private arena.
  const model::KvLayout& layout = lm.kv_layout();
  const int64_t num_blocks = (total + model::kBlockTokens - 1) / model::kBlockTokens;
  std::vector<uint8_t> arena(num_blocks * layout.BlockBytes() + layout.StateBytes() + 128);
  uint8_t* aligned = arena.data() + (64 - reinterpret_cast<uintptr_t>(arena.data()) % 64) % 64;
  model::KvCacheView kv;
  kv.block_base = aligned;
  kv.num_blocks = num_blocks;
  if (layout.StateBytes() > 0) {
    const int64_t state_off = (num_blocks * layout.BlockBytes() + 63) / 64 * 64;
    kv.state_base = aligned + state_off;
    kv.num_state_slots = 1;
  }
  std::vector<int32_t> block_table(num_blocks);
  for (int64_t b = 0; b < num_blocks; ++b) block_table[b] = static_cast<int32_t>(b);

  std::vector<int32_t> seq = *prompt;
  std::vector<int32_t> generated;
  int64_t done = 0;
  double prefill_s = 0, decode_s = 0;
  for (int64_t step = 0; step < *max_tokens; ++step) {
    model::ForwardBatch batch;
    model::SequenceChunk chunk;
    chunk.start_pos = done;
    chunk.tokens = std::span<const int32_t>(seq.data() + done, seq.size() - done);
    chunk.block_table = block_table;
    chunk.state_slot = 0;
    chunk.logits = model::LogitsMode::kLast;
    batch.chunks.push_back(chunk);
    model::ForwardOutput out;
    Stopwatch watch;
    if (absl::Status s = lm.Forward(batch, kv, &out); !s.ok()) return Fail(s);
    (step == 0 ? prefill_s : decode_s) += watch.ElapsedSeconds();
    done = static_cast<int64_t>(seq.size());
    const int32_t next = static_cast<int32_t>(
        std::max_element(out.logits.begin(), out.logits.begin() + info.vocab_size) -
        out.logits.begin());
    generated.push_back(next);
    seq.push_back(next);
    if (!flags.GetBool("ignore-eos") &&
        std::find(info.eos_token_ids.begin(), info.eos_token_ids.end(), next) !=
            info.eos_token_ids.end()) {
      break;
    }
  }
  std::printf("%s\n", absl::StrJoin(generated, ",").c_str());
  const int64_t decoded = std::max<int64_t>(static_cast<int64_t>(generated.size()) - 1, 0);
  std::fprintf(stderr,
               "prefill: %zu tokens in %.3f s; decode: %lld tokens in %.3f s (%.1f tok/s)\n",
               prompt->size(), prefill_s, static_cast<long long>(decoded), decode_s,
               decode_s > 0 ? decoded / decode_s : 0.0);
  return 0;
}

}  // namespace deepinfer::cli
