// Multi-token steps (the commit seam), speculative decoding and jump-forward decoding
// (issues #26 and #22 part 3; docs/speculative-decoding.md).
//
// Oracles: the FakeModel's cache-free ReferenceLogits (its logits depend on every KV row, every
// compressed row and the state slot it reads back, so a rollback that leaves anything behind
// changes the output), and the same engine with speculation off. The FakeModel is integer math,
// so every assertion is exact on every CPU. Real-model tests (stories260K, dsv4-tiny-a) run with
// DEEPINFER_BATCH_INVARIANT semantics (row results independent of the rows computed with them)
// and compare speculative against non-speculative runs of the same binary.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/status_matchers.h"
#include "engine/engine.h"
#include "engine/grammar_constraint.h"
#include "engine/llm.h"
#include "engine/speculative/drafter.h"
#include "engine/testing/engine_test_util.h"
#include "engine/testing/fake_model.h"
#include "engine/testing/speculative_testing.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "structured/compiler.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::engine {
namespace {

namespace fs = std::filesystem;
using ::deepinfer::engine::testing::FakeModel;
using ::deepinfer::engine::testing::FakeModelOptions;
using ::deepinfer::engine::testing::Greedy;
using ::deepinfer::engine::testing::LoadSharedModel;
using ::deepinfer::engine::testing::MakePrompts;
using ::deepinfer::engine::testing::OracleDrafter;
using ::deepinfer::engine::testing::RandomDrafter;
using ::deepinfer::engine::testing::ReferenceGreedy;
using ::deepinfer::engine::testing::SchedulingCase;

// --- Drafters -------------------------------------------------------------------------------

TEST(NgramDrafterTest, ProposesTheContinuationOfTheMostRecentEarlierOccurrence) {
  NgramDrafter d(1, 3);
  const std::vector<int32_t> t = {5, 6, 7, 8, 1, 5, 6, 7, 9, 2, 5, 6, 7};
  DraftContext ctx;
  ctx.tokens = t;
  // Suffix 5 6 7 occurs at 0 (then 8 1 5) and at 5 (then 9 2 5): the most recent wins.
  EXPECT_EQ(d.Propose(ctx, 3), (std::vector<int32_t>{9, 2, 5}));
  EXPECT_EQ(d.Propose(ctx, 1), (std::vector<int32_t>{9}));
  const std::vector<int32_t> none = {1, 2, 3, 4};
  ctx.tokens = none;
  EXPECT_TRUE(d.Propose(ctx, 3).empty());
  // Falls back to shorter n-grams: only the last token (4) recurs.
  const std::vector<int32_t> short_match = {4, 9, 1, 2, 3, 4};
  ctx.tokens = short_match;
  EXPECT_EQ(d.Propose(ctx, 2), (std::vector<int32_t>{9, 1}));
  NgramDrafter d2(2, 3);
  EXPECT_TRUE(d2.Propose(ctx, 2).empty());
  // Proposals stop at the end of the history.
  const std::vector<int32_t> tail = {3, 4, 3};
  ctx.tokens = tail;
  EXPECT_EQ(d.Propose(ctx, 5), (std::vector<int32_t>{4, 3}));
}

// Everything a request's stream delivered.
struct Collected {
  std::vector<int32_t> tokens;
  std::vector<int> message_tokens;  // token count of each message
  std::vector<int> output_tokens;   // StepOutput::output_tokens of each message
  FinishReason finish = FinishReason::kError;
  int finishes = 0;
  int drafted = 0;
  int accepted = 0;
  int forced = 0;
  int forward_passes = 0;
};

// Sample 0's messages (other samples of an n > 1 request are skipped).
Collected Collect(RequestStream& stream) {
  Collected c;
  while (std::optional<StepOutput> o = stream.Next()) {
    if (o->sample_index != 0) continue;
    EXPECT_EQ(c.finishes, 0) << "a message after the finish";
    c.tokens.insert(c.tokens.end(), o->token_ids.begin(), o->token_ids.end());
    c.message_tokens.push_back(static_cast<int>(o->token_ids.size()));
    c.output_tokens.push_back(o->output_tokens);
    c.drafted = o->drafted_tokens;
    c.accepted = o->accepted_tokens;
    c.forced = o->forced_tokens;
    c.forward_passes = o->forward_passes;
    if (o->finish.has_value()) {
      c.finish = *o->finish;
      ++c.finishes;
    }
  }
  return c;
}

std::unique_ptr<Engine> MakeEngine(const FakeModelOptions& mo, bool async,
                                   std::shared_ptr<Drafter> drafter, int k) {
  EngineConfig config;
  config.async_scheduling = async;
  config.max_num_seqs = 16;
  config.max_num_batched_tokens = 256;
  if (drafter != nullptr) {
    config.speculative.method = SpeculativeConfig::Method::kCustom;
    config.speculative.drafter = std::move(drafter);
    config.speculative.num_speculative_tokens = k;
  }
  auto engine = Engine::Create(std::make_unique<FakeModel>(mo), config);
  CHECK(engine.ok()) << engine.status();
  return std::move(*engine);
}

std::vector<Collected> RunAll(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                           const std::vector<SamplingParams>& params,
                           const std::vector<bool>& speculative = {}) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateRequest req;
    req.prompt = prompts[i];
    req.params = params[i];
    if (!speculative.empty()) req.speculative = speculative[i];
    auto s = engine.Submit(req);
    CHECK(s.ok()) << s.status();
    streams.push_back(*s);
  }
  std::vector<Collected> out;
  for (auto& s : streams) out.push_back(Collect(*s));
  return out;
}

