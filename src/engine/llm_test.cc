// Offline API structured output (issue #11): SamplingParams::so_args compiled by the LLM.
// Generation runs on a real model (stories260K) at temperature 1 with several seeds; every output
// is checked by code independent of our grammar stack: std::regex for regex constraints,
// nlohmann::json plus hand-written schema checks for JSON schema, and a hand-written
// recursive-descent recogniser for the EBNF language.
#include "engine/llm.h"

#include <chrono>
#include <filesystem>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/status_matchers.h"
#include "engine/testing/engine_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tokenizer/tokenizer.h"

namespace deepinfer::engine {
namespace {

namespace fs = std::filesystem;
using ::deepinfer::testing::StatusIs;
using ::testing::HasSubstr;
using Type = StructuredOutputArgs::SchemaType;

const fs::path kStories = fs::path(DEEPINFER_SHARED_DIR) / "models/stories260K";

StructuredOutputArgs Args(Type type, std::string schema) {
  StructuredOutputArgs a;
  a.schema_type = type;
  a.schema = std::move(schema);
  return a;
}

// --- Validation (no model needed) ---

TEST(SoArgsValidateTest, RejectsInconsistentArgs) {
  SamplingParams p;
  p.so_args = Args(Type::kRegex, "[0-9]+");
  EXPECT_OK(p.Validate());
  p.grammar = std::shared_ptr<const structured::CompiledGrammar>(
      reinterpret_cast<const structured::CompiledGrammar*>(&p), [](const auto*) {});
  EXPECT_THAT(p.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("so_args and grammar are both set")));
  p.grammar = nullptr;
  p.so_args = Args(Type::kJsonSchema, "");
  EXPECT_THAT(p.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("non-empty schema")));
  p.so_args = Args(Type::kJsonObject, "{}");
  EXPECT_THAT(p.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("json_object takes no")));
  p.so_args = Args(Type::kEbnf, "root ::= \"a\"");
  p.so_args->whitespace = StructuredOutputArgs::Whitespace::kFlexible;
  EXPECT_THAT(p.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("schema_type ebnf")));
}

TEST(SoArgsValidateTest, SchemaTypeNamesRoundTrip) {
  for (Type t : {Type::kJsonSchema, Type::kJsonObject, Type::kRegex, Type::kEbnf}) {
    ASSERT_OK_AND_ASSIGN(Type back, ParseSchemaType(SchemaTypeName(t)));
    EXPECT_EQ(back, t);
  }
  EXPECT_EQ(SchemaTypeName(Type::kJsonSchema), "json_schema");
  EXPECT_EQ(SchemaTypeName(Type::kEbnf), "ebnf");
  EXPECT_THAT(ParseSchemaType("grammar"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"grammar\"")));
}

TEST(SoArgsValidateTest, CheckWithoutVocabularyParsesTheConstraint) {
  EXPECT_OK(CheckStructuredOutputArgs(Args(Type::kRegex, "[0-9]{3}-[a-z]+")));
  EXPECT_OK(CheckStructuredOutputArgs(Args(Type::kJsonObject, "")));
  EXPECT_THAT(CheckStructuredOutputArgs(Args(Type::kJsonSchema, R"({"not": {}})")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not")));
  EXPECT_THAT(CheckStructuredOutputArgs(Args(Type::kRegex, "a(?=b)")),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CheckStructuredOutputArgs(Args(Type::kEbnf, "")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("non-empty")));
}

TEST(SoArgsValidateTest, NeedsACompilerAndTheEngineNeverCompiles) {
  testing::FakeModelOptions mo;
  EngineConfig config;
  config.kv_memory_bytes = 8 << 20;
  auto llm = testing::MakeLLM(mo, config);
  ASSERT_NE(llm, nullptr);
  EXPECT_EQ(llm->grammar_compiler(), nullptr);
  SamplingParams p;
  p.so_args = Args(Type::kRegex, "[0-9]+");
  EXPECT_THAT(llm->Generate({{2, 3}}, p),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       ::testing::AllOf(HasSubstr("prompt 0"), HasSubstr("tokenizer"))));
  GenerateRequest req;
  req.prompt = {2, 3};
  req.params = p;
  EXPECT_THAT(llm->engine().Submit(req),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("Engine::Submit")));
  EXPECT_EQ(llm->engine().Stats().num_waiting, 0);
  // Without so_args the same LLM still generates.
  SamplingParams plain;
  plain.max_tokens = 3;
  EXPECT_OK(llm->Generate({{2, 3}}, plain).status());
}

