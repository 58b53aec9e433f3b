// The protocol layer's only contact with the tokenizer: prompt pieces -> ids, and token ids ->
// (marker | text) for the output state machine (prompt_encoder.h, output_parser.h).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "protocol/output_parser.h"
#include "protocol/prompt_encoder.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::protocol {

absl::StatusOr<std::vector<int32_t>> PromptToIds(const EncodedPrompt& prompt,
                                                 const Tokenizer& tokenizer, ThreadPool* pool,
                                                 size_t max_tokens) {
  std::vector<TemplatePiece> pieces;
  pieces.reserve(prompt.pieces.size());
  for (const PromptPiece& p : prompt.pieces) {
    if (p.special) {
      std::optional<int32_t> id = tokenizer.TokenId(p.text);
      if (!id.has_value()) {
        return absl::NotFoundError(
            absl::StrCat("special token '", p.text, "' is not in the tokenizer's vocabulary"));
      }
      pieces.push_back(TemplatePiece::Special(*id));
    } else {
      pieces.push_back(TemplatePiece::Text(p.text));
    }
  }
  std::optional<std::vector<int32_t>> ids = tokenizer.EncodeTemplateAtMost(pieces, max_tokens, pool);
  if (!ids) return absl::OutOfRangeError(absl::StrCat("more than ", max_tokens, " tokens"));
  return *std::move(ids);
}

absl::StatusOr<MarkerIds> MarkerIds::FromTokenizer(const Tokenizer& tokenizer) {
  MarkerIds m;
  auto lookup = [&](std::string_view s, int32_t* id) -> absl::Status {
    std::optional<int32_t> v = tokenizer.TokenId(s);
    if (!v.has_value()) {
      return absl::NotFoundError(
          absl::StrCat("control token '", AbslView(s), "' is not in the tokenizer's vocabulary"));
    }
    *id = *v;
    return absl::OkStatus();
  };
  absl::Status st = lookup("<think>", &m.think_begin);
  if (st.ok()) st = lookup("</think>", &m.think_end);
  if (st.ok()) st = lookup("｜DSML｜", &m.dsml);
  if (!st.ok()) return st;
  m.eos = tokenizer.eos_id();
  if (m.eos < 0) {
    st = lookup("<｜end▁of▁sentence｜>", &m.eos);
    if (!st.ok()) return st;
  }
  return m;
}

OutputParser::OutputParser(const Tokenizer* tokenizer, MarkerIds markers,
                           OutputParserOptions options)
    : tokenizer_(tokenizer),
      markers_(markers),
      min_tokens_(options.min_tokens),
      detok_(std::make_unique<StreamingDetokenizer>(tokenizer, /*skip_special=*/true)),
      machine_(std::move(options)) {
  if (min_tokens_ > 0) machine_.SetStopsArmed(false);
}

OutputParser::~OutputParser() = default;

std::vector<OutputEvent> OutputParser::Feed(std::span<const int32_t> ids) {
  std::vector<OutputEvent> out;
  for (const int32_t id : ids) {
    if (machine_.finished()) break;
    // vLLM's min_tokens: the id that reaches min_tokens is the first whose text may stop.
    if (++ids_seen_ == min_tokens_) machine_.SetStopsArmed(true);
    using M = OutputStateMachine::Marker;
    if (id == markers_.think_end) {
      machine_.FeedMarker(M::kThinkEnd, &out);
    } else if (id == markers_.dsml) {
      machine_.FeedMarker(M::kDsml, &out);
    } else if (id == markers_.eos) {
      machine_.FeedMarker(M::kEos, &out);
    } else if (id == markers_.think_begin) {
      machine_.FeedMarker(M::kThinkBegin, &out);
    } else {
      const std::string text = detok_->Push(id);
      if (!text.empty()) machine_.FeedText(text, &out);
    }
  }
  return out;
}

std::vector<OutputEvent> OutputParser::Finish(StreamEnd end) {
  std::vector<OutputEvent> out;
  // An incomplete UTF-8 tail is dropped, not flushed as U+FFFD (spec §5 case 9).
  machine_.Finish(end, &out);
  return out;
}

}  // namespace deepinfer::protocol
