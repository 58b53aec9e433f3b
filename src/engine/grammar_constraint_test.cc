// Grammar-constrained generation through the engine (issue #11): real model (stories260K) and
// its tokenizer; the generated text is checked with std::regex / nlohmann JSON (independent of
// the matcher), at temperature 1 (random tokens) and with a tight max_tokens budget.
#include "engine/grammar_constraint.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <regex>

#include "common/status_matchers.h"
#include "engine/llm.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "structured/compiler.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::engine {
namespace {

namespace fs = std::filesystem;
const fs::path kStories = fs::path(DEEPINFER_SHARED_DIR) / "models/stories260K";

struct Fixture {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<LLM> llm;
  std::shared_ptr<const structured::VocabularyIndex> vocab;
};

std::unique_ptr<Fixture> Load() {
  if (!fs::exists(kStories / "config.json")) return nullptr;
  auto f = std::make_unique<Fixture>();
  auto tok = Tokenizer::FromDirectory(kStories.string());
  if (!tok.ok()) return nullptr;
  f->tokenizer = std::move(*tok);
  model::LoadOptions lo;
  lo.show_progress = false;
  auto model = model::LoadModel(kStories.string(), lo);
  if (!model.ok()) return nullptr;
  const int64_t vocab_size = (*model)->info().vocab_size;
  EngineConfig cfg;
  cfg.kv_memory_bytes = 64 << 20;
  auto llm = LLM::Create(std::move(*model), cfg);
  if (!llm.ok()) return nullptr;
  f->llm = std::move(*llm);
  const int32_t eos[] = {f->tokenizer->eos_id()};
  f->vocab = std::make_shared<structured::VocabularyIndex>(
      structured::VocabularyFromTokenizer(*f->tokenizer, vocab_size, eos));
  return f;
}

std::string Text(const Fixture& f, std::vector<int32_t> ids) {
  if (!ids.empty() && ids.back() == f.tokenizer->eos_id()) ids.pop_back();
  std::string out;
  for (int32_t id : ids) out += f.tokenizer->TokenBytes(id);
  return out;
}

TEST(GrammarConstrainedGeneration, RegexAndJsonSchemaHoldAtTemperatureOne) {
  auto f = Load();
  if (!f) GTEST_SKIP() << "../shared/models/stories260K absent";
  structured::GrammarCompiler compiler(f->vocab, {});
  structured::ConstraintSpec regex_spec{
      structured::ConstraintSpec::Kind::kRegex,
      " ?(Lily|Ben|Tom) (ran|saw|had) [a-z]{1,8}( [a-z]{1,8}){0,3}\\.",
      {}};
  ASSERT_OK_AND_ASSIGN(auto regex_grammar, compiler.Get(regex_spec));
  structured::ConstraintSpec schema_spec{
      structured::ConstraintSpec::Kind::kJsonSchema,
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":1,"maximum":99},"happy":{"type":"boolean"}},"required":["name","age","happy"]})",
      {}};
  ASSERT_OK_AND_ASSIGN(auto schema_grammar, compiler.Get(schema_spec));

  std::vector<int32_t> prompt = {1};
  for (int32_t id : f->tokenizer->EncodeText("Once upon a time")) prompt.push_back(id);
  const std::regex re(" ?(Lily|Ben|Tom) (ran|saw|had) [a-z]{1,8}( [a-z]{1,8}){0,3}\\.");
  for (int seed = 0; seed < 6; ++seed) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = seed;
    p.max_tokens = 40;
    p.grammar = regex_grammar;
    ASSERT_OK_AND_ASSIGN(auto out, f->llm->Generate({prompt}, p));
    const auto& s = out[0].samples[0];
    EXPECT_EQ(s.finish, FinishReason::kStop) << Text(*f, s.token_ids);
    EXPECT_TRUE(std::regex_match(Text(*f, s.token_ids), re)) << Text(*f, s.token_ids);

    SamplingParams q = p;
    q.grammar = schema_grammar;
    q.max_tokens = 60;
    ASSERT_OK_AND_ASSIGN(auto out2, f->llm->Generate({prompt}, q));
    const std::string text = Text(*f, out2[0].samples[0].token_ids);
    auto doc = nlohmann::json::parse(text, nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << text;
    EXPECT_TRUE(doc["name"].is_string() && doc["name"].get<std::string>().size() <= 12) << text;
    EXPECT_TRUE(doc["age"].is_number_integer() && doc["age"].get<int>() >= 1 &&
                doc["age"].get<int>() <= 99)
        << text;
    EXPECT_TRUE(doc["happy"].is_boolean()) << text;
  }
}

TEST(GrammarConstrainedGeneration, TightBudgetStillEndsWithCompleteDocument) {
  auto f = Load();
  if (!f) GTEST_SKIP() << "../shared/models/stories260K absent";
  structured::GrammarCompiler compiler(f->vocab, {});
  structured::ConstraintSpec spec{structured::ConstraintSpec::Kind::kJsonObject, "", {}};
  ASSERT_OK_AND_ASSIGN(auto grammar, compiler.Get(spec));
  for (int max_tokens : {3, 8, 20}) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = max_tokens;
    p.max_tokens = max_tokens;
    p.grammar = grammar;
    ASSERT_OK_AND_ASSIGN(auto out, f->llm->Generate({{1, 403}}, p));
    const std::string text = Text(*f, out[0].samples[0].token_ids);
    auto doc = nlohmann::json::parse(text, nullptr, false);
    EXPECT_FALSE(doc.is_discarded()) << "max_tokens " << max_tokens << ": " << text;
    EXPECT_LE(out[0].samples[0].token_ids.size(), static_cast<size_t>(max_tokens));
  }
}

