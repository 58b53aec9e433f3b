// SamplingParams from the API sampling fields, with the context-length and KV-capacity checks.
#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "api/errors.h"
#include "api/server_internal.h"
#include "model/kv_layout.h"

namespace deepinfer::api {

using OJson = nlohmann::ordered_json;
using engine::StepOutput;

absl::Status ApiServer::Impl::CheckPromptBound(int64_t text_bytes, int64_t special_tokens,
                                               const char* prompt_param) const {
  const int64_t max_ctx = MaxModelLen();
  // Each piece of n bytes encodes to at least ceil(n / max_token_bytes) tokens (at least one
  // when non-empty); the sum over pieces is bounded below by the whole divided, rounded up.
  const int64_t at_least =
      special_tokens + (text_bytes + max_token_bytes - 1) / std::max<int64_t>(1, max_token_bytes);
  if (at_least < max_ctx) return absl::OkStatus();
  return WithParam(
      WithErrorCode(
          absl::InvalidArgumentError(absl::StrCat(
              "This model's maximum context length is ", max_ctx, " tokens. However, your ",
              prompt_param, " has ", text_bytes, " bytes of text, at least ", at_least,
              " tokens. Please reduce the length of the ", prompt_param, ".")),
          "context_length_exceeded"),
      prompt_param);
}

absl::Status ApiServer::Impl::CheckPromptBound(const protocol::EncodedPrompt& prompt,
                                               const char* prompt_param) const {
  int64_t bytes = 0;
  int64_t special = 0;
  for (const protocol::PromptPiece& p : prompt.pieces) {
    if (p.special) {
      ++special;
    } else {
      bytes += static_cast<int64_t>(p.text.size());
    }
  }
  return CheckPromptBound(bytes, special, prompt_param);
}

int64_t ApiServer::Impl::DefaultChatMaxTokens(bool thinking) const {
  // generation_config.json's max_new_tokens first (vLLM); else DeepSeek's API: max_tokens
  // defaults to 4K (chat) and 32K (reasoning), so a client that omits it never runs to the end
  // of a 64K+ context.
  if (s->options_.sampling_defaults.max_new_tokens) {
    return *s->options_.sampling_defaults.max_new_tokens;
  }
  return thinking ? 32768 : 4096;
}

int64_t ApiServer::Impl::CountReasoningTokens(std::span<const int32_t> ids,
                                              bool* in_reasoning) const {
  int64_t n = 0;
  for (const int32_t id : ids) {
    if (!*in_reasoning) break;
    ++n;
    if (id == s->markers_->think_end || id == s->markers_->dsml || id == s->markers_->eos) {
      *in_reasoning = false;
    }
  }
  return n;
}

absl::StatusOr<engine::SamplingParams> ApiServer::Impl::BuildParams(
    const SamplingFields& f, int64_t prompt_len, const char* prompt_param,
    int64_t default_max_tokens) const {
  const int64_t max_ctx = MaxModelLen();
  const engine::EngineStats stats = s->backend_->Stats();
  const int64_t kv_tokens = stats.kv_blocks_total * model::kBlockTokens;
  if (prompt_len >= max_ctx) {
    return WithParam(
        WithErrorCode(absl::InvalidArgumentError(absl::StrCat(
                          "This model's maximum context length is ", max_ctx,
                          " tokens. However, your ", prompt_param, " resulted in ", prompt_len,
                          " tokens. Please reduce the length of the ", prompt_param, ".")),
                      "context_length_exceeded"),
        prompt_param);
  }
  if (kv_tokens > 0 && prompt_len >= kv_tokens) {
    return WithParam(WithErrorCode(absl::InvalidArgumentError(absl::StrCat(
                                       "Your ", prompt_param, " resulted in ", prompt_len,
                                       " tokens, more than the KV cache of this server holds (",
                                       kv_tokens, " tokens).")),
                                   "context_length_exceeded"),
                     prompt_param);
  }
  int64_t limit = max_ctx;
  if (kv_tokens > 0) limit = std::min(limit, kv_tokens);
  int64_t max_tokens = 0;
  if (f.max_tokens) {
    if (prompt_len + *f.max_tokens > max_ctx) {
      return WithParam(
          WithErrorCode(absl::InvalidArgumentError(absl::StrCat(
                            "This model's maximum context length is ", max_ctx,
                            " tokens. However, you requested ", prompt_len + *f.max_tokens,
                            " tokens (", prompt_len, " in the ", prompt_param, ", ", *f.max_tokens,
                            " in the completion). Please reduce the length of the ", prompt_param,
                            " or completion.")),
                        "context_length_exceeded"),
          f.max_tokens_param);
    }
    if (prompt_len + *f.max_tokens > limit) {
      return WithParam(
          WithErrorCode(absl::InvalidArgumentError(absl::StrCat(
                            "You requested ", prompt_len + *f.max_tokens, " tokens (", prompt_len,
                            " in the ", prompt_param, ", ", *f.max_tokens,
                            " in the completion), more than the KV cache of this server holds (",
                            kv_tokens, " tokens).")),
                        "context_length_exceeded"),
          f.max_tokens_param);
    }
    max_tokens = *f.max_tokens;
  } else {
    max_tokens = limit - prompt_len;
    if (default_max_tokens > 0) max_tokens = std::min(max_tokens, default_max_tokens);
  }
  // Omitted fields: the model's generation_config.json (vLLM), then the API default.
  const SamplingDefaults& d = s->options_.sampling_defaults;
  engine::SamplingParams p;
  p.temperature = static_cast<float>(f.temperature.value_or(d.temperature.value_or(1.0)));
  p.top_p = static_cast<float>(f.top_p.value_or(d.top_p.value_or(1.0)));
  if (f.top_k) {
    p.top_k = *f.top_k;
  } else if (d.top_k) {
    p.top_k = *d.top_k;
  }
  if (f.min_p || d.min_p) p.min_p = static_cast<float>(f.min_p.value_or(d.min_p.value_or(0.0)));
  p.presence_penalty = static_cast<float>(f.presence_penalty);
  p.frequency_penalty = static_cast<float>(f.frequency_penalty);
  if (f.repetition_penalty || d.repetition_penalty) {
    p.repetition_penalty =
        static_cast<float>(f.repetition_penalty.value_or(d.repetition_penalty.value_or(1.0)));
  }
  // The engine checks this too; here the 400 can name the parameter.
  const int64_t vocab = s->backend_->model_info().vocab_size;
  for (const auto& [id, bias] : f.logit_bias) {
    if (id >= vocab) {
      return WithParam(
          absl::InvalidArgumentError(absl::StrCat("logit_bias token id ", id,
                                                  " is outside the vocabulary [0, ", vocab, ").")),
          "logit_bias");
    }
  }
  p.logit_bias = f.logit_bias;
  for (int32_t id : f.stop_token_ids) {
    if (id >= vocab) {
      return WithParam(
          absl::InvalidArgumentError(absl::StrCat("stop_token_ids names token id ", id,
                                                  ", outside the vocabulary [0, ", vocab, ").")),
          "stop_token_ids");
    }
  }
  p.stop_token_ids = f.stop_token_ids;
  p.n = f.n;
  p.seed = f.seed;
  p.max_tokens = static_cast<int>(std::min<int64_t>(max_tokens, INT32_MAX));
  if (f.min_tokens) p.min_tokens = static_cast<int>(std::min<int64_t>(*f.min_tokens, p.max_tokens));
  p.ignore_eos = f.ignore_eos;
  return p;
}

}  // namespace deepinfer::api