// --- Independent checkers ---

// Hand-written recogniser of the EBNF language kExprGrammar below:
//   expr ::= term (("+" | "*") term)*;  term ::= num | "(" expr ")";  num ::= [1-9][0-9]{0,2}
class ExprRecogniser {
 public:
  static bool Accepts(const std::string& s) {
    ExprRecogniser r(s);
    return r.Expr(0) && r.pos_ == s.size();
  }

 private:
  explicit ExprRecogniser(const std::string& s) : s_(s) {}
  bool Expr(int depth) {
    if (depth > 200 || !Term(depth)) return false;
    while (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '*')) {
      ++pos_;
      if (!Term(depth)) return false;
    }
    return true;
  }
  bool Term(int depth) {
    if (pos_ < s_.size() && s_[pos_] == '(') {
      ++pos_;
      if (!Expr(depth + 1)) return false;
      if (pos_ >= s_.size() || s_[pos_] != ')') return false;
      ++pos_;
      return true;
    }
    if (pos_ >= s_.size() || s_[pos_] < '1' || s_[pos_] > '9') return false;
    ++pos_;
    int more = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9' && more < 2) {
      ++pos_;
      ++more;
    }
    return true;
  }
  const std::string& s_;
  size_t pos_ = 0;
};

constexpr char kExprGrammar[] = R"ebnf(root ::= expr
expr ::= term (("+" | "*") term)*
term ::= num | "(" expr ")"
num  ::= [1-9] [0-9]{0,2}
)ebnf";

TEST(ExprRecogniserTest, SelfCheck) {
  for (const char* ok : {"1", "12+3", "(1*20)+999", "((7))", "1+(2*(3+4))"}) {
    EXPECT_TRUE(ExprRecogniser::Accepts(ok)) << ok;
  }
  for (const char* bad : {"", "0", "1000", "(1", "1+", "()", "1)", "+1", "1 + 2"}) {
    EXPECT_FALSE(ExprRecogniser::Accepts(bad)) << bad;
  }
}

constexpr char kPetSchema[] = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 10},
    "color": {"enum": ["red", "green", "blue"]},
    "tags": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 50},
             "minItems": 1, "maxItems": 3},
    "pet": {"type": "object",
            "properties": {"kind": {"const": "cat"},
                           "age": {"type": "integer", "minimum": 1, "maximum": 20}},
            "required": ["kind", "age"], "additionalProperties": false}
  },
  "required": ["name", "color", "tags", "pet"],
  "additionalProperties": false
})";

size_t CodePoints(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::set<std::string> Keys(const nlohmann::json& obj) {
  std::set<std::string> keys;
  for (auto it = obj.begin(); it != obj.end(); ++it) keys.insert(it.key());
  return keys;
}

// kPetSchema's constraints, checked by hand. Returns "" when `text` satisfies them.
std::string PetSchemaViolation(const std::string& text) {
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return "not JSON";
  if (!doc.is_object()) return "not an object";
  if (Keys(doc) != std::set<std::string>{"name", "color", "tags", "pet"}) return "keys";
  const auto& name = doc["name"];
  if (!name.is_string() || CodePoints(name.get<std::string>()) < 1 ||
      CodePoints(name.get<std::string>()) > 10) {
    return "name";
  }
  const auto& color = doc["color"];
  if (!color.is_string() ||
      !std::set<std::string>{"red", "green", "blue"}.contains(color.get<std::string>())) {
    return "color";
  }
  const auto& tags = doc["tags"];
  if (!tags.is_array() || tags.size() < 1 || tags.size() > 3) return "tags size";
  for (const auto& t : tags) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > 50) return "tag";
  }
  const auto& pet = doc["pet"];
  if (!pet.is_object() || Keys(pet) != std::set<std::string>{"kind", "age"}) return "pet keys";
  if (pet["kind"] != "cat") return "pet kind";
  if (!pet["age"].is_number_integer() || pet["age"].get<int64_t>() < 1 ||
      pet["age"].get<int64_t>() > 20) {
    return "pet age";
  }
  return "";
}