// Deferred start (SamplingParams::grammar_after_token_ids): a hand-made vocabulary of single
// letters plus two trigger ids (a two-token trigger, so the match can straddle Sync calls).
TEST(GrammarConstraintTrigger, FreeUntilTheTriggerSequenceThenConstrained) {
  structured::Vocabulary v;
  for (char c : std::string("abcxyz")) v.token_bytes.push_back(std::string(1, c));  // ids 0..5
  v.token_bytes.push_back("<t1>");  // 6: trigger part 1 (special: never grammar output)
  v.token_bytes.push_back("<t2>");  // 7: trigger part 2
  v.token_bytes.push_back("");      // 8: EOS
  v.special_ids = {6, 7, 8};
  v.eos_ids = {8};
  auto vocab = std::make_shared<structured::VocabularyIndex>(std::move(v));
  structured::ConstraintSpec spec{structured::ConstraintSpec::Kind::kRegex, "ab+", {}};
  ASSERT_OK_AND_ASSIGN(structured::Grammar g, structured::BuildGrammar(spec));
  ASSERT_OK_AND_ASSIGN(auto compiled, structured::CompiledGrammar::Compile(g, vocab));
  const float kNegInf = -std::numeric_limits<float>::infinity();
  auto allowed = [&](GrammarConstraint& c, int64_t remaining) {
    std::vector<float> logits(9, 0.0f);
    c.MaskLogits(logits, remaining);
    std::string out;
    for (int i = 0; i < 9; ++i) out += logits[i] == kNegInf ? '-' : '+';
    return out;
  };
  GrammarConstraint c(compiled, {6, 7}, /*blocked_before=*/{8});
  std::vector<int32_t> output;
  EXPECT_FALSE(c.Active());
  EXPECT_EQ(allowed(c, 100), "++++++++-");  // everything but EOS
  output = {3, 4, 6};                       // "xy" then the first half of the trigger
  ASSERT_TRUE(c.Sync(output));
  EXPECT_FALSE(c.Active());
  output.push_back(5);  // "z": the trigger is broken, still free
  ASSERT_TRUE(c.Sync(output));
  EXPECT_FALSE(c.Active());
  output.push_back(6);
  ASSERT_TRUE(c.Sync(output));
  output.push_back(7);  // trigger complete (straddling two Sync calls)
  ASSERT_TRUE(c.Sync(output));
  EXPECT_TRUE(c.Active());
  EXPECT_EQ(allowed(c, 100), "+--------");  // the grammar's first byte: 'a'
  output.push_back(0);
  ASSERT_TRUE(c.Sync(output));
  EXPECT_EQ(allowed(c, 100), "-+-------");  // 'b'
  output.push_back(1);
  ASSERT_TRUE(c.Sync(output));
  EXPECT_EQ(allowed(c, 100), "-+------+");  // more 'b' or EOS
  EXPECT_TRUE(c.CanTerminate());
  // A token the grammar forbids after the trigger is reported.
  std::vector<int32_t> bad = output;
  bad.push_back(2);
  GrammarConstraint c2(compiled, {6, 7}, {8});
  EXPECT_FALSE(c2.Sync(bad));
  // Without a trigger the grammar applies from the first token.
  GrammarConstraint c3(compiled);
  EXPECT_TRUE(c3.Active());
  EXPECT_EQ(allowed(c3, 100), "+--------");
}