// --- E2 greedy losslessness, E8 rollback (FakeModel) ------------------------------------------

class SpecFakeTest : public ::testing::TestWithParam<SchedulingCase> {};

// Every draft length 1..5 and every corruption position (k = no corruption): the output equals
// the cache-free greedy reference. With the corruption at j the step accepts exactly j drafts,
// so rollbacks of every length happen, across block and compression (4-token) boundaries; the
// FakeModel's logits read every KV row, compressed row and the state slot back, so any state a
// rejected draft left behind (KV rows, compressed rows, window state) would change the tokens.
TEST_P(SpecFakeTest, GreedyEqualsReferenceForEveryDraftLengthAndRejectionPoint) {
  FakeModelOptions mo;
  mo.with_state = GetParam().with_state;
  const FakeModel ref(mo);
  const auto prompts = MakePrompts(3, 100, 140, 11);  // decode crosses the 128 boundary
  std::vector<SamplingParams> params;
  for (int i = 0; i < 3; ++i) params.push_back(Greedy(30 + 9 * i));
  std::vector<std::vector<int32_t>> expected;
  std::vector<FinishReason> finishes;
  for (int i = 0; i < 3; ++i) {
    FinishReason f;
    expected.push_back(ReferenceGreedy(ref, prompts[i], params[i].max_tokens, &f));
    finishes.push_back(f);
  }
  for (int k = 1; k <= 5; ++k) {
    for (int corrupt = 0; corrupt <= k; ++corrupt) {
      auto drafter = std::make_shared<OracleDrafter>(mo, corrupt);
      auto engine = MakeEngine(mo, GetParam().async, drafter, k);
      const std::vector<Collected> got = RunAll(*engine, prompts, params);
      for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(got[i].tokens, expected[i]) << "k " << k << " corrupt " << corrupt << " req " << i;
        EXPECT_EQ(got[i].finish, finishes[i]) << "k " << k << " corrupt " << corrupt;
        EXPECT_EQ(got[i].finishes, 1);
        // One token per message, counts as a token-by-token run reports them.
        for (size_t m = 0; m < got[i].message_tokens.size(); ++m) {
          EXPECT_LE(got[i].message_tokens[m], 1);
        }
        EXPECT_EQ(got[i].output_tokens.back(), static_cast<int>(expected[i].size()));
        if (corrupt == k) {
          // The oracle's drafts are all accepted, except after a finish inside the last block.
          EXPECT_GE(got[i].accepted, got[i].drafted - k) << "k " << k;
        } else {
          EXPECT_LT(got[i].accepted, got[i].drafted);
        }
        EXPECT_GT(got[i].drafted, 0);
      }
      const EngineStats st = engine->Stats();
      EXPECT_GT(st.spec_verify_steps, 0);
      // Each position's accepted count is at most the previous one's (accepted drafts are a
      // prefix), and they sum to the accepted total (E13).
      int64_t sum = 0;
      for (int j = 0; j < kMaxSpeculativeTokens; ++j) {
        sum += st.spec_accepted_per_position[j];
        if (j > 0) {
          EXPECT_LE(st.spec_accepted_per_position[j], st.spec_accepted_per_position[j - 1]);
        }
        if (j >= corrupt) {
          EXPECT_EQ(st.spec_accepted_per_position[j], 0) << "corrupt " << corrupt;
        }
      }
      EXPECT_EQ(sum, st.spec_accepted_tokens);
      engine->Shutdown(int64_t{5} * 1000 * 1000 * 1000);
      EXPECT_EQ(engine->Stats().kv_blocks_used, 0);
      EXPECT_EQ(engine->Stats().state_slots_used, 0);
    }
  }
}

// With all drafts accepted a step commits k + 1 tokens: far fewer forward passes (the point of
// speculation), and the outputs still equal the reference.
TEST_P(SpecFakeTest, AcceptedDraftsSaveForwardPasses) {
  FakeModelOptions mo;
  mo.with_state = GetParam().with_state;
  mo.eos_period = 0;
  const FakeModel ref(mo);
  const auto prompts = MakePrompts(1, 20, 20, 3);
  FinishReason f;
  const auto expected = ReferenceGreedy(ref, prompts[0], 40, &f);
  auto drafter = std::make_shared<OracleDrafter>(mo, /*corrupt=*/99);
  auto engine = MakeEngine(mo, GetParam().async, drafter, 4);
  const auto got = RunAll(*engine, prompts, {Greedy(40)});
  EXPECT_EQ(got[0].tokens, expected);
  // 1 prefill step, then steps of 5 tokens: 8 steps for 40 tokens (the last caps its drafts
  // at max_tokens).
  EXPECT_LE(got[0].forward_passes, 10);
  EXPECT_EQ(engine->Stats().num_forward_passes, got[0].forward_passes);
}

