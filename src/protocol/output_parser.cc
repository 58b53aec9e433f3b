// Streaming output state machine (see output_parser.h; shared/spec/protocol.md §2.3).
//
// Why the text matching is simple: `｜DSML｜` is recognised by token id, so every DSML tag is
// anchored right after a marker. The ordinary-text part of a tag (`tool_calls>`,
// `invoke name="`, `parameter name="K" string="true">`, closers) is matched as an anchored prefix
// of a small set of patterns, byte by byte (a KMP automaton whose failure links all lead to the
// start); a chunk may end anywhere inside it. Outside tags, the only text that can belong to a
// delimiter is the `<` / `</` (and, before a block or `</think>`, newlines) immediately preceding a
// marker, so exactly that tail is held back — a live partial match — and released as soon as the
// next byte is not a marker.
#include "protocol/output_parser.h"

#include <random>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/strings.h"

namespace deepinfer::protocol {

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kStopSequence:
      return "stop_sequence";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kToolCalls:
      return "tool_calls";
    case FinishReason::kToolCallError:
      return "tool_call_error";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

namespace {

using Type = OutputEvent::Type;

enum class Stage { kReasoning, kAnswer, kTool, kDone };

// Where we are inside DSML markup.
enum class Ctx {
  kOutside,     // entered from reasoning/answer: expecting a block opener (or a bare invoke)
  kBlock,       // inside a block, between invokes
  kInvoke,      // inside an invoke, between parameters
  kValue,       // inside a parameter value
  kAfterBlock,  // after a block closer: only EOS (or another block) is expected
};

// Where text bytes go in the tool stage.
enum class Sub {
  kBetween,     // ctx kBlock / kInvoke / kAfterBlock / kOutside: whitespace, `<`, `</`, junk
  kTag,         // right after a DSML marker: the tag text
  kToolName,    // after `invoke name="`: the name up to `"`
  kAfterName,   // after the name's `"`: up to `>`
  kParamName,   // after `parameter name="`: the key up to `"`
  kParamAttrs,  // after the key's `"`: ` string="true|false"` up to `>`
  kValue,       // the value up to the next DSML marker
};

enum class TagKind { kBlock, kInvokeOpen, kParamOpen, kInvokeClose, kParamClose };

struct TagPattern {
  std::string_view text;
  TagKind kind;
};

// Accepted tag texts after `｜DSML｜` (V4 and V4.1 spellings; near-miss wrappers of vLLM #51914
// and the V3.2 block name).
constexpr TagPattern kTagPatterns[] = {
    {"tool_calls>", TagKind::kBlock},
    {" calls>", TagKind::kBlock},
    {"toolcalls>", TagKind::kBlock},
    {"function_calls>", TagKind::kBlock},
    {"invoke name=\"", TagKind::kInvokeOpen},
    {" invoke name=\"", TagKind::kInvokeOpen},
    {"parameter name=\"", TagKind::kParamOpen},
    {" parameter name=\"", TagKind::kParamOpen},
    {"invoke>", TagKind::kInvokeClose},
    {" invoke>", TagKind::kInvokeClose},
    {"parameter>", TagKind::kParamClose},
    {" parameter>", TagKind::kParamClose},
};

// Names, keys and attribute text longer than this are malformed (bounds the held bytes).
constexpr size_t kMaxNameBytes = 4096;
constexpr size_t kMaxAttrBytes = 64;

std::string DefaultToolCallId() {
  static constexpr char kAlnum[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id.push_back(kAlnum[rng() % 62]);
  return id;
}

}  // namespace

struct OutputStateMachine::State {
  OutputParserOptions opt;
  std::vector<OutputEvent>* out = nullptr;

  Stage stage = Stage::kAnswer;
  bool at_start = true;  // leading newlines of the current reasoning/answer are dropped
  std::string held;      // reasoning/answer: trailing "\n*<?"; tool stage: trailing "<" / "</"