// Forced trigger (SamplingParams::grammar_trigger_budget / grammar_trigger_reserve): the same
// hand-made vocabulary; the trigger's ids are forced once the budget of tokens before it is
// used, or once the tokens left only fit the trigger + the shortest document ("ab", 2 bytes)
// + EOS.
TEST(GrammarConstraintTrigger, BudgetAndReserveForceTheTrigger) {
  structured::Vocabulary v;
  for (char c : std::string("abcxyz")) v.token_bytes.push_back(std::string(1, c));  // ids 0..5
  v.token_bytes.push_back("<t1>");  // 6
  v.token_bytes.push_back("<t2>");  // 7
  v.token_bytes.push_back("");      // 8: EOS
  v.special_ids = {6, 7, 8};
  v.eos_ids = {8};
  auto vocab = std::make_shared<structured::VocabularyIndex>(std::move(v));
  structured::ConstraintSpec spec{structured::ConstraintSpec::Kind::kRegex, "ab+", {}};
  ASSERT_OK_AND_ASSIGN(structured::Grammar g, structured::BuildGrammar(spec));
  ASSERT_OK_AND_ASSIGN(auto compiled, structured::CompiledGrammar::Compile(g, vocab));
  const float kNegInf = -std::numeric_limits<float>::infinity();
  auto allowed = [&](GrammarConstraint& c, int64_t remaining) {
    std::vector<float> logits(9, 0.0f);
    logits[6] = kNegInf;  // the model never wants the trigger: forcing must still work
    c.MaskLogits(logits, remaining);
    std::string out;
    for (int i = 0; i < 9; ++i) out += logits[i] == kNegInf ? '-' : '+';
    return out;
  };
  // Budget 2: two free tokens, then <t1>, then <t2> (a partly generated trigger continues).
  SamplingParams p;
  p.grammar = compiled;
  p.grammar_after_token_ids = {6, 7};
  p.grammar_blocked_before = {8};
  p.grammar_trigger_budget = 2;
  ASSERT_TRUE(GrammarConstraint::Needed(p));
  ASSERT_OK(p.Validate());
  GrammarConstraint c(p);
  std::vector<int32_t> out;
  ASSERT_TRUE(c.Sync(out));
  EXPECT_EQ(allowed(c, 100), "++++++-+-");  // free (the -inf trigger stays -inf)
  out = {0, 3};
  ASSERT_TRUE(c.Sync(out));
  EXPECT_EQ(allowed(c, 100), "------+--");  // budget used: <t1>, even at -inf
  out.push_back(6);
  ASSERT_TRUE(c.Sync(out));
  EXPECT_EQ(allowed(c, 100), "-------+-");  // then <t2>
  out.push_back(7);
  ASSERT_TRUE(c.Sync(out));
  EXPECT_TRUE(c.Active());
  EXPECT_EQ(allowed(c, 100), "+--------");  // the grammar

  // Reserve: 2 trigger ids + "ab" (2 bytes) + EOS = 5 tokens.
  SamplingParams r = p;
  r.grammar_trigger_budget = -1;
  r.grammar_trigger_reserve = true;
  GrammarConstraint d(r);
  std::vector<int32_t> out2 = {3, 4, 5};
  ASSERT_TRUE(d.Sync(out2));
  EXPECT_EQ(allowed(d, 6), "++++++-+-");  // 6 left: still free
  EXPECT_EQ(allowed(d, 5), "------+--");  // 5 left: the trigger now
  // ... and the document then fits exactly: <t2>, 'a', 'b', EOS.
  out2.push_back(6);
  ASSERT_TRUE(d.Sync(out2));
  EXPECT_EQ(allowed(d, 4), "-------+-");
  out2.push_back(7);
  ASSERT_TRUE(d.Sync(out2));
  EXPECT_EQ(allowed(d, 3), "+--------");
  out2.push_back(0);
  ASSERT_TRUE(d.Sync(out2));
  EXPECT_EQ(allowed(d, 2), "-+-------");
  out2.push_back(1);
  ASSERT_TRUE(d.Sync(out2));
  EXPECT_EQ(allowed(d, 1), "--------+");

  // A budget without a grammar: the trigger is forced, and after it nothing is constrained.
  SamplingParams b;
  b.grammar_after_token_ids = {6};
  b.grammar_trigger_budget = 1;
  ASSERT_TRUE(GrammarConstraint::Needed(b));
  GrammarConstraint e(b);
  std::vector<int32_t> out3 = {0};
  ASSERT_TRUE(e.Sync(out3));
  EXPECT_EQ(allowed(e, 50), "------+--");
  out3.push_back(6);
  ASSERT_TRUE(e.Sync(out3));
  EXPECT_TRUE(e.Active());
  EXPECT_EQ(allowed(e, 50), "++++++-++");
  EXPECT_TRUE(e.ForcedTokens(10).empty());
  EXPECT_FALSE(e.Terminated());
  // A budget needs a trigger.
  SamplingParams bad;
  bad.grammar_trigger_budget = 3;
  EXPECT_FALSE(GrammarConstraint::Needed(bad));
  EXPECT_FALSE(bad.Validate().ok());
}