// Requests that speculate and requests that do not, in one batch (and sampled ones): each
// equals its run alone with speculation off.
TEST_P(SpecFakeTest, MixedBatchAndSampledRequestsEqualSpeculationOff) {
  FakeModelOptions mo;
  mo.with_state = GetParam().with_state;
  const auto prompts = MakePrompts(8, 5, 150, 5);
  std::vector<SamplingParams> params;
  std::vector<bool> spec;
  for (int i = 0; i < 8; ++i) {
    SamplingParams p = Greedy(20 + 5 * i);
    if (i % 2 == 1) {  // sampled, seeded: sample-and-compare keeps the exact tokens (E3)
      p.temperature = 1.0f;
      p.top_p = 0.9f;
      p.seed = 1000 + i;
    }
    if (i == 5) p.n = 2;
    params.push_back(p);
    spec.push_back(i % 3 != 0);
  }
  auto plain = MakeEngine(mo, GetParam().async, nullptr, 1);
  const auto want = RunAll(*plain, prompts, params);
  for (int k : {1, 3, 5}) {
    auto drafter = std::make_shared<RandomDrafter>(mo.vocab_size, 77 + k);
    auto engine = MakeEngine(mo, GetParam().async, drafter, k);
    const auto got = RunAll(*engine, prompts, params, spec);
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens) << "k " << k << " request " << i;
      EXPECT_EQ(got[i].finish, want[i].finish) << "k " << k << " request " << i;
      if (!spec[i]) EXPECT_EQ(got[i].drafted, 0) << "request " << i << " opted out";
    }
  }
  // An oracle for greedy, random tokens for sampled: sampled requests accept drafts too (the
  // sampled token equals a random draft now and then on a 64-token vocabulary).
}

INSTANTIATE_TEST_SUITE_P(Modes, SpecFakeTest, ::testing::ValuesIn(testing::kSchedulingCases),
                         testing::SchedulingCaseName<::testing::TestParamInfo<SchedulingCase>>);

// --- E10 finishing inside an accepted block -----------------------------------------------------

// A stop token, max_tokens and the context end at every position of an accepted block: the
// tokens, the finish reason and the per-message counts equal the non-speculative run, and
// nothing after the finish is delivered.
TEST(SpecFinishTest, StopTokenMaxTokensAndContextEndAtEveryBlockPosition) {
  FakeModelOptions mo;
  mo.eos_period = 0;
  const FakeModel ref(mo);
  const auto prompts = MakePrompts(1, 30, 30, 21);
  FinishReason f;
  const auto full = ReferenceGreedy(ref, prompts[0], 24, &f);
  for (bool async : {false, true}) {
    auto plain = MakeEngine(mo, async, nullptr, 1);
    auto drafter = std::make_shared<OracleDrafter>(mo, /*corrupt=*/99);
    auto spec = MakeEngine(mo, async, drafter, 5);
    // Steps commit 6 tokens after the first: every offset 0..5 inside a block is reached.
    for (int m = 1; m <= 14; ++m) {
      SamplingParams p = Greedy(m);
      const auto want = RunAll(*plain, prompts, {p});
      const auto got = RunAll(*spec, prompts, {p});
      EXPECT_EQ(got[0].tokens, want[0].tokens) << "max_tokens " << m;
      EXPECT_EQ(got[0].finish, FinishReason::kLength);
      EXPECT_EQ(got[0].message_tokens, want[0].message_tokens) << "max_tokens " << m;
      EXPECT_EQ(got[0].output_tokens, want[0].output_tokens) << "max_tokens " << m;
    }
    for (int j = 1; j < 14; ++j) {
      SamplingParams p = Greedy(24);
      p.stop_token_ids = {full[j]};
      const auto want = RunAll(*plain, prompts, {p});
      const auto got = RunAll(*spec, prompts, {p});
      ASSERT_EQ(want[0].finish, FinishReason::kStop);
      EXPECT_EQ(got[0].tokens, want[0].tokens) << "stop at " << j;
      EXPECT_EQ(got[0].finish, FinishReason::kStop) << "stop at " << j;
      EXPECT_EQ(got[0].output_tokens, want[0].output_tokens) << "stop at " << j;
    }
    // Context end: max_context just after the prompt + a few tokens.
    for (int room = 1; room <= 8; ++room) {
      FakeModelOptions small = mo;
      small.max_context = static_cast<int64_t>(prompts[0].size()) + room;
      auto plain_small = MakeEngine(small, async, nullptr, 1);
      auto spec_small =
          MakeEngine(small, async, std::make_shared<OracleDrafter>(small, 99), 5);
      // Submit caps prompt + max_tokens at the context: both limits end the same step.
      const auto want = RunAll(*plain_small, prompts, {Greedy(room)});
      const auto got = RunAll(*spec_small, prompts, {Greedy(room)});
      EXPECT_EQ(got[0].tokens, want[0].tokens) << "room " << room;
      EXPECT_EQ(got[0].finish, want[0].finish) << "room " << room;
    }
  }
}