  // Stop strings (answer stage).
  std::vector<std::string> stops;
  std::string stop_pending;
  bool stops_armed = true;  // false until min_tokens ids were fed
  int ended_calls = 0;      // announced calls that have ended (max_tool_calls)

  // Tool stage.
  Ctx ctx = Ctx::kOutside;
  Sub sub = Sub::kBetween;
  bool closing = false;  // the tag began with `</`
  std::string tag;       // kTag: bytes after the marker; kParamAttrs: attribute bytes
  std::string name;      // kToolName / kParamName accumulator
  int tool_count = 0;    // calls announced so far (next index)
  int valid_calls = 0;
  bool call_open = false;     // an invoke is open
  bool call_skipped = false;  // the open invoke is not announced (undeclared name)
  bool call_valid = true;
  std::string call_error;
  int call_index = -1;
  int param_count = 0;
  absl::flat_hash_set<std::string> keys;
  bool value_is_string = false;
  std::string raw_value;  // string="false" value, validated at its closer
  bool pending_forced_start = false;
  std::string error;  // first DSML error of the stream
  bool finished = false;

  // ---- emission ----
  void Emit(Type type, std::string_view text, int index = -1) {
    if (text.empty()) return;
    if (!out->empty()) {
      OutputEvent& last = out->back();
      if (last.type == type && last.tool_index == index &&
          (type == Type::kReasoningDelta || type == Type::kContentDelta ||
           type == Type::kToolCallArguments)) {
        last.text.append(text);
        return;
      }
    }
    OutputEvent e;
    e.type = type;
    e.text = std::string(text);
    e.tool_index = index;
    out->push_back(std::move(e));
  }
  void Args(std::string_view text) {
    if (!call_skipped) Emit(Type::kToolCallArguments, text, call_index);
  }
  void SetError(std::string msg) {
    if (error.empty()) error = std::move(msg);
  }

  // ---- answer text through the stop-string filter ----
  // Returns false once a stop string matched (the stream is finished).
  bool Content(std::string_view text, bool final) {
    if (stops.empty()) {
      Emit(Type::kContentDelta, text);
      return true;
    }
    stop_pending.append(text);
    // Earliest complete match.
    size_t best = std::string::npos;
    const std::string* best_stop = nullptr;
    for (const std::string& s : stops) {
      if (!stops_armed) break;  // min_tokens not reached: a complete match is plain text
      const size_t p = stop_pending.find(s);
      // At equal positions the shorter match wins: it completes first when streaming.
      if (p != std::string::npos && (p < best || (p == best && s.size() < best_stop->size()))) {
        best = p;
        best_stop = &s;
      }
    }
    // Earliest position whose suffix is a proper prefix of some stop string (a live partial
    // match that more text could complete).
    size_t live = stop_pending.size();
    if (!final) {
      for (size_t q = 0; q < stop_pending.size() && q < live; ++q) {
        const std::string_view tail = std::string_view(stop_pending).substr(q);
        for (const std::string& s : stops) {
          if (s.size() > tail.size() && std::string_view(s).substr(0, tail.size()) == tail) {
            live = q;
            break;
          }
        }
      }
    }
    if (best_stop != nullptr && best <= live) {
      // No earlier partial match can still win: the stop string ends the stream here.
      Emit(Type::kContentDelta, std::string_view(stop_pending).substr(0, best));
      const std::string matched = *best_stop;
      stop_pending.clear();
      FinishWith(FinishReason::kStopSequence, matched);
      return false;
    }
    const size_t emit = best_stop != nullptr ? std::min(best, live) : live;
    Emit(Type::kContentDelta, std::string_view(stop_pending).substr(0, emit));
    stop_pending.erase(0, emit);
    return true;
  }

