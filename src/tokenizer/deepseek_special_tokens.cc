#include "tokenizer/deepseek_special_tokens.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "nlohmann/json.hpp"

namespace deepinfer {

namespace {

// deepseek-v4.md §6 and protocol.md §1.1. "special" follows the V3 file where the token exists
// there (the chat-role and tool tokens are added but not special, so skip_special decoding keeps
// them); for the V4 additions the reasoning/DSML markers are kept non-special (the protocol
// layer parses them out of decoded text like the V3 tool tokens) and the rest are special.
constexpr DeepSeekSpecialToken kTokens[] = {
    {kDsBos, kDsBosId, true},
    {kDsEos, kDsEosId, true},
    {kDsPad, kDsPadId, true},
    {kDsSystem, kDsSystemId, true},
    {"<｜fim▁hole｜>", 128800, false},
    {"<｜fim▁begin｜>", 128801, false},
    {"<｜fim▁end｜>", 128802, false},
    {kDsUser, kDsUserId, false},
    {kDsAssistant, kDsAssistantId, false},
    {"<|EOT|>", 128805, true},
    {"<｜tool▁calls▁begin｜>", 128806, false},
    {"<｜tool▁calls▁end｜>", 128807, false},
    {"<｜tool▁call▁begin｜>", 128808, false},
    {"<｜tool▁call▁end｜>", 128809, false},
    {"<｜tool▁outputs▁begin｜>", 128810, false},
    {"<｜tool▁outputs▁end｜>", 128811, false},
    {"<｜tool▁output▁begin｜>", 128812, false},
    {"<｜tool▁output▁end｜>", 128813, false},
    {"<｜tool▁sep｜>", 128814, false},
    {kDsThinkBegin, kDsThinkBeginId, false},
    {kDsThinkEnd, kDsThinkEndId, false},
    {kDsDsml, kDsDsmlId, false},
    {kDsLatestReminder, kDsLatestReminderId, true},
    {"<｜action｜>", 128829, true},
    {"<｜query｜>", 128830, true},
    {"<｜authority｜>", 128831, true},
    {"<｜domain｜>", 128832, true},
    {"<｜title｜>", 128836, true},
    {"<｜read_url｜>", 128845, true},
};

}  // namespace

std::span<const DeepSeekSpecialToken> DeepSeekV4SpecialTokens() { return kTokens; }

absl::StatusOr<std::string> AddDeepSeekV4SpecialTokens(std::string_view v3_tokenizer_json) {
  using Json = nlohmann::json;
  Json root = Json::parse(v3_tokenizer_json.begin(), v3_tokenizer_json.end(), nullptr,
                          /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError("tokenizer.json: not a valid JSON object");
  }
  Json& added = root["added_tokens"];
  if (added.is_null()) added = Json::array();
  if (!added.is_array())
    return absl::InvalidArgumentError("tokenizer.json: added_tokens is not an array");
  for (const Json& t : added) {
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
        !t.contains("content") || !t["content"].is_string()) {
      return absl::InvalidArgumentError(
          "tokenizer.json: added_tokens entry without integer id and string content");
    }
  }
  for (const DeepSeekSpecialToken& tok : kTokens) {
    const std::string content(tok.content);
    Json* same_id = nullptr;
    for (Json& t : added) {
      const bool id_match = t["id"].get<int64_t>() == tok.id;
      if (id_match) same_id = &t;
      if (!id_match && t["content"].get<std::string>() == content) {
        return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: \"", content,
                                                       "\" already has id ", t["id"].get<int64_t>(),
                                                       ", not ", tok.id));
      }
    }
    if (same_id != nullptr && (*same_id)["content"].get<std::string>() == content) continue;
    Json entry = {{"id", tok.id},          {"content", content}, {"single_word", false},
                  {"lstrip", false},       {"rstrip", false},    {"normalized", !tok.special},
                  {"special", tok.special}};
    if (same_id != nullptr) {
      *same_id = std::move(entry);
    } else {
      added.push_back(std::move(entry));
    }
  }
  std::vector<Json> sorted(added.begin(), added.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const Json& a, const Json& b) {
    return a["id"].get<int64_t>() < b["id"].get<int64_t>();
  });
  added = Json(sorted);
  return root.dump(/*indent=*/-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

}  // namespace deepinfer