TEST(SpecConfigTest, BadSettingsAreClearErrors) {
  FakeModelOptions mo;
  EngineConfig config;
  config.speculative.method = SpeculativeConfig::Method::kNgram;
  config.speculative.num_speculative_tokens = 6;
  EXPECT_FALSE(Engine::Create(std::make_unique<FakeModel>(mo), config).ok());
  config.speculative.num_speculative_tokens = 2;
  config.speculative.prompt_lookup_min = 3;
  config.speculative.prompt_lookup_max = 2;
  EXPECT_FALSE(Engine::Create(std::make_unique<FakeModel>(mo), config).ok());
  config.speculative.method = SpeculativeConfig::Method::kCustom;
  config.speculative.prompt_lookup_min = 1;
  EXPECT_FALSE(Engine::Create(std::make_unique<FakeModel>(mo), config).ok());
}

// --- Real models ------------------------------------------------------------------------------

const fs::path kShared = fs::path(DEEPINFER_SHARED_DIR);

struct ModelRun {
  std::vector<std::vector<int32_t>> tokens;
  EngineStats stats;
};

ModelRun RunModel(const std::string& name, const std::vector<std::vector<int32_t>>& prompts,
                  const std::vector<SamplingParams>& params, SpeculativeConfig spec,
                  bool async = true) {
  EngineConfig config;
  config.kv_memory_bytes = 256 << 20;
  config.async_scheduling = async;
  config.speculative = std::move(spec);
  auto engine = Engine::Create(LoadSharedModel(name), config);
  CHECK(engine.ok()) << engine.status();
  ModelRun r;
  for (Collected& c : RunAll(**engine, prompts, params)) r.tokens.push_back(c.tokens);
  (*engine)->Shutdown(int64_t{5} * 1000 * 1000 * 1000);
  r.stats = (*engine)->Stats();
  return r;
}

// stories260K repeats itself a lot: n-gram prompt lookup gets real acceptance. Greedy outputs
// equal speculation off for k = 1..5 (E2 through the engine), in one batch with requests that
// do not speculate.
TEST(SpecModelTest, Stories260KNgramGreedyEqualsSpeculationOff) {
  if (!fs::exists(kShared / "models/stories260K/config.json")) GTEST_SKIP() << "no stories260K";
  auto tok = Tokenizer::FromDirectory((kShared / "models/stories260K").string());
  ASSERT_OK(tok.status());
  std::vector<std::vector<int32_t>> prompts;
  for (const char* text : {"Once upon a time", "Lily and Ben went to the park. Lily",
                           "The cat sat on the mat. The dog"}) {
    std::vector<int32_t> p = {(*tok)->bos_id()};
    for (int32_t id : (*tok)->EncodeText(text)) p.push_back(id);
    prompts.push_back(p);
  }
  std::vector<SamplingParams> params(prompts.size(), Greedy(120));
  params[2].temperature = 0.8f;  // sampled and seeded: also identical (sample-and-compare)
  params[2].seed = 5;
  const ModelRun off = RunModel("stories260K", prompts, params, {});
  for (int k = 1; k <= 5; ++k) {
    SpeculativeConfig spec;
    spec.method = SpeculativeConfig::Method::kNgram;
    spec.num_speculative_tokens = k;
    spec.prompt_lookup_min = 1;
    spec.prompt_lookup_max = 4;
    const ModelRun on = RunModel("stories260K", prompts, params, spec, /*async=*/k % 2 == 1);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(on.tokens[i], off.tokens[i]) << "k " << k << " prompt " << i;
    }
    EXPECT_GT(on.stats.spec_accepted_tokens, 0) << "k " << k;
    EXPECT_LT(on.stats.num_forward_passes, off.stats.num_forward_passes) << "k " << k;
    std::printf("stories260K ngram k=%d: drafted %lld accepted %lld (%.2f), forwards %lld vs %lld\n",
                k, static_cast<long long>(on.stats.spec_draft_tokens),
                static_cast<long long>(on.stats.spec_accepted_tokens),
                on.stats.spec_draft_tokens
                    ? double(on.stats.spec_accepted_tokens) / on.stats.spec_draft_tokens
                    : 0.0,
                static_cast<long long>(on.stats.num_forward_passes),
                static_cast<long long>(off.stats.num_forward_passes));
  }
}