  // ---- finishing ----
  void FinishWith(FinishReason reason, std::string stop_sequence = {}) {
    OutputEvent e;
    e.type = Type::kFinish;
    e.finish_reason = reason;
    e.stop_sequence = std::move(stop_sequence);
    if (reason == FinishReason::kToolCallError) e.error = error;
    out->push_back(std::move(e));
    stage = Stage::kDone;
    finished = true;
  }

  // ---- tool calls ----
  void StartCall(std::string call_name) {
    call_open = true;
    call_valid = true;
    call_error.clear();
    param_count = 0;
    keys.clear();
    call_skipped = false;
    if (call_name.empty()) {
      call_skipped = true;
      SetError("tool call with an empty name");
      return;
    }
    if (opt.declared_tools.has_value()) {
      bool found = false;
      for (const std::string& t : *opt.declared_tools) found = found || t == call_name;
      if (!found) {
        call_skipped = true;
        SetError(absl::StrCat("call to undeclared tool '", call_name, "'"));
        return;
      }
    }
    call_index = tool_count++;
    OutputEvent e;
    e.type = Type::kToolCallStart;
    e.tool_index = call_index;
    e.tool_name = std::move(call_name);
    e.tool_call_id =
        opt.make_tool_call_id ? opt.make_tool_call_id(call_index) : DefaultToolCallId();
    out->push_back(std::move(e));
  }

  void BreakCall(std::string why) {
    if (call_valid) {
      call_valid = false;
      call_error = why;
    }
    SetError(std::move(why));
  }

  // Ends the open parameter value (closer seen or implied).
  void CloseParam() {
    if (value_is_string) {
      Args("\"");
    } else if (!call_skipped) {
      if (!PyJson::Parse(raw_value).ok()) {
        BreakCall(absl::StrCat("parameter '", name, "': string=\"false\" value is not valid JSON"));
      }
    }
    raw_value.clear();
    ctx = Ctx::kInvoke;
  }

  // Ends the open invoke; `complete` false when the stream ended inside it.
  void CloseCall(bool complete, std::string_view why = {}) {
    if (!call_open) return;
    if (ctx == Ctx::kValue) {
      if (complete) {
        CloseParam();
      } else {
        raw_value.clear();
      }
    }
    if (!complete) BreakCall(std::string(why));
    if (complete) Args(param_count == 0 ? "{}" : "}");
    if (!call_skipped) {
      OutputEvent e;
      e.type = Type::kToolCallEnd;
      e.tool_index = call_index;
      e.valid = call_valid;
      e.error = call_valid ? "" : call_error;
      out->push_back(std::move(e));
      if (call_valid) ++valid_calls;
      ++ended_calls;
    }
    call_open = false;
    call_skipped = false;
    ctx = Ctx::kBlock;
    if (complete && opt.max_tool_calls > 0 && ended_calls >= opt.max_tool_calls) {
      // parallel_tool_calls false: the stream ends with this call (the rest is never parsed).
      FinishWith(!error.empty()    ? FinishReason::kToolCallError
                 : valid_calls > 0 ? FinishReason::kToolCalls
                                   : FinishReason::kStop);
    }
  }

  void EnterToolStage(Ctx c) {
    stage = Stage::kTool;
    ctx = c;
    sub = Sub::kBetween;
    held.clear();
  }

