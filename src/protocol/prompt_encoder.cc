// DeepSeek V4 / V4.1 prompt encoder (see prompt_encoder.h; shared/spec/protocol.md §1.4–§1.7).
#include "protocol/prompt_encoder.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/strings.h"

namespace deepinfer::protocol {

namespace {

constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
constexpr std::string_view kUser = "<｜User｜>";
constexpr std::string_view kAssistant = "<｜Assistant｜>";
constexpr std::string_view kSystem = "<｜System｜>";
constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";
constexpr std::string_view kThinkBegin = "<think>";
constexpr std::string_view kThinkEnd = "</think>";
constexpr std::string_view kDsml = "｜DSML｜";
constexpr std::string_view kImage = "<｜deepseek_image｜>";

constexpr std::string_view kEffortMaxV4 =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate "
    "step, considered alternative, and rejected hypothesis to ensure absolutely no assumption is "
    "left unchecked.\n\n";

constexpr std::string_view kResponseFormatPrefix =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

// Tag names of the DSML grammar per family (spec §2.1).
struct DsmlNames {
  std::string_view block;
  std::string_view invoke;
  std::string_view parameter;
};
DsmlNames Names(ModelFamily f) {
  if (f == ModelFamily::kDeepSeekV41) return {" calls", " invoke", " parameter"};
  return {"tool_calls", "invoke", "parameter"};
}

// The tools prompt (reference TOOLS_TEMPLATE). Rendered entirely as plain text: the DSML and think
// spellings inside this prose are not control tokens (recipe ≥0.2, spec §1.6).
std::string RenderToolsPrompt(const std::vector<ToolDefinition>& tools, ModelFamily family) {
  const DsmlNames n = Names(family);
  const std::string d(kDsml);
  std::string s;
  s += "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can "
       "invoke tools by writing a \"<";
  s += d;
  s += n.block;
  s += ">\" block like the following:\n\n<" + d;
  s += n.block;
  s += ">\n<" + d;
  s += n.invoke;
  s += " name=\"$TOOL_NAME\">\n<" + d;
  s += n.parameter;
  s += " name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" + d;
  s += n.parameter;
  s += ">\n...\n</" + d;
  s += n.invoke;
  s += ">\n<" + d;
  s += n.invoke;
  s += " name=\"$TOOL_NAME2\">\n...\n</" + d;
  s += n.invoke;
  s += ">\n</" + d;
  s += n.block;
  s += ">\n\n"
       "String parameters should be specified as is and set `string=\"true\"`. For all other "
       "types (numbers, booleans, arrays, objects), pass the value in JSON format and set "
       "`string=\"false\"`.\n\n"
       "If thinking_mode is enabled (triggered by <think>), you MUST output your complete "
       "reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\n"
       "Otherwise, output directly after </think> with tool calls or final response.\n\n"
       "### Available Tool Schemas\n\n";
  for (size_t i = 0; i < tools.size(); ++i) {
    if (i > 0) s += "\n";
    PyJson obj = PyJson::Object({{"name", PyJson::String(tools[i].name)},
                                 {"description", PyJson::String(tools[i].description)},
                                 {"parameters", tools[i].parameters}});
    obj.DumpTo(&s);
  }
  s += "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
       "tool calls.\n";
  return s;
}

class PieceBuilder {
 public:
  void Special(std::string_view s) { pieces_.push_back(PromptPiece{true, std::string(s)}); }
  void Text(std::string_view s) {
    if (s.empty()) return;
    if (!pieces_.empty() && !pieces_.back().special) {
      pieces_.back().text.append(s);
    } else {
      pieces_.push_back(PromptPiece{false, std::string(s)});
    }
  }
  std::vector<PromptPiece> Take() { return std::move(pieces_); }
  bool EndsWith(std::string_view special) const {
    return !pieces_.empty() && pieces_.back().special && pieces_.back().text == special;
  }