// DeepSeek-V4 (window rings, ratio-4 and ratio-16 compressors): scripted drafts that are the
// model's own greedy output with one corrupted position, and n-gram drafts, give the greedy
// output of speculation off; the slot restore rolls back rings and compressor carry.
TEST(SpecModelTest, Dsv4TinyScriptedAndNgramGreedyEqualSpeculationOff) {
  if (!fs::exists(kShared / "models/dsv4-tiny-a/config.json")) GTEST_SKIP() << "no dsv4-tiny-a";
  std::mt19937 rng(9);
  std::vector<std::vector<int32_t>> prompts;
  for (int len : {7, 40}) {
    std::vector<int32_t> p(len);
    for (int32_t& t : p) t = 3 + static_cast<int32_t>(rng() % 400);
    prompts.push_back(p);
  }
  std::vector<SamplingParams> params(prompts.size(), Greedy(24));
  const ModelRun off = RunModel("dsv4-tiny-a", prompts, params, {});
  // Scripted: the reference output continues the history; corrupt draft `c` of every block.
  std::map<std::vector<int32_t>, std::vector<int32_t>> full;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> f = prompts[i];
    f.insert(f.end(), off.tokens[i].begin(), off.tokens[i].end());
    full[prompts[i]] = f;
  }
  for (int k : {1, 3, 5}) {
    for (int c : {0, k / 2, k}) {
      SpeculativeConfig spec;
      spec.method = SpeculativeConfig::Method::kCustom;
      spec.num_speculative_tokens = k;
      spec.drafter = std::make_shared<ScriptedDrafter>(
          [&, c](const DraftContext& ctx, int max_tokens) {
            for (const auto& [prompt, f] : full) {
              if (static_cast<int64_t>(prompt.size()) != ctx.prompt_len ||
                  !std::equal(prompt.begin(), prompt.end(), ctx.tokens.begin())) {
                continue;
              }
              std::vector<int32_t> d;
              for (int j = 0; j < max_tokens; ++j) {
                const size_t at = ctx.tokens.size() + j;
                if (at >= f.size()) break;
                d.push_back(j == c ? (f[at] + 1) % 400 : f[at]);
              }
              return d;
            }
            return std::vector<int32_t>{};
          });
      const ModelRun on = RunModel("dsv4-tiny-a", prompts, params, spec, /*async=*/c % 2 == 0);
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(on.tokens[i], off.tokens[i]) << "k " << k << " corrupt " << c << " prompt " << i;
      }
      if (c == k) {
        EXPECT_EQ(on.stats.spec_accepted_tokens, on.stats.spec_draft_tokens);
      }
    }
  }
  SpeculativeConfig ngram;
  ngram.method = SpeculativeConfig::Method::kNgram;
  ngram.num_speculative_tokens = 2;
  ngram.prompt_lookup_min = 1;
  const ModelRun on = RunModel("dsv4-tiny-a", prompts, params, ngram);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(on.tokens[i], off.tokens[i]);
}

// DeepSeek-V4 MTP drafting (spec §2, k = 1): greedy outputs equal speculation off, in a batch
// with a request that does not speculate, in sync and async mode; drafts were verified.
TEST(SpecModelTest, Dsv4TinyMtpGreedyEqualsSpeculationOff) {
  if (!fs::exists(kShared / "models/dsv4-tiny-a/config.json")) GTEST_SKIP() << "no dsv4-tiny-a";
  std::mt19937 rng(4);
  std::vector<std::vector<int32_t>> prompts;
  for (int len : {5, 33, 140}) {
    std::vector<int32_t> p(len);
    for (int32_t& t : p) t = 3 + static_cast<int32_t>(rng() % 400);
    prompts.push_back(p);
  }
  std::vector<SamplingParams> params(prompts.size(), Greedy(20));
  params[1].temperature = 1.0f;  // seeded sampling: identical too (sample-and-compare)
  params[1].seed = 8;
  const ModelRun off = RunModel("dsv4-tiny-a", prompts, params, {});
  for (bool async : {false, true}) {
    SpeculativeConfig spec;
    spec.method = SpeculativeConfig::Method::kMtp;
    spec.num_speculative_tokens = 1;
    const ModelRun on = RunModel("dsv4-tiny-a", prompts, params, spec, async);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(on.tokens[i], off.tokens[i]) << "prompt " << i << " async " << async;
    }
    EXPECT_GT(on.stats.spec_draft_tokens, 0);
    std::printf("dsv4-tiny-a MTP (async %d): drafted %lld accepted %lld\n", async,
                static_cast<long long>(on.stats.spec_draft_tokens),
                static_cast<long long>(on.stats.spec_accepted_tokens));
  }
  SpeculativeConfig two;
  two.method = SpeculativeConfig::Method::kMtp;
  two.num_speculative_tokens = 6;  // k <= 5: the ring's spare slots (chains: speculative_mtp_test)
  EngineConfig config;
  config.speculative = two;
  EXPECT_FALSE(Engine::Create(LoadSharedModel("dsv4-tiny-a"), config).ok()) << "MTP drafts <= 5";
  EngineConfig on_llama;
  on_llama.speculative.method = SpeculativeConfig::Method::kMtp;
  on_llama.speculative.num_speculative_tokens = 1;
  if (fs::exists(kShared / "models/stories260K/config.json")) {
    EXPECT_FALSE(Engine::Create(LoadSharedModel("stories260K"), on_llama).ok())
        << "Llama has no MTP";
  }
}