  // A complete tag was recognised.
  void OnTag(TagKind kind) {
    switch (kind) {
      case TagKind::kBlock:
        if (!closing && (ctx == Ctx::kInvoke || ctx == Ctx::kValue)) {
          BreakCall("DSML block opener inside an invoke");
          ctx = Ctx::kInvoke;
        } else if (ctx == Ctx::kOutside || ctx == Ctx::kAfterBlock) {
          ctx = Ctx::kBlock;  // (a `</…>` here is a stray closer; treated as an opener)
        } else if (closing) {
          if (call_open) CloseCall(true);  // missing invoke closer repaired
          ctx = Ctx::kAfterBlock;
        }
        // A repeated opener inside a block is ignored.
        sub = Sub::kBetween;
        return;
      case TagKind::kInvokeOpen:
        if (call_open) CloseCall(true);  // missing invoke closer repaired
        if (ctx == Ctx::kOutside || ctx == Ctx::kAfterBlock) ctx = Ctx::kBlock;  // bare invoke
        name.clear();
        sub = Sub::kToolName;
        return;
      case TagKind::kParamOpen:
        if (!call_open) {
          SetError("DSML parameter outside an invoke");
          sub = Sub::kBetween;
          ctx = Ctx::kBlock;
          return;
        }
        if (ctx == Ctx::kValue) CloseParam();  // missing parameter closer (vLLM #54838)
        name.clear();
        sub = Sub::kParamName;
        return;
      case TagKind::kParamClose:
        if (ctx == Ctx::kValue) {
          CloseParam();
        } else {
          SetError("stray DSML parameter closer");
          if (call_open) BreakCall("stray DSML parameter closer");
        }
        sub = Sub::kBetween;
        return;
      case TagKind::kInvokeClose:
        if (call_open) {
          CloseCall(true);
        } else {
          SetError("stray DSML invoke closer");
        }
        sub = Sub::kBetween;
        return;
    }
  }

  void OnMalformedTag() {
    SetError(absl::StrCat("unrecognised DSML tag '", tag, "'"));
    if (call_open) {
      if (ctx == Ctx::kValue) ctx = Ctx::kInvoke;
      BreakCall(absl::StrCat("unrecognised DSML tag '", tag, "'"));
    }
    if (ctx == Ctx::kOutside || ctx == Ctx::kValue) ctx = call_open ? Ctx::kInvoke : Ctx::kBlock;
    sub = Sub::kBetween;
  }

  // Feeds tool-stage text.
  void ToolText(std::string_view t) {
    size_t i = 0;
    while (i < t.size() && !finished) {
      switch (sub) {
        case Sub::kBetween: {
          // Whitespace and junk are skipped; a trailing "<" or "</" is held for a marker.
          std::string s = held + std::string(t.substr(i));
          held.clear();
          size_t k = s.size();
          if (k >= 2 && s[k - 2] == '<' && s[k - 1] == '/') {
            held = "</";
          } else if (k >= 1 && s[k - 1] == '<') {
            held = "<";
          }
          return;
        }
        case Sub::kTag: {
          tag.push_back(t[i++]);
          const TagPattern* full = nullptr;
          bool prefix = false;
          for (const TagPattern& p : kTagPatterns) {
            if (p.text == tag) full = &p;
            if (p.text.size() > tag.size() && p.text.substr(0, tag.size()) == tag) prefix = true;
          }
          if (full != nullptr) {
            tag.clear();
            OnTag(full->kind);
          } else if (!prefix) {
            OnMalformedTag();
            tag.clear();
          }
          break;
        }
        case Sub::kToolName: {
          const size_t q = t.find('"', i);
          name.append(t.substr(i, q == t.npos ? t.npos : q - i));
          if (name.size() > kMaxNameBytes) {
            SetError("DSML tool name too long");
            name.clear();
            sub = Sub::kBetween;
            ctx = Ctx::kBlock;
            return;
          }
          if (q == t.npos) return;
          i = q + 1;
          StartCall(std::move(name));
          name.clear();
          ctx = Ctx::kInvoke;
          sub = Sub::kAfterName;
          break;
        }
        case Sub::kAfterName: {
          const size_t q = t.find('>', i);
          if (q == t.npos) return;
          i = q + 1;
          sub = Sub::kBetween;
          break;
        }
        case Sub::kParamName: {
          const size_t q = t.find('"', i);
          name.append(t.substr(i, q == t.npos ? t.npos : q - i));
          if (name.size() > kMaxNameBytes) {
            BreakCall("DSML parameter name too long");
            name.clear();
            sub = Sub::kBetween;
            return;
          }
          if (q == t.npos) return;
          i = q + 1;
          tag.clear();
          sub = Sub::kParamAttrs;
          break;
        }
        case Sub::kParamAttrs: {
          const size_t q = t.find('>', i);
          tag.append(t.substr(i, q == t.npos ? t.npos : q - i));
          if (tag.size() > kMaxAttrBytes) {
            BreakCall(absl::StrCat("parameter '", name, "': malformed attributes"));
            tag.clear();
            sub = Sub::kBetween;
            return;
          }
          if (q == t.npos) return;
          i = q + 1;
          const std::string_view a = tag;
          bool is_string;
          if (a == " string=\"true\"") {
            is_string = true;
          } else if (a == " string=\"false\"") {
            is_string = false;
          } else {
            BreakCall(absl::StrCat("parameter '", name, "': missing or malformed string=\"…\""));
            // Recovery: treat the value as a string so the stream stays parseable.
            is_string = true;
          }
          tag.clear();
          if (!keys.insert(name).second) {
            BreakCall(absl::StrCat("duplicate parameter '", name, "'"));
          }
          std::string frag = param_count == 0 ? "{" : ", ";
          AppendPyJsonString(name, &frag);
          frag += ": ";
          if (is_string) frag += "\"";
          Args(frag);
          ++param_count;
          value_is_string = is_string;
          raw_value.clear();
          ctx = Ctx::kValue;
          sub = Sub::kValue;
          break;
        }
        case Sub::kValue: {
          // Everything up to the next marker is value, except a trailing "<" / "</".
          std::string s = held + std::string(t.substr(i));
          held.clear();
          size_t k = s.size();
          if (k >= 2 && s[k - 2] == '<' && s[k - 1] == '/') {
            k -= 2;
          } else if (k >= 1 && s[k - 1] == '<') {
            k -= 1;
          }
          held = s.substr(k);
          ValueBytes(std::string_view(s).substr(0, k));
          return;
        }
      }
    }
  }