TEST(GrammarConstrainedGeneration, GrammarAfterTriggerTokenOnTheRealModel) {
  auto f = Load();
  if (!f) GTEST_SKIP() << "../shared/models/stories260K absent";
  structured::GrammarCompiler compiler(f->vocab, {});
  structured::ConstraintSpec spec{structured::ConstraintSpec::Kind::kRegex, " ?(yes|no)!", {}};
  ASSERT_OK_AND_ASSIGN(auto grammar, compiler.Get(spec));
  const std::vector<int32_t> dot = f->tokenizer->EncodeText(".");
  ASSERT_FALSE(dot.empty());
  const int32_t trigger = dot.back();
  const int32_t eos = f->tokenizer->eos_id();
  const std::regex re(" ?(yes|no)!");
  for (int seed = 0; seed < 4; ++seed) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = seed;
    p.max_tokens = 60;
    p.grammar = grammar;
    p.grammar_after_token_ids = {trigger};
    p.grammar_blocked_before = {eos};
    p.logit_bias = {{trigger, 4.0f}};  // make the "end of reasoning" come early
    ASSERT_OK_AND_ASSIGN(auto out, f->llm->Generate({{1, 403}}, p));
    const auto& ids = out[0].samples[0].token_ids;
    const auto pos = std::find(ids.begin(), ids.end(), trigger);
    ASSERT_NE(pos, ids.end()) << Text(*f, ids);
    EXPECT_EQ(std::find(ids.begin(), pos, eos), pos) << "EOS before the trigger";
    const std::string tail = Text(*f, std::vector<int32_t>(pos + 1, ids.end()));
    EXPECT_TRUE(std::regex_match(tail, re)) << Text(*f, ids);
    EXPECT_EQ(out[0].samples[0].finish, FinishReason::kStop);
  }
  // The trigger never comes (biased away): the budget runs out unconstrained, without EOS.
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 7;
  p.max_tokens = 12;
  p.grammar = grammar;
  p.grammar_after_token_ids = {trigger};
  p.grammar_blocked_before = {eos};
  p.logit_bias = {{trigger, -100.0f}};
  ASSERT_OK_AND_ASSIGN(auto out, f->llm->Generate({{1, 403}}, p));
  EXPECT_EQ(out[0].samples[0].finish, FinishReason::kLength);
  EXPECT_EQ(out[0].samples[0].token_ids.size(), 12u);
}