 private:
  std::vector<PromptPiece> pieces_;
};

// A message after normalisation (step 2–5 of the header comment).
struct NMsg {
  Role role = Role::kUser;
  int source = -1;                  // index in the request's messages (for error params)
  std::vector<ContentPart> blocks;  // user: text / image / other / tool_result blocks
  std::string text;                 // system / developer / assistant / latest_reminder
  std::optional<std::string> reasoning;
  const std::vector<ToolCall>* tool_calls = nullptr;
  bool prefix = false;
  bool tools = false;
  bool response_format = false;
};

// The error param of message `index` of `c` (its request_path when the codec set one).
std::string Param(const Conversation& c, int index, std::string_view rest = {}) {
  if (index >= 0 && index < static_cast<int>(c.messages.size()) &&
      !c.messages[index].request_path.empty()) {
    return absl::StrCat(c.messages[index].request_path, AbslView(rest));
  }
  return absl::StrCat("messages[", index, "]", AbslView(rest));
}

bool ContainsImagePlaceholder(std::string_view s) { return s.find(kImage) != s.npos; }

absl::Status CheckPartsText(const std::vector<ContentPart>& parts, ModelFamily family,
                            const std::string& param, bool allow_images) {
  for (const ContentPart& p : parts) {
    switch (p.kind) {
      case ContentPart::Kind::kText:
        if (family == ModelFamily::kDeepSeekV41 && ContainsImagePlaceholder(p.text)) {
          return MakeProtocolError(
              ProtocolError::kImagePlaceholderInText, param,
              absl::StrCat("Message content contains image special token '", AbslView(kImage),
                           "'. Images should be provided as image content blocks."));
        }
        break;
      case ContentPart::Kind::kImage:
        if (!allow_images) {
          return MakeProtocolError(ProtocolError::kUnsupportedContent, param,
                                   "Image content is only supported in user and tool messages.");
        }
        if (family != ModelFamily::kDeepSeekV41) {
          return MakeProtocolError(ProtocolError::kUnsupportedContent, param,
                                   "This model does not support image input.");
        }
        break;
      case ContentPart::Kind::kToolResult:
        RETURN_IF_ERROR(CheckPartsText(p.content, family, param, allow_images));
        break;
      case ContentPart::Kind::kOther:
        break;
    }
  }
  return absl::OkStatus();
}

absl::Status Validate(const Conversation& c, const EncodeOptions& o) {
  if (c.messages.empty()) {
    return MakeProtocolError(ProtocolError::kEmptyMessages, "messages",
                             "messages must not be empty");
  }
  // Reasoning effort per family.
  const ReasoningEffort& e = o.effort;
  if (o.family == ModelFamily::kDeepSeekV4 && e.kind == ReasoningEffort::Kind::kNumeric) {
    return MakeProtocolError(ProtocolError::kInvalidReasoningEffort, "reasoning_effort",
                             "Invalid reasoning effort: a numeric effort needs DeepSeek-V4.1; "
                             "use low, high or max");
  }
  if (e.kind == ReasoningEffort::Kind::kNumeric && (e.value < 1 || e.value > 100)) {
    return MakeProtocolError(
        ProtocolError::kInvalidReasoningEffort, "reasoning_effort",
        absl::StrCat("Invalid reasoning effort ", e.value, ": should be an integer in [1, 100]"));
  }
  // Tools.
  absl::flat_hash_set<std::string> names;
  for (size_t i = 0; i < c.tools.size(); ++i) {
    const ToolDefinition& t = c.tools[i];
    const std::string param = absl::StrCat("tools[", i, "]");
    if (t.name.empty() || !IsValidUtf8(t.name) || !IsValidUtf8(t.description)) {
      return MakeProtocolError(ProtocolError::kInvalidTool, param,
                               "tool name must be a non-empty UTF-8 string");
    }
    if (!names.insert(t.name).second) {
      return MakeProtocolError(ProtocolError::kInvalidTool, param,
                               absl::StrCat("duplicate tool name '", t.name, "'"));
    }
    if (!t.parameters.is_object()) {
      return MakeProtocolError(ProtocolError::kInvalidTool, param + ".parameters",
                               "tool parameters must be a JSON object");
    }
    if (t.parameters.Depth() > 128) {
      return MakeProtocolError(ProtocolError::kInvalidTool, param + ".parameters",
                               "tool parameters nest deeper than 128 levels");
    }
  }
  // Tool choice.
  const ToolChoice& tc = c.tool_choice;
  if (tc.mode == ToolChoice::Mode::kRequired || tc.mode == ToolChoice::Mode::kNamed) {
    if (c.tools.empty()) {
      return MakeProtocolError(ProtocolError::kInvalidToolChoice, "tool_choice",
                               "tool_choice requires tools to be specified");
    }
    if (tc.mode == ToolChoice::Mode::kNamed && !names.contains(tc.name)) {
      return MakeProtocolError(
          ProtocolError::kInvalidToolChoice, "tool_choice",
          absl::StrCat("tool_choice names function '", tc.name, "', which is not in tools"));
    }
  }
  if (c.response_format.has_value() && c.response_format->format.Depth() > 128) {
    return MakeProtocolError(ProtocolError::kInvalidContent, "response_format",
                             "response_format nests deeper than 128 levels");
  }
  // Messages.
  const int n = static_cast<int>(c.messages.size());
  for (int i = 0; i < n; ++i) {
    const Message& m = c.messages[i];
    const bool user_like = m.role == Role::kUser || m.role == Role::kTool;
    RETURN_IF_ERROR(CheckPartsText(m.content, o.family, Param(c, i, ".content"), user_like));
    if (m.reasoning_content.has_value() && o.family == ModelFamily::kDeepSeekV41 &&
        ContainsImagePlaceholder(*m.reasoning_content)) {
      return MakeProtocolError(
          ProtocolError::kImagePlaceholderInText, Param(c, i, ".reasoning_content"),
          absl::StrCat("reasoning_content contains image special token '", AbslView(kImage), "'"));
    }
    if (m.role != Role::kUser && m.role != Role::kTool) {
      for (const ContentPart& p : m.content) {
        if (p.kind == ContentPart::Kind::kToolResult) {
          return MakeProtocolError(ProtocolError::kInvalidContent, Param(c, i, ".content"),
                                   "tool_result blocks are only allowed in user messages");
        }
      }
    }
    if (m.role == Role::kDeveloper && m.JoinedText().empty()) {
      return MakeProtocolError(ProtocolError::kInvalidContent, Param(c, i, ".content"),
                               "developer message content must not be empty");
    }
    if (m.role != Role::kAssistant && (!m.tool_calls.empty() || m.prefix)) {
      return MakeProtocolError(ProtocolError::kInvalidContent, Param(c, i),
                               "only assistant messages may carry tool_calls or prefix");
    }
    if (m.prefix && (i != n - 1 || !m.tool_calls.empty())) {
      return MakeProtocolError(ProtocolError::kInvalidPrefix, Param(c, i, ".prefix"),
                               "a prefix assistant message must be the last message and must not "
                               "carry tool_calls");
    }
    if (m.role == Role::kAssistant && i == n - 1 && !m.tool_calls.empty()) {
      return MakeProtocolError(ProtocolError::kInvalidContent, Param(c, i, ".tool_calls"),
                               "the last message cannot be an assistant tool call without its "
                               "tool results");
    }
    for (size_t k = 0; k < m.tool_calls.size(); ++k) {
      const ToolCall& call = m.tool_calls[k];
      const std::string param = Param(c, i, absl::StrCat(".tool_calls[", k, "]"));
      if (call.name.empty() || !IsValidUtf8(call.name)) {
        return MakeProtocolError(ProtocolError::kInvalidToolArguments, param + ".function.name",
                                 "tool call function.name must be a non-empty string");
      }
      if (!call.arguments.is_object()) {
        return MakeProtocolError(ProtocolError::kInvalidToolArguments,
                                 param + ".function.arguments", kMsgToolArgumentsNotObject);
      }
    }
    if (m.role == Role::kTool) {
      int j = i - 1;
      while (j >= 0 && c.messages[j].role == Role::kTool) --j;
      if (j < 0 || c.messages[j].role != Role::kAssistant || c.messages[j].tool_calls.empty()) {
        return MakeProtocolError(ProtocolError::kToolMessageWithoutCall, Param(c, i, ".role"),
                                 "Messages with role 'tool' must be a response to a preceding "
                                 "message with 'tool_calls'");
      }
    }
  }
  return absl::OkStatus();
}

// Rendered effort prefix for message 0 (thinking mode only).
std::string EffortPrefix(const EncodeOptions& o) {
  if (!o.thinking) return "";
  const ReasoningEffort& e = o.effort;
  if (o.family == ModelFamily::kDeepSeekV4) {
    return e.kind == ReasoningEffort::Kind::kMax ? std::string(kEffortMaxV4) : "";
  }
  // V4.1 mapping of the checkpoint's encoder (spec §1.5): low 50, high 75, max 100, default 75.
  int budget = 75;
  switch (e.kind) {
    case ReasoningEffort::Kind::kDefault:
    case ReasoningEffort::Kind::kHigh:
      budget = 75;
      break;
    case ReasoningEffort::Kind::kLow:
      budget = 50;
      break;
    case ReasoningEffort::Kind::kMax:
      budget = 100;
      break;
    case ReasoningEffort::Kind::kNumeric:
      budget = e.value;
      break;
  }
  return absl::StrCat("Reasoning Effort: ", budget,
                      " (range 1-100, the higher the value, the more thorough the reasoning)\n\n");
}

void RenderToolResultContent(const std::vector<ContentPart>& parts, PieceBuilder* b) {
  bool first = true;
  for (const ContentPart& p : parts) {
    if (!first) b->Text("\n\n");
    first = false;
    switch (p.kind) {
      case ContentPart::Kind::kText:
        b->Text(p.text);
        break;
      case ContentPart::Kind::kImage:
        b->Special(kImage);
        break;
      case ContentPart::Kind::kOther:
        b->Text(absl::StrCat("[Unsupported ", p.text, "]"));
        break;
      case ContentPart::Kind::kToolResult:  // nested tool results are not meaningful
        b->Text("[Unsupported tool_result]");
        break;
    }
  }
}

}  // namespace

absl::StatusOr<ModelFamily> ModelFamilyFromModelType(std::string_view model_type) {
  if (model_type == "deepseek_v4") return ModelFamily::kDeepSeekV4;
  if (model_type == "deepseek_v41" || model_type == "deepseek_v41_text") {
    return ModelFamily::kDeepSeekV41;
  }
  return absl::UnimplementedError(
      absl::StrCat("no DeepSeek prompt encoder for model_type '", AbslView(model_type), "'"));
}

absl::StatusOr<ReasoningEffort> ReasoningEffort::Parse(std::string_view name) {
  if (name == "low" || name == "minimal") return ReasoningEffort{Kind::kLow, 0};
  if (name == "high" || name == "medium" || name == "xhigh") {
    return ReasoningEffort{Kind::kHigh, 0};
  }
  if (name == "max" || name == "ultra") return ReasoningEffort{Kind::kMax, 0};
  return MakeProtocolError(
      ProtocolError::kInvalidReasoningEffort, "reasoning_effort",
      absl::StrCat("Invalid reasoning_effort '", AbslView(name),
                   "': expected low, high or max (or the aliases minimal, medium, xhigh, ultra)"));
}

std::string EncodedPrompt::Text() const {
  std::string s;
  for (const PromptPiece& p : pieces) s += p.text;
  return s;
}

absl::StatusOr<EncodedPrompt> EncodePrompt(const Conversation& c, const EncodeOptions& o) {
  RETURN_IF_ERROR(Validate(c, o));
  const bool v41 = o.family == ModelFamily::kDeepSeekV41;
  const DsmlNames names = Names(o.family);

  // --- Normalise: leading systems, later systems, tool/user merging. ---
  std::vector<NMsg> msgs;
  const int n = static_cast<int>(c.messages.size());
  int i = 0;
  if (c.messages[0].role == Role::kSystem) {
    NMsg sys;
    sys.role = Role::kSystem;
    sys.source = 0;
    std::vector<std::string> texts;
    while (i < n && c.messages[i].role == Role::kSystem) {
      texts.push_back(c.messages[i].JoinedText());
      ++i;
    }
    for (size_t k = 0; k < texts.size(); ++k) {
      if (k > 0) sys.text += "\n\n";
      sys.text += texts[k];
    }
    msgs.push_back(std::move(sys));
  }
  for (; i < n; ++i) {
    const Message& m = c.messages[i];
    Role role = m.role;
    if (role == Role::kSystem && !v41) role = Role::kUser;  // V4 has no mid-conversation system
    if (role == Role::kUser || role == Role::kTool) {
      std::vector<ContentPart> blocks;
      if (role == Role::kTool) {
        blocks.push_back(ContentPart::ToolResult(m.tool_call_id, m.content));
      } else if (m.content.empty()) {
        blocks.push_back(ContentPart::Text(""));
      } else {
        blocks = m.content;
      }
      if (!msgs.empty() && msgs.back().role == Role::kUser) {
        for (ContentPart& p : blocks) msgs.back().blocks.push_back(std::move(p));
      } else {
        NMsg u;
        u.role = Role::kUser;
        u.source = i;
        u.blocks = std::move(blocks);
        msgs.push_back(std::move(u));
      }
      continue;
    }
    NMsg x;
    x.role = role;
    x.source = i;
    x.text = m.JoinedText();
    x.reasoning = m.reasoning_content;
    x.tool_calls = &m.tool_calls;
    x.prefix = m.prefix;
    msgs.push_back(std::move(x));
  }

  // --- Sort tool results by the call order of the preceding assistant (stable). ---
  {
    std::unordered_map<std::string, int> order;
    for (NMsg& m : msgs) {
      if (m.role == Role::kAssistant && m.tool_calls != nullptr && !m.tool_calls->empty()) {
        order.clear();
        for (int k = 0; k < static_cast<int>(m.tool_calls->size()); ++k) {
          const std::string& id = (*m.tool_calls)[k].id;
          if (!id.empty()) order[id] = k;  // as the reference's dict: a repeated id keeps the last
        }
      } else if (m.role == Role::kUser && !order.empty()) {
        std::vector<ContentPart> results;
        for (const ContentPart& p : m.blocks) {
          if (p.kind == ContentPart::Kind::kToolResult) results.push_back(p);
        }
        if (results.size() > 1) {
          auto key = [&](const ContentPart& p) {
            auto it = order.find(p.tool_use_id);
            return it == order.end() ? 0 : it->second;
          };
          std::stable_sort(
              results.begin(), results.end(),
              [&](const ContentPart& a, const ContentPart& b) { return key(a) < key(b); });
          size_t r = 0;
          for (ContentPart& p : m.blocks) {
            if (p.kind == ContentPart::Kind::kToolResult) p = results[r++];
          }
        }
      }
    }
  }

  // --- Attach tools / response format to the first system message. ---
  const bool render_tools = !c.tools.empty() && c.tool_choice.mode != ToolChoice::Mode::kNone;
  const bool render_rf = c.response_format.has_value();
  if (render_tools || render_rf) {
    if (msgs.empty() || msgs[0].role != Role::kSystem) {
      NMsg sys;
      sys.role = Role::kSystem;
      msgs.insert(msgs.begin(), std::move(sys));
    }
    msgs[0].tools = render_tools;
    msgs[0].response_format = render_rf;
  }

  auto last_user_index = [&](const std::vector<NMsg>& v) {
    for (int k = static_cast<int>(v.size()) - 1; k >= 0; --k) {
      const Role r = v[k].role;
      if (r == Role::kUser || r == Role::kDeveloper || (v41 && r == Role::kSystem && k > 0)) {
        return k;
      }
    }
    return -1;
  };

  // --- drop_thinking (off when tools are rendered). ---
  const bool drop = o.drop_thinking && !render_tools;
  if (o.thinking && drop) {
    const int last_user = last_user_index(msgs);
    std::vector<NMsg> kept;
    for (int k = 0; k < static_cast<int>(msgs.size()); ++k) {
      NMsg& m = msgs[k];
      if (m.role == Role::kUser || m.role == Role::kSystem || m.role == Role::kLatestReminder ||
          k >= last_user) {
        kept.push_back(std::move(m));
      } else if (m.role == Role::kAssistant) {
        m.reasoning.reset();  // not rendered: k < last_user below
        kept.push_back(std::move(m));
      }
      // developer messages before the last user message are dropped
    }
    msgs = std::move(kept);
  }

  // --- Render. ---
  const int count = static_cast<int>(msgs.size());
  const int last_user = last_user_index(msgs);
  PieceBuilder b;
  b.Special(kBos);
  const std::string effort = EffortPrefix(o);
  for (int k = 0; k < count; ++k) {
    const NMsg& m = msgs[k];
    if (k == 0) {
      if (v41 && (!effort.empty() || m.role == Role::kSystem)) b.Special(kSystem);
      b.Text(effort);
    }
    switch (m.role) {
      case Role::kSystem:
      case Role::kDeveloper: {
        if (m.role == Role::kSystem && k > 0) b.Special(kSystem);  // V4.1 only (V4 mapped away)
        if (m.role == Role::kDeveloper) b.Special(kUser);
        b.Text(m.text);
        if (m.tools) {
          b.Text("\n\n");
          b.Text(RenderToolsPrompt(c.tools, o.family));
        }
        if (m.response_format) {
          b.Text("\n\n");
          b.Text(kResponseFormatPrefix);
          b.Text(c.response_format->format.Dump());
        }
        break;
      }
      case Role::kUser: {
        b.Special(kUser);
        bool first = true;
        for (const ContentPart& p : m.blocks) {
          if (!first) b.Text("\n\n");
          first = false;
          switch (p.kind) {
            case ContentPart::Kind::kText:
              b.Text(p.text);
              break;
            case ContentPart::Kind::kImage:
              b.Special(kImage);
              break;
            case ContentPart::Kind::kOther:
              b.Text(absl::StrCat("[Unsupported ", p.text, "]"));
              break;
            case ContentPart::Kind::kToolResult:
              b.Text("<tool_result>");
              RenderToolResultContent(p.content, &b);
              b.Text("</tool_result>");
              break;
          }
        }
        break;
      }
      case Role::kLatestReminder:
        b.Special(kLatestReminder);
        b.Text(m.text);
        break;
      case Role::kAssistant: {
        if (o.thinking && (!drop || k > last_user)) {
          const bool has_calls = m.tool_calls != nullptr && !m.tool_calls->empty();
          if (has_calls && !m.reasoning.has_value()) {
            return MakeProtocolError(ProtocolError::kMissingReasoningContent,
                                     Param(c, m.source, ".reasoning_content"),
                                     kMsgMissingReasoningContent);
          }
          b.Text(m.reasoning.value_or(""));
          b.Special(kThinkEnd);
        }
        b.Text(m.text);
        if (m.tool_calls != nullptr && !m.tool_calls->empty()) {
          b.Text("\n\n<");
          b.Special(kDsml);
          b.Text(absl::StrCat(AbslView(names.block), ">\n"));
          for (size_t t = 0; t < m.tool_calls->size(); ++t) {
            const ToolCall& call = (*m.tool_calls)[t];
            if (t > 0) b.Text("\n");
            b.Text("<");
            b.Special(kDsml);
            b.Text(absl::StrCat(AbslView(names.invoke), " name=\"", call.name, "\">\n"));
            const auto& args = call.arguments.object_members();
            for (size_t a = 0; a < args.size(); ++a) {
              if (a > 0) b.Text("\n");
              const bool is_str = args[a].second.is_string();
              b.Text("<");
              b.Special(kDsml);
              b.Text(absl::StrCat(AbslView(names.parameter), " name=\"", args[a].first,
                                  "\" string=\"", is_str ? "true" : "false", "\">"));
              b.Text(is_str ? args[a].second.string_value() : args[a].second.Dump());
              b.Text("</");
              b.Special(kDsml);
              b.Text(absl::StrCat(AbslView(names.parameter), ">"));
            }
            b.Text("\n</");
            b.Special(kDsml);
            b.Text(absl::StrCat(AbslView(names.invoke), ">"));
          }
          b.Text("\n</");
          b.Special(kDsml);
          b.Text(absl::StrCat(AbslView(names.block), ">"));
        }
        if (!m.prefix) b.Special(kEos);
        break;
      }
      case Role::kTool:  // merged into user above
        break;
    }
    // Generation header.
    if (k + 1 < count && msgs[k + 1].role != Role::kAssistant &&
        msgs[k + 1].role != Role::kLatestReminder) {
      continue;
    }
    if (m.role == Role::kUser || m.role == Role::kDeveloper ||
        (v41 && m.role == Role::kSystem && k > 0)) {
      b.Special(kAssistant);
      const bool open = o.thinking && (!drop || k >= last_user);
      b.Special(open ? kThinkBegin : kThinkEnd);
    }
  }

  EncodedPrompt out;
  const bool ends_open = b.EndsWith(kThinkBegin);
  const bool ends_header = ends_open || b.EndsWith(kThinkEnd);
  out.start = ends_open ? ParserStart::kReasoning : ParserStart::kAnswer;
  if (ends_header && !ends_open && c.tool_choice.mode != ToolChoice::Mode::kAuto &&
      c.tool_choice.mode != ToolChoice::Mode::kNone) {
    // Chat mode: prefill the block opener (and the named invoke). In thinking mode the prompt
    // ends with `<think>` and nothing is prefilled: the model reasons first and the API layer's
    // grammar forces the block after `</think>` (docs/structured-output.md).
    b.Text("\n\n<");
    b.Special(kDsml);
    b.Text(absl::StrCat(AbslView(names.block), ">\n"));
    out.start = ParserStart::kToolCalls;
    if (c.tool_choice.mode == ToolChoice::Mode::kNamed) {
      b.Text("<");
      b.Special(kDsml);
      b.Text(absl::StrCat(AbslView(names.invoke), " name=\"", c.tool_choice.name, "\">\n"));
      out.start = ParserStart::kToolArguments;
      out.forced_tool_name = c.tool_choice.name;
    }
  }
  out.pieces = b.Take();
  return out;
}

}  // namespace deepinfer::protocol