// MTP numerics through the serving interface (ForwardWithStreams + MtpLastLogits) against the
// golden `mtp_logits_last` (prompts 40 and 300) with the README's end-to-end thresholds, in both
// numeric tiers: A (BF16 casts) against the official goldens, mean abs Δ <= 0.136 and each
// position's max abs Δ <= 1.09 (the 90th-percentile bound; one position per prompt), and
// B (FP32 activations) against `mtp_logits_last_fp32`, mean abs Δ <= 0.018 and max <= 0.205;
// the argmax agrees wherever the golden's top-2 gap exceeds twice the observed error (README
// item 5).
TEST(SpecModelTest, Dsv4TinyMtpLogitsThroughTheServingInterfaceMatchGolden) {
  const fs::path golden = kShared / "golden/dsv4-tiny-a";
  if (!fs::exists(golden / "prompt_040.json")) GTEST_SKIP() << "no goldens";
  for (const bool fp32 : {false, true}) {
    model::LoadOptions lo;
    lo.fp32_activations = fp32;
    lo.show_progress = false;
    auto loaded = model::LoadModel((kShared / "models/dsv4-tiny-a").string(), lo);
    ASSERT_OK(loaded.status());
    std::unique_ptr<model::CausalLM> m = *std::move(loaded);
    const model::KvLayout& layout = m->kv_layout();
    double sum_abs = 0;
    int64_t n = 0;
    for (const char* name : {"prompt_040.json", "prompt_300.json"}) {
      SCOPED_TRACE(std::string(name) + (fp32 ? " tier B" : " tier A"));
      std::ifstream in(golden / name);
      const nlohmann::json g = nlohmann::json::parse(in);
      const std::vector<int32_t> prompt = g["prompt"].get<std::vector<int32_t>>();
      const std::vector<float> want =
          g[fp32 ? "mtp_logits_last_fp32" : "mtp_logits_last"].get<std::vector<float>>();
      const int64_t blocks = (static_cast<int64_t>(prompt.size()) + 127) / 128;
      std::vector<uint8_t*> arenas;
      auto arena = [&](int64_t bytes) {
        uint8_t* p = static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
        std::memset(p, 0, bytes);
        arenas.push_back(p);
        return p;
      };
      model::KvCacheView kv{arena(blocks * layout.BlockBytes()), blocks,
                            arena(layout.StateBytes()), 1};
      std::vector<int32_t> table(blocks);
      for (int64_t b = 0; b < blocks; ++b) table[b] = static_cast<int32_t>(b);
      model::ForwardBatch batch;
      model::SequenceChunk chunk;
      chunk.tokens = prompt;
      chunk.block_table = table;
      chunk.state_slot = 0;
      batch.chunks.push_back(chunk);
      model::ForwardOutput out;
      std::vector<float> streams;
      ASSERT_OK(m->ForwardWithStreams(batch, kv, &out, &streams));
      ASSERT_EQ(static_cast<int64_t>(streams.size()),
                static_cast<int64_t>(prompt.size()) * m->mtp_stream_floats());
      std::vector<int32_t> next(prompt.begin() + 1, prompt.end());
      next.push_back(g["mtp_next"].get<int32_t>());
      std::vector<float> got;
      ASSERT_OK(m->MtpLastLogits(0, streams, next, 0, kv, &got));
      ASSERT_EQ(got.size(), want.size());
      double max_abs = 0;
      for (size_t v = 0; v < got.size(); ++v) {
        const double d = std::abs(double(got[v]) - want[v]);
        max_abs = std::max(max_abs, d);
        sum_abs += d;
      }
      n += static_cast<int64_t>(got.size());
      EXPECT_LE(max_abs, fp32 ? 0.205 : 1.09);
      std::vector<float> sorted = want;
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      if (sorted[0] - sorted[1] > 2 * max_abs) {
        EXPECT_EQ(std::max_element(got.begin(), got.end()) - got.begin(),
                  std::max_element(want.begin(), want.end()) - want.begin());
      }
      std::printf("MTP %s tier %c: max abs %.4f\n", name, fp32 ? 'B' : 'A', max_abs);
      for (uint8_t* p : arenas) std::free(p);
    }
    EXPECT_LE(sum_abs / static_cast<double>(n), fp32 ? 0.018 : 0.136) << (fp32 ? "B" : "A");
    std::printf("MTP tier %c: mean abs %.4f\n", fp32 ? 'B' : 'A', sum_abs / n);
  }
}