// Forced trigger through the engine (stories260K, the "." token as the trigger, biased away so
// the model never picks it by itself): the reasoning budget alone (no grammar) and the reserve
// of a grammar each put the trigger where they must, whatever the sampled tokens are.
TEST(GrammarConstrainedGeneration, ForcedTriggerOnTheRealModel) {
  auto f = Load();
  if (!f) GTEST_SKIP() << "../shared/models/stories260K absent";
  const std::vector<int32_t> dot = f->tokenizer->EncodeText(".");
  ASSERT_FALSE(dot.empty());
  const int32_t trigger = dot.back();
  const int32_t eos = f->tokenizer->eos_id();
  for (int seed = 0; seed < 4; ++seed) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = seed;
    p.max_tokens = 30;
    p.ignore_eos = true;
    p.grammar_after_token_ids = {trigger};
    p.grammar_trigger_budget = 5;
    p.logit_bias = {{trigger, -100.0f}};
    ASSERT_OK_AND_ASSIGN(auto out, f->llm->Generate({{1, 403}}, p));
    const auto& ids = out[0].samples[0].token_ids;
    ASSERT_GT(ids.size(), 5u);
    EXPECT_EQ(ids[5], trigger) << Text(*f, ids);
    EXPECT_EQ(std::count(ids.begin(), ids.begin() + 5, trigger), 0);
  }
  structured::GrammarCompiler compiler(f->vocab, {});
  structured::ConstraintSpec spec{structured::ConstraintSpec::Kind::kRegex, "(yes|no)!", {}};
  ASSERT_OK_AND_ASSIGN(auto grammar, compiler.Get(spec));
  const std::regex re("(yes|no)!");
  for (int seed = 0; seed < 4; ++seed) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = seed;
    p.max_tokens = 20;
    p.grammar = grammar;
    p.grammar_after_token_ids = {trigger};
    p.grammar_blocked_before = {eos};
    p.grammar_trigger_reserve = true;
    p.logit_bias = {{trigger, -100.0f}};
    ASSERT_OK_AND_ASSIGN(auto out, f->llm->Generate({{1, 403}}, p));
    const auto& ids = out[0].samples[0].token_ids;
    const auto pos = std::find(ids.begin(), ids.end(), trigger);
    ASSERT_NE(pos, ids.end()) << Text(*f, ids);
    const std::string tail = Text(*f, std::vector<int32_t>(pos + 1, ids.end()));
    EXPECT_TRUE(std::regex_match(tail, re)) << Text(*f, ids);
    EXPECT_EQ(out[0].samples[0].finish, FinishReason::kStop) << Text(*f, ids);
    EXPECT_LE(ids.size(), 20u);
  }
}

}  // namespace
}  // namespace deepinfer::engine