// --- Generation on stories260K ---

class LlmSoArgsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(kStories / "config.json")) return;
    auto tok = Tokenizer::FromDirectory(kStories.string());
    ASSERT_OK(tok.status());
    tokenizer_ = std::move(*tok).release();
    model::LoadOptions lo;
    lo.show_progress = false;
    auto model = model::LoadModel(kStories.string(), lo);
    ASSERT_OK(model.status());
    EngineConfig cfg;
    cfg.kv_memory_bytes = 64 << 20;
    auto llm = LLM::Create(std::move(*model), cfg, *tokenizer_);
    ASSERT_OK(llm.status());
    llm_ = std::move(*llm).release();
  }
  static void TearDownTestSuite() {
    delete llm_;
    delete tokenizer_;
    llm_ = nullptr;
    tokenizer_ = nullptr;
  }
  void SetUp() override {
    if (llm_ == nullptr) GTEST_SKIP() << kStories << " absent";
    prompt_ = {tokenizer_->bos_id()};
    for (int32_t id : tokenizer_->EncodeText("Once upon a time")) prompt_.push_back(id);
  }

  // The exact bytes of the generated tokens (the trailing EOS dropped).
  static std::string Text(std::vector<int32_t> ids) {
    if (!ids.empty() && ids.back() == tokenizer_->eos_id()) ids.pop_back();
    std::string out;
    for (int32_t id : ids) out += tokenizer_->TokenBytes(id);
    return out;
  }

  // Samples of `so_args` at temperature 1: `seeds` prompt entries with n = 2 each.
  std::vector<std::string> Sample(const StructuredOutputArgs& so_args, int seeds, int max_tokens) {
    std::vector<SamplingParams> params(seeds);
    for (int s = 0; s < seeds; ++s) {
      params[s].temperature = 1.0f;
      params[s].seed = 100 + s;
      params[s].n = 2;
      params[s].max_tokens = max_tokens;
      params[s].so_args = so_args;
    }
    absl::StatusOr<std::vector<GenerateOutput>> out =
        llm_->Generate(std::vector<std::vector<int32_t>>(seeds, prompt_), params);
    EXPECT_OK(out.status());
    std::vector<std::string> texts;
    if (!out.ok()) return texts;
    for (const GenerateOutput& g : *out) {
      for (const SampleOutput& s : g.samples) {
        EXPECT_NE(s.finish, FinishReason::kError);
        texts.push_back(Text(s.token_ids));
      }
    }
    return texts;
  }

  static Tokenizer* tokenizer_;
  static LLM* llm_;
  std::vector<int32_t> prompt_;
};

Tokenizer* LlmSoArgsTest::tokenizer_ = nullptr;
LLM* LlmSoArgsTest::llm_ = nullptr;

TEST_F(LlmSoArgsTest, RegexOutputsFullyMatch) {
  const int64_t compiles_before = llm_->grammar_compiler()->compiles();
  const std::vector<std::string> texts =
      Sample(Args(Type::kRegex, "[0-9]{3}-[a-z]+"), /*seeds=*/4, /*max_tokens=*/24);
  ASSERT_EQ(texts.size(), 8u);
  const std::regex re("[0-9]{3}-[a-z]+");
  for (const std::string& t : texts) EXPECT_TRUE(std::regex_match(t, re)) << "'" << t << "'";
  // Four prompts with one constraint: compiled once.
  EXPECT_EQ(llm_->grammar_compiler()->compiles() - compiles_before, 1);
  // Temperature 1 with different seeds explores: not all outputs are the same.
  EXPECT_GT(std::set<std::string>(texts.begin(), texts.end()).size(), 1u);
}

TEST_F(LlmSoArgsTest, JsonSchemaOutputsSatisfyTheSchema) {
  const std::vector<std::string> texts =
      Sample(Args(Type::kJsonSchema, kPetSchema), /*seeds=*/4, /*max_tokens=*/120);
  ASSERT_EQ(texts.size(), 8u);
  for (const std::string& t : texts) EXPECT_EQ(PetSchemaViolation(t), "") << t;
}