// --- Jump-forward decoding --------------------------------------------------------------------

class JumpForwardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kShared / "models/stories260K/config.json")) GTEST_SKIP() << "no stories260K";
    auto tok = Tokenizer::FromDirectory((kShared / "models/stories260K").string());
    ASSERT_OK(tok.status());
    tokenizer_ = std::move(*tok);
    prompt_ = {tokenizer_->bos_id()};
    for (int32_t id : tokenizer_->EncodeText("Once upon a time")) prompt_.push_back(id);
  }
  std::string Text(std::vector<int32_t> ids) const {
    if (!ids.empty() && ids.back() == tokenizer_->eos_id()) ids.pop_back();
    std::string out;
    for (int32_t id : ids) out += tokenizer_->TokenBytes(id);
    return out;
  }
  struct Result {
    std::vector<std::string> texts;
    std::vector<FinishReason> finishes;
    int64_t forwards = 0;
    int64_t output_tokens = 0;
    int64_t forced = 0;
  };
  Result Generate(const std::string& schema, bool jump_forward, int seeds, int max_tokens,
                  SpeculativeConfig spec = {}) {
    EngineConfig cfg;
    cfg.kv_memory_bytes = 64 << 20;
    cfg.jump_forward = jump_forward;
    cfg.speculative = std::move(spec);
    // One request at a time: the forward count is then the request's own.
    cfg.max_num_seqs = 1;
    auto llm = LLM::Create(LoadSharedModel("stories260K"), cfg, *tokenizer_);
    CHECK(llm.ok()) << llm.status();
    std::vector<SamplingParams> params(seeds);
    for (int s = 0; s < seeds; ++s) {
      params[s].temperature = 1.0f;
      params[s].seed = 300 + s;
      params[s].max_tokens = max_tokens;
      StructuredOutputArgs a;
      a.schema = schema;
      params[s].so_args = a;
    }
    auto out = (*llm)->Generate(std::vector<std::vector<int32_t>>(seeds, prompt_), params);
    CHECK(out.ok()) << out.status();
    Result r;
    for (const GenerateOutput& g : *out) {
      r.texts.push_back(Text(g.samples[0].token_ids));
      r.finishes.push_back(g.samples[0].finish);
    }
    (*llm)->engine().Shutdown(int64_t{5} * 1000 * 1000 * 1000);
    const EngineStats st = (*llm)->engine().Stats();
    r.forwards = st.num_forward_passes;
    r.output_tokens = st.total_output_tokens;
    r.forced = st.jump_forward_tokens;
    return r;
  }
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<int32_t> prompt_;
};

constexpr char kLongNames[] = R"({"type":"object","properties":{
  "customer_identification_number":{"type":"integer","minimum":0,"maximum":99},
  "preferred_delivery_window":{"enum":["morning","afternoon","evening"]},
  "requires_signature_on_delivery":{"type":"boolean"}},
  "required":["customer_identification_number","preferred_delivery_window",
              "requires_signature_on_delivery"],"additionalProperties":false})";

// Every output is valid against the schema (checked with nlohmann::json and by hand), fewer
// forward passes are needed with jump-forward on, and forced tokens were appended.
TEST_F(JumpForwardTest, SchemaOutputsValidWithFewerForwardPasses) {
  const Result on = Generate(kLongNames, true, 6, 200);
  const Result off = Generate(kLongNames, false, 6, 200);
  for (const Result* r : {&on, &off}) {
    for (size_t i = 0; i < r->texts.size(); ++i) {
      ASSERT_EQ(r->finishes[i], FinishReason::kStop) << r->texts[i];
      nlohmann::json j = nlohmann::json::parse(r->texts[i], nullptr, false);
      ASSERT_FALSE(j.is_discarded()) << r->texts[i];
      ASSERT_TRUE(j.is_object());
      EXPECT_EQ(j.size(), 3u);
      ASSERT_TRUE(j["customer_identification_number"].is_number_integer()) << r->texts[i];
      EXPECT_GE(j["customer_identification_number"].get<int>(), 0);
      EXPECT_LE(j["customer_identification_number"].get<int>(), 99);
      const std::string w = j["preferred_delivery_window"].get<std::string>();
      EXPECT_TRUE(w == "morning" || w == "afternoon" || w == "evening") << w;
      EXPECT_TRUE(j["requires_signature_on_delivery"].is_boolean());
    }
  }
  EXPECT_GT(on.forced, 0);
  EXPECT_EQ(off.forced, 0);
  EXPECT_LT(on.forwards * 2, off.forwards) << "on " << on.forwards << " off " << off.forwards;
  std::printf("jump-forward: forwards %lld (on) vs %lld (off); forwards per output token %.3f vs "
              "%.3f\n",
              static_cast<long long>(on.forwards), static_cast<long long>(off.forwards),
              double(on.forwards) / on.output_tokens, double(off.forwards) / off.output_tokens);
}