  void ValueBytes(std::string_view v) {
    if (v.empty()) return;
    if (value_is_string) {
      std::string esc;
      AppendPyJsonString(v, &esc);
      Args(std::string_view(esc).substr(1, esc.size() - 2));
    } else {
      raw_value.append(v);
      Args(v);
    }
  }

  // A DSML marker in the tool stage.
  void ToolDsml() {
    if (sub == Sub::kTag) {
      // A marker inside a tag: the tag was cut short.
      OnMalformedTag();
      tag.clear();
    } else if (sub != Sub::kBetween && sub != Sub::kValue) {
      // Inside a name or attributes: the tag was never closed.
      if (call_open || sub == Sub::kParamName || sub == Sub::kParamAttrs) {
        BreakCall("unterminated DSML tag");
      } else {
        SetError("unterminated DSML invoke name");
      }
      name.clear();
      tag.clear();
      if (ctx == Ctx::kOutside) ctx = Ctx::kBlock;
    }
    closing = held == "</";
    held.clear();
    tag.clear();
    sub = Sub::kTag;
  }

  void EndOfTool(StreamEnd end) {
    std::string why;
    switch (end) {
      case StreamEnd::kEndOfSequence:
        why = "the output ended inside a tool call";
        break;
      case StreamEnd::kLength:
        why = "the output was truncated inside a tool call";
        break;
      case StreamEnd::kCancelled:
        why = "the request was cancelled inside a tool call";
        break;
    }
    if (sub == Sub::kTag || sub == Sub::kToolName || sub == Sub::kAfterName ||
        sub == Sub::kParamName || sub == Sub::kParamAttrs) {
      // The stream ended inside a tag.
      SetError(why);
    }
    if (call_open) CloseCall(false, why);
    if (end == StreamEnd::kEndOfSequence && tool_count == 0 && error.empty()) {
      SetError("tool-call block without any call");
    }
  }

