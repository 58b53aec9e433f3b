#include "engine/sampling_params.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace deepinfer::engine {
namespace {

absl::Status Bad(const char* field, double value, const char* range) {
  return absl::InvalidArgumentError(
      absl::StrCat("sampling parameter ", field, " = ", value, " is out of range ", range));
}

}  // namespace

absl::Status SamplingParams::Validate() const {
  if (!(temperature >= 0.0f && temperature <= 100.0f))
    return Bad("temperature", temperature, "[0, 100]");
  if (!(top_p > 0.0f && top_p <= 1.0f)) return Bad("top_p", top_p, "(0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return Bad("min_p", min_p, "[0, 1]");
  if (top_k < -1) return Bad("top_k", top_k, "-1 (off), 0 (off) or >= 1");
  if (!(repetition_penalty > 0.0f && repetition_penalty <= 2.0f)) {
    return Bad("repetition_penalty", repetition_penalty, "(0, 2]");
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return Bad("presence_penalty", presence_penalty, "[-2, 2]");
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return Bad("frequency_penalty", frequency_penalty, "[-2, 2]");
  }
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0) return Bad("logit_bias token id", id, ">= 0");
    if (!(bias >= -100.0f && bias <= 100.0f)) return Bad("logit_bias value", bias, "[-100, 100]");
  }
  if (n < 1 || n > 128) return Bad("n", n, "[1, 128]");
  if (max_tokens < 1) return Bad("max_tokens", max_tokens, ">= 1");
  if (min_tokens < 0 || min_tokens > max_tokens)
    return Bad("min_tokens", min_tokens, "[0, max_tokens]");
  for (int32_t id : stop_token_ids) {
    if (id < 0) return Bad("stop_token_ids entry", id, ">= 0");
  }
  if (logprobs < -1 || logprobs > 20) return Bad("logprobs", logprobs, "[-1, 20]");
  if (prompt_logprobs < -1 || prompt_logprobs > 20) {
    return Bad("prompt_logprobs", prompt_logprobs, "[-1, 20]");
  }
  return absl::OkStatus();
}

}  // namespace deepinfer::engine