// Structured output with speculation (issue #26): 100 seeded schema requests, drafts from a
// random drafter (mostly tokens the grammar rejects) and from n-gram lookup, jump-forward off so
// that every token goes through verification: every output validates, and the texts equal the
// run without speculation (a draft the grammar rejects is never accepted: the target's token at
// each row is sampled under that row's grammar mask).
TEST_F(JumpForwardTest, HundredSeededSchemaRequestsWithSpeculationValidateAndEqualOff) {
  const Result off = Generate(kLongNames, false, 100, 200);
  SpeculativeConfig random;
  random.method = SpeculativeConfig::Method::kCustom;
  random.num_speculative_tokens = 4;
  random.drafter = std::make_shared<RandomDrafter>(512, 5);
  SpeculativeConfig ngram;
  ngram.method = SpeculativeConfig::Method::kNgram;
  ngram.num_speculative_tokens = 3;
  ngram.prompt_lookup_min = 1;
  for (const SpeculativeConfig& spec : {random, ngram}) {
    const Result on = Generate(kLongNames, false, 100, 200, spec);
    ASSERT_EQ(on.texts.size(), 100u);
    EXPECT_EQ(on.texts, off.texts);
    for (size_t i = 0; i < on.texts.size(); ++i) {
      ASSERT_EQ(on.finishes[i], FinishReason::kStop) << on.texts[i];
      nlohmann::json j = nlohmann::json::parse(on.texts[i], nullptr, false);
      ASSERT_FALSE(j.is_discarded()) << on.texts[i];
      ASSERT_TRUE(j.is_object() && j.size() == 3) << on.texts[i];
      ASSERT_TRUE(j["customer_identification_number"].is_number_integer());
      const int n = j["customer_identification_number"].get<int>();
      EXPECT_TRUE(n >= 0 && n <= 99) << on.texts[i];
      const std::string w = j["preferred_delivery_window"].get<std::string>();
      EXPECT_TRUE(w == "morning" || w == "afternoon" || w == "evening") << w;
      EXPECT_TRUE(j["requires_signature_on_delivery"].is_boolean());
    }
  }
}

// Jump-forward with speculation on top: still valid, and the tokens are those of jump-forward
// alone (speculation is lossless).
TEST_F(JumpForwardTest, WithNgramSpeculationEqualsJumpForwardAlone) {
  SpeculativeConfig spec;
  spec.method = SpeculativeConfig::Method::kNgram;
  spec.num_speculative_tokens = 3;
  spec.prompt_lookup_min = 1;
  const Result plain = Generate(kLongNames, true, 4, 200);
  const Result with_spec = Generate(kLongNames, true, 4, 200, spec);
  EXPECT_EQ(with_spec.texts, plain.texts);
}

// The forced text is tokenized without blocking a longer token: after a forced run the model's
// next token may still be any token the grammar allows. Checked on an enum whose values share a
// long prefix: the forced part stops before the shared prefix could merge with the rest.
TEST_F(JumpForwardTest, ForcedTokensSpellTheForcedTextAndHoldBackAPrefixOfALongerToken) {
  EngineConfig cfg;
  cfg.kv_memory_bytes = 32 << 20;
  auto llm = LLM::Create(LoadSharedModel("stories260K"), cfg, *tokenizer_);
  ASSERT_OK(llm.status());
  structured::ConstraintSpec spec;
  spec.kind = structured::ConstraintSpec::Kind::kRegex;
  spec.text = "Once upon a time there was a (cat|dog)";
  auto grammar = (*llm)->grammar_compiler()->Get(spec);
  ASSERT_OK(grammar.status());
  GrammarConstraint gc(*grammar);
  ASSERT_TRUE(gc.Sync({}));
  const std::vector<int32_t> forced = gc.ForcedTokens(100);
  std::string text;
  for (int32_t id : forced) text += tokenizer_->TokenBytes(id);
  const std::string full = "Once upon a time there was a ";
  // A prefix of the forced text, and what is left is a proper prefix of some vocabulary token
  // (or empty only if no token continues it).
  ASSERT_LE(text.size(), full.size());
  EXPECT_EQ(full.substr(0, text.size()), text);
  EXPECT_GE(forced.size(), 3u);
  const std::string rest = full.substr(text.size());
  ASSERT_FALSE(rest.empty()) << "the trailing space can start a longer token";
  bool longer = false;
  for (int32_t id = 0; id < tokenizer_->vocab_size(); ++id) {
    const std::string b(tokenizer_->TokenBytes(id));
    if (b.size() > rest.size() && b.compare(0, rest.size(), rest) == 0) longer = true;
  }
  EXPECT_TRUE(longer) << "held back '" << rest << "' though no longer token starts with it";
  // The matcher follows the forced tokens.
  std::vector<int32_t> out = forced;
  EXPECT_TRUE(gc.Sync(out));
}

}  // namespace
}  // namespace deepinfer::engine
