// Prompt tokenization under the context bound (issue 22 §6): a prompt that provably exceeds the
// context is rejected before tokenizing (the byte bound, CheckPromptBound) or while tokenizing
// (the tokenizer stops once it has more ids than the context), so the memory a request costs is
// bounded by the context, not by its body.
#include "absl/strings/str_cat.h"
#include "api/errors.h"
#include "api/server_internal.h"

namespace deepinfer::api {
namespace {

absl::Status MoreThanContext(int64_t max_ctx, const char* prompt_param) {
  return WithParam(
      WithErrorCode(absl::InvalidArgumentError(absl::StrCat(
                        "This model's maximum context length is ", max_ctx,
                        " tokens. However, your ", prompt_param, " has more than ", max_ctx,
                        " tokens (tokenizing stopped there). Please reduce the length of the ",
                        prompt_param, ".")),
                    "context_length_exceeded"),
      prompt_param);
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> ApiServer::Impl::PromptIds(
    const protocol::EncodedPrompt& encoded, const char* prompt_param, bool bounded) const {
  const int64_t max_ctx = MaxModelLen();
  if (bounded) {
    if (absl::Status st = CheckPromptBound(encoded, prompt_param); !st.ok()) return st;
  }
  // A prompt of exactly max_ctx tokens still reaches BuildParams, whose message gives the count.
  absl::StatusOr<std::vector<int32_t>> ids = protocol::PromptToIds(
      encoded, *s->tokenizer_, nullptr, bounded ? static_cast<size_t>(max_ctx) : SIZE_MAX);
  if (ids.ok()) return ids;
  if (ids.status().code() == absl::StatusCode::kOutOfRange) {
    return MoreThanContext(max_ctx, prompt_param);
  }
  return absl::InternalError(
      absl::StrCat("cannot tokenize the chat template: ", ids.status().message()));
}

absl::StatusOr<std::vector<int32_t>> ApiServer::Impl::PromptTextIds(std::string_view text,
                                                                    const char* prompt_param) const {
  const Tokenizer& tok = *s->tokenizer_;
  const bool bos = tok.add_bos() && tok.bos_id() >= 0;
  if (absl::Status st = CheckPromptBound(static_cast<int64_t>(text.size()), bos ? 1 : 0,
                                         prompt_param);
      !st.ok()) {
    return st;
  }
  const int64_t max_ctx = MaxModelLen();
  std::optional<std::vector<int32_t>> text_ids =
      tok.EncodeTextAtMost(text, static_cast<size_t>(max_ctx) - (bos ? 1 : 0));
  if (!text_ids) return MoreThanContext(max_ctx, prompt_param);
  std::vector<int32_t> ids;
  ids.reserve(text_ids->size() + 1);
  if (bos) ids.push_back(tok.bos_id());
  ids.insert(ids.end(), text_ids->begin(), text_ids->end());
  return ids;
}

}  // namespace deepinfer::api
