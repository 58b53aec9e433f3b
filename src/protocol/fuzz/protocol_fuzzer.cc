// libFuzzer target over the output parser and the encoder's JSON input (issue #8).
// Built only by scripts/fuzz-protocol.sh (clang, -fsanitize=fuzzer,address,undefined); never part
// of the default gcc build.
//
// The first input byte picks the mode:
//   even: output state machine. The rest is a stream of operations: bytes 0xF0..0xF3 are the
//         markers </think>, <think>, ｜DSML｜, EOS; 0xF4 is a chunk boundary; everything else is
//         text. Checks: no crash/hang; exactly one finish event, last; and split invariance — the
//         same stream fed whole and cut at the boundaries yields identical coalesced events.
//   odd:  encoder JSON input. The rest is a JSON document shaped like a Chat Completions request
//         (messages, tools, tool_choice, response_format, thinking, effort). Checks: PyJson
//         round-trips (Dump(Parse(Dump(x))) == Dump(x)), EncodePrompt never crashes, the prompt
//         has no two adjacent text pieces, and re-encoding is deterministic.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "protocol/output_parser.h"
#include "protocol/prompt_encoder.h"

namespace dp = deepinfer::protocol;

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    __builtin_printf("protocol_fuzzer invariant failed: %s\n", what);
    std::abort();
  }
}

struct Op {
  int marker = -1;  // -1 = text
  std::string text;
  bool boundary = false;
};

std::vector<dp::OutputEvent> RunMachine(const std::vector<Op>& ops, bool use_boundaries,
                                        const dp::OutputParserOptions& opt, dp::StreamEnd end) {
  dp::OutputStateMachine m(opt);
  std::vector<dp::OutputEvent> out;
  std::string text;
  for (const Op& op : ops) {
    if (op.boundary) {
      if (use_boundaries) {
        m.FeedText(text, &out);
        text.clear();
      }
      continue;
    }
    if (op.marker >= 0) {
      m.FeedText(text, &out);
      text.clear();
      m.FeedMarker(static_cast<dp::OutputStateMachine::Marker>(op.marker), &out);
    } else {
      text += op.text;
    }
  }
  m.FeedText(text, &out);
  m.Finish(end, &out);
  return out;
}

void FuzzParser(const uint8_t* data, size_t size) {
  if (size < 2) return;
  dp::OutputParserOptions opt;
  opt.start = static_cast<dp::ParserStart>(data[0] % 4);
  opt.forced_tool_name = "f";
  const dp::StreamEnd end = static_cast<dp::StreamEnd>(data[1] % 3);
  if (data[1] & 0x10) opt.stop = {"END", "\n\n", "<｜"};
  if (data[1] & 0x20) opt.declared_tools = std::vector<std::string>{"f", "get_weather"};
  opt.make_tool_call_id = [](int i) { return std::to_string(i); };
  std::vector<Op> ops;
  for (size_t i = 2; i < size; ++i) {
    const uint8_t b = data[i];
    if (b >= 0xF0 && b <= 0xF3) {
      ops.push_back(Op{b - 0xF0, {}, false});
    } else if (b == 0xF4) {
      ops.push_back(Op{-1, {}, true});
    } else {
      if (ops.empty() || ops.back().marker >= 0 || ops.back().boundary) ops.push_back(Op{});
      ops.back().text.push_back(static_cast<char>(b));
    }
  }
  const std::vector<dp::OutputEvent> whole = dp::CoalesceEvents(RunMachine(ops, false, opt, end));
  const std::vector<dp::OutputEvent> split = dp::CoalesceEvents(RunMachine(ops, true, opt, end));
  int finishes = 0;
  for (const dp::OutputEvent& e : whole) finishes += e.type == dp::OutputEvent::Type::kFinish;
  Check(finishes == 1, "exactly one finish event");
  Check(whole.back().type == dp::OutputEvent::Type::kFinish, "finish is last");
  // Split invariance holds for chunk boundaries between code points (the detokenizer never cuts
  // inside one); arbitrary byte cuts of invalid UTF-8 are only checked for memory safety.
  bool utf8 = true;
  for (const Op& op : ops) utf8 = utf8 && dp::IsValidUtf8(op.text);
  if (utf8) Check(whole == split, "split invariance");
  (void)dp::Aggregate(whole);
}