  // ---- reasoning / answer text ----
  // Splits `held + text` into the part to emit and the new held tail "\n*<?".
  std::string TakeSettled(std::string_view text) {
    std::string s = held + std::string(text);
    held.clear();
    if (at_start) {
      size_t k = 0;
      while (k < s.size() && s[k] == '\n') ++k;
      s.erase(0, k);
      if (s.empty()) return s;
      at_start = false;
    }
    size_t k = s.size();
    if (k > 0 && s[k - 1] == '<') --k;
    while (k > 0 && s[k - 1] == '\n') --k;
    held = s.substr(k);
    s.resize(k);
    return s;
  }

  void Text(std::string_view text) {
    switch (stage) {
      case Stage::kReasoning:
        Emit(Type::kReasoningDelta, TakeSettled(text));
        return;
      case Stage::kAnswer:
        Content(TakeSettled(text), false);
        return;
      case Stage::kTool:
        ToolText(text);
        return;
      case Stage::kDone:
        return;
    }
  }

  // Ends answer text (DSML, EOS or Finish): held text is flushed, stop strings resolved.
  // Returns false when a stop string finished the stream.
  bool FlushAnswer(bool keep_held) {
    std::string h = keep_held ? std::move(held) : std::string();
    held.clear();
    return Content(h, true);
  }

  void Marker(OutputStateMachine::Marker m) {
    using M = OutputStateMachine::Marker;
    switch (stage) {
      case Stage::kReasoning:
        if (m == M::kThinkEnd) {
          // Newlines right before </think> are dropped; a held '<' is literal text.
          if (!held.empty() && held.back() == '<') Emit(Type::kReasoningDelta, held);
          held.clear();
          stage = Stage::kAnswer;
          at_start = true;
        } else if (m == M::kDsml) {
          // DSML ends reasoning without </think> (spec §5 case 17b).
          EnterToolStage(Ctx::kOutside);
          closing = false;
          sub = Sub::kTag;
        } else if (m == M::kEos) {
          Emit(Type::kReasoningDelta, held);
          held.clear();
          Finish(StreamEnd::kEndOfSequence);
        }
        // <think> inside reasoning carries nothing.
        return;
      case Stage::kAnswer:
        if (m == M::kDsml) {
          if (!FlushAnswer(false)) return;
          EnterToolStage(Ctx::kOutside);
          closing = false;
          sub = Sub::kTag;
        } else if (m == M::kEos) {
          Finish(StreamEnd::kEndOfSequence);
        }
        // Stray <think> / </think> in the answer are dropped (spec §5 case 18).
        return;
      case Stage::kTool:
        if (m == M::kDsml) {
          ToolDsml();
        } else if (m == M::kEos) {
          Finish(StreamEnd::kEndOfSequence);
        }
        // Think tokens inside DSML carry no text and change nothing.
        return;
      case Stage::kDone:
        return;
    }
  }

  void Finish(StreamEnd end) {
    if (finished) return;
    if (pending_forced_start) StartForced();
    switch (stage) {
      case Stage::kReasoning:
        Emit(Type::kReasoningDelta, held);
        held.clear();
        break;
      case Stage::kAnswer:
        if (!FlushAnswer(true)) return;
        break;
      case Stage::kTool:
        EndOfTool(end);
        break;
      case Stage::kDone:
        return;
    }
    FinishReason reason;
    if (end == StreamEnd::kLength) {
      reason = FinishReason::kLength;
    } else if (end == StreamEnd::kCancelled) {
      reason = FinishReason::kCancelled;
    } else if (!error.empty()) {
      reason = FinishReason::kToolCallError;
    } else if (valid_calls > 0) {
      reason = FinishReason::kToolCalls;
    } else {
      reason = FinishReason::kStop;
    }
    FinishWith(reason);
    if (reason != FinishReason::kToolCallError && !error.empty()) out->back().error = error;
  }

