// `deepinfer score`: per-position log-probabilities and perplexity (issue #13).
#include <cstdio>

#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/config.h"
#include "common/file_util.h"
#include "engine/scoring.h"
#include "model/model.h"
#include "nlohmann/json.hpp"
#include "tokenizer/tokenizer.h"
#include "tools/cli_flags.h"
#include "tools/commands.h"

namespace deepinfer::cli {

int RunScore(int argc, char** argv) {
  FlagSet flags("score");
  flags.AddString("model", "",
                  "model directory (Hugging Face layout); DEEPINFER_HF_MODEL_DIR if unset");
  flags.AddString("prompt-ids", "", "comma-separated token ids to score");
  flags.AddString("text", "", "text to score (tokenized with the model's tokenizer)");
  flags.AddString("file", "", "file whose text to score");
  flags.AddString("top-logprobs", "0", "alternatives per position");
  flags.AddString("context", "0", "window length in tokens (0 = whole input)");
  flags.AddString("stride", "0", "window advance in tokens (0 = context)");
  flags.AddString("format", "table", "json or table");
  flags.AddBool("add-bos", true, "prepend the tokenizer's BOS token to --text/--file input");
  flags.AddBool("fp32-activations", false, "FP32 activations (debug numerics)");
  flags.AddBool("help", false, "show this help");
  auto fail = [&](const absl::Status& s) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 2;
  };
  if (auto s = flags.Parse(argc, argv); !s.ok()) return fail(s);
  if (flags.GetBool("help")) {
    std::printf("%s", flags.Usage().c_str());
    return 0;
  }
  std::string dir = flags.GetString("model");
  if (dir.empty()) dir = Env().hf_model_dir;
  if (dir.empty()) return fail(absl::InvalidArgumentError("deepinfer score: --model is required"));
  const int inputs = !flags.GetString("prompt-ids").empty() + !flags.GetString("text").empty() +
                     !flags.GetString("file").empty();
  if (inputs != 1) {
    return fail(absl::InvalidArgumentError(
        "deepinfer score: give exactly one of --prompt-ids, --text, --file"));
  }
  const std::string format = flags.GetString("format");
  if (format != "json" && format != "table") {
    return fail(absl::InvalidArgumentError("deepinfer score: --format must be json or table"));
  }
  auto top = flags.GetInt("top-logprobs");
  auto context = flags.GetInt("context");
  auto stride = flags.GetInt("stride");
  if (!top.ok()) return fail(top.status());
  if (!context.ok()) return fail(context.status());
  if (!stride.ok()) return fail(stride.status());
  if (*top < 0 || *context < 0 || *stride < 0) {
    return fail(absl::InvalidArgumentError(
        "deepinfer score: --top-logprobs, --context and --stride must be >= 0"));
  }

  model::LoadOptions load;
  load.fp32_activations = flags.GetBool("fp32-activations");
  auto model = model::LoadModel(dir, load);
  if (!model.ok()) {
    std::fprintf(stderr, "deepinfer score: %s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  std::unique_ptr<Tokenizer> tokenizer;
  if (auto t = Tokenizer::FromDirectory(dir); t.ok()) tokenizer = std::move(*t);

  std::vector<int32_t> tokens;
  if (!flags.GetString("prompt-ids").empty()) {
    auto ids = flags.GetIntList("prompt-ids");
    if (!ids.ok()) return fail(ids.status());
    tokens = *ids;
  } else {
    std::string text = flags.GetString("text");
    if (!flags.GetString("file").empty()) {
      absl::StatusOr<std::string> file_text = ReadFileToString(flags.GetString("file"));
      if (!file_text.ok()) {
        return fail(absl::NotFoundError(absl::StrCat("deepinfer score: cannot read --file ",
                                                     flags.GetString("file"), ": ",
                                                     file_text.status().message())));
      }
      text = *std::move(file_text);
    }
    if (!tokenizer) {
      return fail(absl::FailedPreconditionError(
          "deepinfer score: the model has no tokenizer.json; use --prompt-ids"));
    }
    if (flags.GetBool("add-bos") && tokenizer->bos_id() >= 0) tokens.push_back(tokenizer->bos_id());
    for (int32_t id : tokenizer->EncodeText(text)) tokens.push_back(id);
  }

  engine::ScoreOptions opt;
  opt.top_logprobs = static_cast<int>(*top);
  opt.context = *context;
  opt.stride = *stride;
  Stopwatch watch;
  opt.progress = [&](int64_t done, int64_t total) {
    if (total > 1) {
      std::fprintf(stderr, "\rscoring: window %lld/%lld (%.1f s)", static_cast<long long>(done),
                   static_cast<long long>(total), watch.ElapsedSeconds());
      if (done == total) std::fprintf(stderr, "\n");
    }
  };
  auto result = engine::ScoreTokens(**model, tokens, opt);
  if (!result.ok()) {
    std::fprintf(stderr, "deepinfer score: %s\n", std::string(result.status().message()).c_str());
    return result.status().code() == absl::StatusCode::kInvalidArgument ||
                   result.status().code() == absl::StatusCode::kOutOfRange
               ? 2
               : 1;
  }
  auto piece = [&](int32_t id) {
    return tokenizer ? tokenizer->Decode(std::span<const int32_t>(&id, 1)) : std::string();
  };
  if (format == "json") {
    nlohmann::json out;
    out["tokens"] = result->tokens;
    nlohmann::json lps = nlohmann::json::array(), tops = nlohmann::json::array();
    for (size_t p = 0; p < result->tokens.size(); ++p) {
      if (result->token_logprobs[p]) {
        lps.push_back(*result->token_logprobs[p]);
      } else {
        lps.push_back(nullptr);
      }
      if (p == 0) {
        tops.push_back(nullptr);
        continue;
      }
      nlohmann::json alts = nlohmann::json::array();
      for (const auto& [id, lp] : result->top_logprobs[p]) {
        nlohmann::json a = {{"id", id}, {"logprob", lp}};
        if (tokenizer) a["text"] = piece(id);
        alts.push_back(a);
      }
      tops.push_back(alts);
    }
    out["token_logprobs"] = lps;
    out["top_logprobs"] = tops;
    out["nll"] = result->nll;
    out["ppl"] = result->ppl;
    out["scored_tokens"] = result->scored_tokens;
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("%6s %8s %-20s %12s\n", "pos", "id", "token", "logprob");
    for (size_t p = 0; p < result->tokens.size(); ++p) {
      std::string text = piece(result->tokens[p]);
      for (char& c : text) {
        if (c == '\n') c = ' ';
      }
      if (result->token_logprobs[p]) {
        std::printf("%6zu %8d %-20s %12.5f\n", p, result->tokens[p], text.c_str(),
                    *result->token_logprobs[p]);
      } else {
        std::printf("%6zu %8d %-20s %12s\n", p, result->tokens[p], text.c_str(), "-");
      }
    }
    std::printf("scored tokens: %lld  nll: %.6f  perplexity: %.4f\n",
                static_cast<long long>(result->scored_tokens), result->nll, result->ppl);
  }
  return 0;
}

}  // namespace deepinfer::cli