void FuzzEncoder(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<dp::PyJson> doc = dp::PyJson::Parse(text);
  if (!doc.ok()) return;
  const std::string dumped = doc->Dump();
  absl::StatusOr<dp::PyJson> again = dp::PyJson::Parse(dumped);
  if (again.ok()) {
    Check(again->Dump() == dumped, "PyJson round trip");
  } else {
    // Like Python, an overflowing literal (1e400) dumps as Infinity, which strict JSON rejects.
    Check(dumped.find("Infinity") != std::string::npos, "Dump() output parses");
  }
  if (!doc->is_object()) return;

  dp::Conversation c;
  dp::EncodeOptions o;
  if (const dp::PyJson* m = doc->Find("messages"); m != nullptr && m->is_array()) {
    for (const dp::PyJson& jm : m->array_items()) {
      if (!jm.is_object()) continue;
      dp::Message msg;
      if (const dp::PyJson* r = jm.Find("role"); r != nullptr && r->is_string()) {
        absl::StatusOr<dp::Role> role = dp::ParseRole(r->string_value());
        if (role.ok()) msg.role = *role;
      }
      if (const dp::PyJson* ct = jm.Find("content"); ct != nullptr) {
        if (ct->is_string()) {
          msg.content.push_back(dp::ContentPart::Text(ct->string_value()));
        } else if (ct->is_array()) {
          for (const dp::PyJson& part : ct->array_items()) {
            if (part.is_string()) msg.content.push_back(dp::ContentPart::Text(part.string_value()));
            if (part.is_object()) msg.content.push_back(dp::ContentPart::Image("x"));
            if (part.is_array()) {
              msg.content.push_back(dp::ContentPart::ToolResult(
                  "t", {dp::ContentPart::Text("r"), dp::ContentPart::Other("audio")}));
            }
          }
        }
      }
      if (const dp::PyJson* rc = jm.Find("reasoning_content"); rc != nullptr && rc->is_string()) {
        msg.reasoning_content = rc->string_value();
      }
      if (const dp::PyJson* id = jm.Find("tool_call_id"); id != nullptr && id->is_string()) {
        msg.tool_call_id = id->string_value();
      }
      if (const dp::PyJson* p = jm.Find("prefix"); p != nullptr && p->is_bool()) {
        msg.prefix = p->bool_value();
      }
      if (const dp::PyJson* tcs = jm.Find("tool_calls"); tcs != nullptr && tcs->is_array()) {
        for (const dp::PyJson& tc : tcs->array_items()) {
          if (!tc.is_object()) continue;
          dp::ToolCall call;
          if (const dp::PyJson* id = tc.Find("id"); id != nullptr && id->is_string()) {
            call.id = id->string_value();
          }
          if (const dp::PyJson* n = tc.Find("name"); n != nullptr && n->is_string()) {
            call.name = n->string_value();
          }
          if (const dp::PyJson* a = tc.Find("arguments"); a != nullptr) {
            if (a->is_string()) {
              absl::StatusOr<dp::PyJson> args = dp::ParseToolArguments(a->string_value());
              if (args.ok()) call.arguments = *args;
            } else {
              call.arguments = *a;
            }
          }
          msg.tool_calls.push_back(std::move(call));
        }
      }
      c.messages.push_back(std::move(msg));
    }
  }
  if (const dp::PyJson* t = doc->Find("tools"); t != nullptr && t->is_array()) {
    for (const dp::PyJson& jt : t->array_items()) {
      dp::ToolDefinition def;
      if (const dp::PyJson* n = jt.Find("name"); n != nullptr && n->is_string()) {
        def.name = n->string_value();
      }
      if (const dp::PyJson* d = jt.Find("description"); d != nullptr && d->is_string()) {
        def.description = d->string_value();
      }
      if (const dp::PyJson* p = jt.Find("parameters"); p != nullptr) def.parameters = *p;
      c.tools.push_back(std::move(def));
    }
  }
  if (const dp::PyJson* tc = doc->Find("tool_choice"); tc != nullptr && tc->is_string()) {
    const std::string& s = tc->string_value();
    if (s == "none") {
      c.tool_choice = dp::ToolChoice::None();
    } else if (s == "required") {
      c.tool_choice = dp::ToolChoice::Required();
    } else if (s != "auto") {
      c.tool_choice = dp::ToolChoice::Named(s);
    }
  }
  if (const dp::PyJson* rf = doc->Find("response_format"); rf != nullptr) {
    c.response_format = dp::ResponseFormat{*rf};
  }
  if (const dp::PyJson* th = doc->Find("thinking"); th != nullptr && th->is_bool()) {
    o.thinking = th->bool_value();
  }
  if (const dp::PyJson* v = doc->Find("v41"); v != nullptr && v->is_bool() && v->bool_value()) {
    o.family = dp::ModelFamily::kDeepSeekV41;
  }
  if (const dp::PyJson* e = doc->Find("effort"); e != nullptr) {
    if (e->is_string()) {
      absl::StatusOr<dp::ReasoningEffort> eff = dp::ReasoningEffort::Parse(e->string_value());
      if (eff.ok()) o.effort = *eff;
    } else if (e->type() == dp::PyJson::Type::kInt && e->string_value().size() < 5) {
      o.effort = dp::ReasoningEffort::Numeric(std::atoi(e->string_value().c_str()));
    }
  }
  absl::StatusOr<dp::EncodedPrompt> p = dp::EncodePrompt(c, o);
  if (!p.ok()) {
    Check(dp::GetProtocolError(p.status()).has_value(), "encoder errors are typed");
    return;
  }
  for (size_t i = 1; i < p->pieces.size(); ++i) {
    Check(p->pieces[i].special || p->pieces[i - 1].special, "no adjacent text pieces");
  }
  absl::StatusOr<dp::EncodedPrompt> q = dp::EncodePrompt(c, o);
  Check(q.ok() && q->Text() == p->Text(), "deterministic encoding");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] % 2 == 0) {
    FuzzParser(data + 1, size - 1);
  } else {
    FuzzEncoder(data + 1, size - 1);
  }
  return 0;
}