  void StartForced() {
    pending_forced_start = false;
    StartCall(opt.forced_tool_name);
    ctx = Ctx::kInvoke;
    sub = Sub::kBetween;
  }
};

OutputStateMachine::OutputStateMachine(OutputParserOptions options)
    : s_(std::make_unique<State>()) {
  s_->opt = std::move(options);
  for (const std::string& st : s_->opt.stop) {
    if (!st.empty()) s_->stops.push_back(st);
  }
  switch (s_->opt.start) {
    case ParserStart::kReasoning:
      s_->stage = Stage::kReasoning;
      break;
    case ParserStart::kAnswer:
      s_->stage = Stage::kAnswer;
      break;
    case ParserStart::kToolCalls:
      s_->EnterToolStage(Ctx::kBlock);
      break;
    case ParserStart::kToolArguments:
      s_->EnterToolStage(Ctx::kInvoke);
      s_->pending_forced_start = true;
      break;
  }
}

OutputStateMachine::~OutputStateMachine() = default;

void OutputStateMachine::FeedText(std::string_view text, std::vector<OutputEvent>* out) {
  if (s_->finished || text.empty()) return;
  s_->out = out;
  if (s_->pending_forced_start) s_->StartForced();
  s_->Text(text);
}

void OutputStateMachine::FeedMarker(Marker marker, std::vector<OutputEvent>* out) {
  if (s_->finished) return;
  s_->out = out;
  if (s_->pending_forced_start) s_->StartForced();
  s_->Marker(marker);
}

void OutputStateMachine::Finish(StreamEnd end, std::vector<OutputEvent>* out) {
  if (s_->finished) return;
  s_->out = out;
  s_->Finish(end);
}

bool OutputStateMachine::finished() const { return s_->finished; }

void OutputStateMachine::SetStopsArmed(bool armed) { s_->stops_armed = armed; }

// ---------------------------------------------------------------------------------------------

ParsedOutput Aggregate(std::span<const OutputEvent> events) {
  ParsedOutput p;
  for (const OutputEvent& e : events) {
    switch (e.type) {
      case Type::kReasoningDelta:
        p.reasoning += e.text;
        break;
      case Type::kContentDelta:
        p.content += e.text;
        break;
      case Type::kToolCallStart:
        if (e.tool_index >= static_cast<int>(p.tool_calls.size())) {
          p.tool_calls.resize(e.tool_index + 1);
        }
        p.tool_calls[e.tool_index].id = e.tool_call_id;
        p.tool_calls[e.tool_index].name = e.tool_name;
        break;
      case Type::kToolCallArguments:
        if (e.tool_index >= 0 && e.tool_index < static_cast<int>(p.tool_calls.size())) {
          p.tool_calls[e.tool_index].arguments += e.text;
        }
        break;
      case Type::kToolCallEnd:
        if (e.tool_index >= 0 && e.tool_index < static_cast<int>(p.tool_calls.size())) {
          p.tool_calls[e.tool_index].valid = e.valid;
          p.tool_calls[e.tool_index].error = e.error;
        }
        break;
      case Type::kFinish:
        p.finish_reason = e.finish_reason;
        p.stop_sequence = e.stop_sequence;
        p.error = e.error;
        break;
    }
  }
  return p;
}

std::vector<OutputEvent> CoalesceEvents(std::span<const OutputEvent> events) {
  std::vector<OutputEvent> out;
  for (const OutputEvent& e : events) {
    const bool mergeable = e.type == Type::kReasoningDelta || e.type == Type::kContentDelta ||
                           e.type == Type::kToolCallArguments;
    if (mergeable && e.text.empty()) continue;
    if (mergeable && !out.empty() && out.back().type == e.type &&
        out.back().tool_index == e.tool_index) {
      out.back().text += e.text;
      continue;
    }
    out.push_back(e);
  }
  return out;
}

}  // namespace deepinfer::protocol