TEST_F(LlmSoArgsTest, JsonObjectWithFlexibleWhitespaceIsAnObject) {
  StructuredOutputArgs a = Args(Type::kJsonObject, "");
  a.whitespace = StructuredOutputArgs::Whitespace::kFlexible;
  for (const std::string& t : Sample(a, /*seeds=*/2, /*max_tokens=*/40)) {
    const nlohmann::json doc = nlohmann::json::parse(t, nullptr, false);
    EXPECT_TRUE(!doc.is_discarded() && doc.is_object()) << t;
  }
}

TEST_F(LlmSoArgsTest, EbnfOutputsAreInTheLanguage) {
  const std::vector<std::string> texts =
      Sample(Args(Type::kEbnf, kExprGrammar), /*seeds=*/4, /*max_tokens=*/32);
  ASSERT_EQ(texts.size(), 8u);
  for (const std::string& t : texts) EXPECT_TRUE(ExprRecogniser::Accepts(t)) << "'" << t << "'";
}

TEST_F(LlmSoArgsTest, MixedConstraintsInOneCallCompileInParallelAndStayPerPrompt) {
  std::vector<SamplingParams> params(4);
  params[0].so_args = Args(Type::kRegex, "(yes|no)");
  params[1].so_args = Args(Type::kEbnf, kExprGrammar);
  params[2].so_args = Args(Type::kJsonSchema, kPetSchema);
  params[3].max_tokens = 5;  // unconstrained
  for (int i = 0; i < 3; ++i) {
    params[i].temperature = 1.0f;
    params[i].seed = 7;
    params[i].max_tokens = 120;
  }
  ASSERT_OK_AND_ASSIGN(auto out,
                       llm_->Generate(std::vector<std::vector<int32_t>>(4, prompt_), params));
  const std::string yes_no = Text(out[0].samples[0].token_ids);
  EXPECT_TRUE(yes_no == "yes" || yes_no == "no") << yes_no;
  EXPECT_TRUE(ExprRecogniser::Accepts(Text(out[1].samples[0].token_ids)));
  EXPECT_EQ(PetSchemaViolation(Text(out[2].samples[0].token_ids)), "");
  EXPECT_EQ(out[3].samples[0].token_ids.size(), 5u);
  // The caller's params are not modified (so_args stays, no grammar appears).
  EXPECT_TRUE(params[0].so_args.has_value());
  EXPECT_EQ(params[0].grammar, nullptr);
}

TEST_F(LlmSoArgsTest, BadConstraintsAreInvalidArgumentNamingThePrompt) {
  struct Case {
    StructuredOutputArgs args;
    const char* expect;  // in the message
  };
  const Case cases[] = {
      {Args(Type::kJsonSchema, R"({"type":"integer","multipleOf":3})"), "multipleOf"},
      {Args(Type::kJsonSchema, R"({"type":)"), "so_args (json_schema)"},
      {Args(Type::kRegex, "(a)\\1"), "so_args (regex)"},
      {Args(Type::kRegex, "[0-9"), "so_args (regex)"},
      {Args(Type::kEbnf, "root ::= \"a"), "so_args (ebnf)"},
      {Args(Type::kEbnf, "root ::= missing"), "so_args (ebnf)"},
  };
  for (const Case& c : cases) {
    std::vector<SamplingParams> params(2);
    params[1].so_args = c.args;
    EXPECT_THAT(llm_->Generate({prompt_, prompt_}, params),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         ::testing::AllOf(HasSubstr("prompt 1"), HasSubstr(c.expect))))
        << c.args.schema;
  }
  // Nothing was left running. The engine thread frees finished requests (also earlier tests'
  // on this shared LLM) a moment after Generate returns, so wait for it, within a deadline.
  for (int i = 0; i < 500; ++i) {
    const auto stats = llm_->engine().Stats();
    if (stats.num_running == 0 && stats.num_waiting == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(llm_->engine().Stats().num_running, 0);
  EXPECT_EQ(llm_->engine().Stats().num_waiting, 0);
  // so_args together with a compiled grammar.
  SamplingParams both;
  both.so_args = Args(Type::kRegex, "a");
  structured::ConstraintSpec spec;
  spec.kind = structured::ConstraintSpec::Kind::kRegex;
  spec.text = "a";
  ASSERT_OK_AND_ASSIGN(both.grammar, llm_->grammar_compiler()->Get(spec));
  EXPECT_THAT(llm_->Generate({prompt_}, both),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("prompt 0")));
}

}  // namespace
}  // namespace deepinfer::engine
