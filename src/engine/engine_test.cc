// Engine tests against the FakeModel (testing/fake_model.h), whose logits depend on every KV row
// it reads back, and whose ReferenceLogits() recomputes them without any cache: the oracle.
#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/check.h"
#include "common/config.h"
#include "common/status_matchers.h"
#include "engine/llm.h"
#include "engine/testing/engine_test_util.h"
#include "engine/testing/fake_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deepinfer::engine {
namespace {

using ::deepinfer::engine::testing::ExpectAllReturned;
using ::deepinfer::engine::testing::FakeModel;
using ::deepinfer::engine::testing::FakeModelOptions;
using ::deepinfer::engine::testing::Greedy;
using ::deepinfer::engine::testing::MakeLLM;
using ::deepinfer::engine::testing::MakePrompts;
using ::deepinfer::engine::testing::ReferenceGreedy;
using ::deepinfer::engine::testing::RunStress;
using ::deepinfer::testing::StatusIs;
using ::testing::HasSubstr;

class EngineModeTest : public ::testing::TestWithParam<bool> {};  // param: async

TEST_P(EngineModeTest, GreedyBatchOf16MatchesAloneAndReference) {
  FakeModelOptions mo;
  const FakeModel ref(mo);
  const auto prompts = MakePrompts(16, 1, 700, 1);
  EngineConfig config;
  config.async_scheduling = GetParam();
  config.max_num_batched_tokens = 256;  // forces chunked prefill of the long prompts
  config.max_num_seqs = 16;
  auto llm = MakeLLM(mo, config);
  std::vector<SamplingParams> params;
  for (int i = 0; i < 16; ++i) params.push_back(Greedy(5 + 7 * i));
  ASSERT_OK_AND_ASSIGN(auto batch, llm->Generate(prompts, params));
  for (int i = 0; i < 16; ++i) {
    FinishReason finish;
    const auto expected = ReferenceGreedy(ref, prompts[i], params[i].max_tokens, &finish);
    ASSERT_OK_AND_ASSIGN(auto alone, llm->Generate({prompts[i]}, params[i]));
    EXPECT_EQ(batch[i].samples[0].token_ids, expected) << "request " << i;
    EXPECT_EQ(batch[i].samples[0].finish, finish) << "request " << i;
    EXPECT_EQ(alone[0].samples[0].token_ids, expected) << "request " << i;
  }
  ExpectAllReturned(llm->engine());
}

TEST_P(EngineModeTest, PreemptionUnderTinyBudgetKeepsGreedyOutputs) {
  FakeModelOptions mo;
  mo.eos_period = 0;  // every request runs to max_tokens: maximum pressure
  const FakeModel ref(mo);
  const auto prompts = MakePrompts(12, 100, 300, 2);
  EngineConfig config;
  config.async_scheduling = GetParam();
  config.max_num_seqs = 8;
  config.max_num_batched_tokens = 128;
  // 6 blocks (768 positions) for 12 requests of up to 2-4 blocks each.
  config.kv_memory_bytes =
      6 * FakeModel(mo).kv_layout().BlockBytes() + 8 * FakeModel(mo).kv_layout().StateBytes();
  auto llm = MakeLLM(mo, config);
  ASSERT_OK_AND_ASSIGN(auto out, llm->Generate(prompts, Greedy(120)));
  for (size_t i = 0; i < prompts.size(); ++i) {
    FinishReason finish;
    EXPECT_EQ(out[i].samples[0].token_ids, ReferenceGreedy(ref, prompts[i], 120, &finish))
        << "request " << i;
  }
  EXPECT_GT(llm->engine().Stats().num_preemptions, 0);
  ExpectAllReturned(llm->engine());
}

TEST_P(EngineModeTest, SeededSamplingIsBatchIndependentAndNSamplesDiffer) {
  FakeModelOptions mo;
  EngineConfig config;
  config.async_scheduling = GetParam();
  auto llm = MakeLLM(mo, config);
  const auto prompts = MakePrompts(10, 5, 200, 3);
  SamplingParams seeded;
  seeded.temperature = 1.0f;
  seeded.seed = 1234;
  seeded.max_tokens = 40;
  seeded.logprobs = 2;
  ASSERT_OK_AND_ASSIGN(auto alone, llm->Generate({prompts[0]}, seeded));
  std::vector<SamplingParams> mixed(prompts.size());
  for (auto& p : mixed) p.max_tokens = 30;  // unseeded, temperature 1
  mixed[4] = seeded;
  std::vector<std::vector<int32_t>> mixed_prompts = prompts;
  mixed_prompts[4] = prompts[0];
  ASSERT_OK_AND_ASSIGN(auto batch, llm->Generate(mixed_prompts, mixed));
  EXPECT_EQ(batch[4].samples[0].token_ids, alone[0].samples[0].token_ids);
  ASSERT_EQ(batch[4].samples[0].logprobs.size(), alone[0].samples[0].logprobs.size());
  for (size_t k = 0; k < alone[0].samples[0].logprobs.size(); ++k) {
    EXPECT_EQ(batch[4].samples[0].logprobs[k].logprob, alone[0].samples[0].logprobs[k].logprob);
  }

  // n = 4 with one seed: 4 different samples, each reproducible.
  SamplingParams n4 = seeded;
  n4.n = 4;
  n4.max_tokens = 30;
  n4.logprobs = -1;
  ASSERT_OK_AND_ASSIGN(auto first, llm->Generate({prompts[1]}, n4));
  ASSERT_OK_AND_ASSIGN(auto second, llm->Generate({prompts[1], prompts[2]}, n4));
  std::set<std::vector<int32_t>> distinct;
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(first[0].samples[s].token_ids, second[0].samples[s].token_ids) << "sample " << s;
    distinct.insert(first[0].samples[s].token_ids);
  }
  EXPECT_EQ(distinct.size(), 4u);
  ExpectAllReturned(llm->engine());
}

TEST_P(EngineModeTest, LogprobsBitwiseEqualAloneAndInBatchOf64) {
  FakeModelOptions mo;
  EngineConfig config;
  config.async_scheduling = GetParam();
  config.max_num_seqs = 65;
  auto llm = MakeLLM(mo, config);
  auto prompts = MakePrompts(65, 1, 300, 4);
  SamplingParams p = Greedy(20);
  p.logprobs = 3;
  p.prompt_logprobs = 2;
  ASSERT_OK_AND_ASSIGN(auto alone, llm->Generate({prompts[0]}, p));
  std::vector<std::vector<int32_t>> batch_prompts(prompts.begin() + 1, prompts.end());
  const int at = std::mt19937(99)() % 65;
  batch_prompts.insert(batch_prompts.begin() + at, prompts[0]);
  ASSERT_OK_AND_ASSIGN(auto batch, llm->Generate(batch_prompts, p));
  const SampleOutput& a = alone[0].samples[0];
  const SampleOutput& b = batch[at].samples[0];
  EXPECT_EQ(a.token_ids, b.token_ids);
  ASSERT_EQ(a.logprobs.size(), a.token_ids.size());
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
  for (size_t k = 0; k < a.logprobs.size(); ++k) {
    EXPECT_EQ(a.logprobs[k].logprob, b.logprobs[k].logprob);
    EXPECT_EQ(a.logprobs[k].top, b.logprobs[k].top);
  }
  // Against the oracle: prompt logprobs and the first generated token's logprob.
  const FakeModel ref(mo);
  const int64_t vocab = mo.vocab_size;
  const auto& prompt = prompts[0];
  std::vector<float> rows = ref.ReferenceLogits(prompt, /*all_rows=*/true);
  ASSERT_EQ(alone[0].prompt_logprobs.size(), prompt.size() - 1);
  for (size_t i = 0; i + 1 < prompt.size(); ++i) {
    double mx = -1e30, z = 0;
    for (int64_t v = 0; v < vocab; ++v) mx = std::max<double>(mx, rows[i * vocab + v]);
    for (int64_t v = 0; v < vocab; ++v) z += std::exp(rows[i * vocab + v] - mx);
    EXPECT_NEAR(alone[0].prompt_logprobs[i].logprob,
                rows[i * vocab + prompt[i + 1]] - mx - std::log(z), 1e-5);
    EXPECT_EQ(alone[0].prompt_logprobs[i].top.size(), 2u);
  }
  EXPECT_EQ(alone[0].prompt_logprobs, batch[at].prompt_logprobs);
  ExpectAllReturned(llm->engine());
}

TEST_P(EngineModeTest, StopConditions) {
  FakeModelOptions mo;
  mo.eos_period = 0;
  const FakeModel ref(mo);
  EngineConfig config;
  config.async_scheduling = GetParam();
  auto llm = MakeLLM(mo, config);
  const auto prompts = MakePrompts(1, 10, 10, 5);
  FinishReason finish;
  const auto expected = ReferenceGreedy(ref, prompts[0], 30, &finish);
  // Stop at the 6th token's id (first occurrence).
  SamplingParams p = Greedy(30);
  p.stop_token_ids = {expected[5]};
  ASSERT_OK_AND_ASSIGN(auto out, llm->Generate(prompts, p));
  const size_t first = std::find(expected.begin(), expected.end(), expected[5]) - expected.begin();
  EXPECT_EQ(out[0].samples[0].token_ids,
            std::vector<int32_t>(expected.begin(), expected.begin() + first + 1));
  EXPECT_EQ(out[0].samples[0].finish, FinishReason::kStop);
  // min_tokens masks the stop id until enough tokens are out.
  p.min_tokens = static_cast<int>(first) + 1;
  ASSERT_OK_AND_ASSIGN(auto out2, llm->Generate(prompts, p));
  EXPECT_GT(out2[0].samples[0].token_ids.size(), first + 1);
  EXPECT_NE(out2[0].samples[0].token_ids[first], expected[5]);
  // max_tokens.
  ASSERT_OK_AND_ASSIGN(auto out3, llm->Generate(prompts, Greedy(7)));
  EXPECT_EQ(out3[0].samples[0].token_ids.size(), 7u);
  EXPECT_EQ(out3[0].samples[0].finish, FinishReason::kLength);
  ExpectAllReturned(llm->engine());
}

TEST_P(EngineModeTest, EosStopsUnlessIgnored) {
  FakeModelOptions mo;  // EOS boosted about 1 position in 24
  const FakeModel ref(mo);
  EngineConfig config;
  config.async_scheduling = GetParam();
  auto llm = MakeLLM(mo, config);
  const auto prompts = MakePrompts(30, 3, 40, 6);
  ASSERT_OK_AND_ASSIGN(auto out, llm->Generate(prompts, Greedy(200)));
  int stopped = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (out[i].samples[0].finish == FinishReason::kStop) {
      ++stopped;
      EXPECT_EQ(out[i].samples[0].token_ids.back(), mo.eos_token_id);
    }
  }
  EXPECT_GT(stopped, 0);
  SamplingParams p = Greedy(200);
  p.ignore_eos = true;
  ASSERT_OK_AND_ASSIGN(auto out2, llm->Generate(prompts, p));
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(out2[i].samples[0].token_ids.size(), 200u);
    EXPECT_EQ(out2[i].samples[0].finish, FinishReason::kLength);
  }
  ExpectAllReturned(llm->engine());
}

TEST_P(EngineModeTest, Stress1000Requests) { RunStress(GetParam(), 1000, 7); }

TEST_P(EngineModeTest, AbortFreesEverythingAtOnce) {
  FakeModelOptions mo;
  mo.eos_period = 0;
  mo.forward_delay_us = 200;
  EngineConfig config;
  config.async_scheduling = GetParam();
  ASSERT_OK_AND_ASSIGN(auto engine, Engine::Create(std::make_unique<FakeModel>(mo), config));
  GenerateRequest req;
  req.request_id = "long";
  req.prompt = MakePrompts(1, 300, 300, 8)[0];
  req.params = Greedy(2000);
  req.params.ignore_eos = true;
  req.params.n = 3;
  ASSERT_OK_AND_ASSIGN(auto stream, engine->Submit(req));
  // Wait for a few tokens, then abort.
  int got = 0;
  while (got < 5) {
    auto o = stream->Next(std::chrono::seconds(10));
    ASSERT_TRUE(o.has_value());
    got += static_cast<int>(o->token_ids.size());
  }
  engine->Abort("long");
  int aborted = 0;
  while (auto o = stream->Next(std::chrono::seconds(10))) {
    if (o->finish.has_value()) {
      EXPECT_EQ(*o->finish, FinishReason::kAbort);
      ++aborted;
    }
  }
  EXPECT_EQ(aborted, 3);
  EXPECT_TRUE(stream->finished());
  // The id is free again once finished.
  for (int tries = 0; tries < 1000 && engine->Stats().kv_blocks_used != 0; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(engine->Stats().kv_blocks_used, 0);
  EXPECT_OK(engine->Submit(req).status());
  engine->Abort("long");
  ExpectAllReturned(*engine);
}

INSTANTIATE_TEST_SUITE_P(SyncAndAsync, EngineModeTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Async" : "Sync"; });

TEST(EngineTest, AsyncAndSyncGiveIdenticalOutputs) {
  FakeModelOptions mo;
  const auto prompts = MakePrompts(40, 1, 500, 9);
  std::vector<SamplingParams> params(prompts.size());
  std::mt19937 rng(10);
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].max_tokens = 1 + rng() % 50;
    params[i].seed = rng();
    params[i].top_p = 0.9f;
    params[i].logprobs = 1;
    if (i % 3 == 0) params[i].temperature = 0.0f;
  }
  std::vector<std::vector<GenerateOutput>> runs;
  for (bool async : {false, true}) {
    EngineConfig config;
    config.async_scheduling = async;
    config.max_num_batched_tokens = 200;
    config.max_num_seqs = 16;
    auto llm = MakeLLM(mo, config);
    ASSERT_OK_AND_ASSIGN(auto out, llm->Generate(prompts, params));
    runs.push_back(std::move(out));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(runs[0][i].samples[0].token_ids, runs[1][i].samples[0].token_ids) << i;
    EXPECT_EQ(runs[0][i].samples[0].finish, runs[1][i].samples[0].finish) << i;
    ASSERT_EQ(runs[0][i].samples[0].logprobs.size(), runs[1][i].samples[0].logprobs.size());
    for (size_t k = 0; k < runs[0][i].samples[0].logprobs.size(); ++k) {
      EXPECT_EQ(runs[0][i].samples[0].logprobs[k].logprob,
                runs[1][i].samples[0].logprobs[k].logprob);
    }
  }
}

TEST(EngineTest, SubmitRejectsBadRequestsWithClearErrors) {
  FakeModelOptions mo;
  mo.max_context = 1000;
  EngineConfig config;
  config.kv_memory_bytes = 4 * FakeModel(mo).kv_layout().BlockBytes() +
                           config.max_num_seqs * FakeModel(mo).kv_layout().StateBytes();
  ASSERT_OK_AND_ASSIGN(auto engine, Engine::Create(std::make_unique<FakeModel>(mo), config));
  GenerateRequest req;
  req.params = Greedy(10);
  EXPECT_THAT(engine->Submit(req).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty")));
  req.prompt = {5, 64};
  EXPECT_THAT(engine->Submit(req).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("vocabulary")));
  req.prompt = std::vector<int32_t>(1000, 3);
  EXPECT_THAT(engine->Submit(req).status(), StatusIs(absl::StatusCode::kOutOfRange));
  req.prompt = std::vector<int32_t>(995, 3);
  EXPECT_THAT(engine->Submit(req).status(),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("max_tokens")));
  req.prompt = std::vector<int32_t>(600, 3);  // 5 blocks > 4
  EXPECT_THAT(engine->Submit(req).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("KV blocks")));
  req.prompt = {3, 4};
  req.params.top_p = 2;
  EXPECT_THAT(engine->Submit(req).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("top_p")));
  req.params = Greedy(10);
  req.params.logit_bias = {{64, 1.0f}};
  EXPECT_THAT(engine->Submit(req).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("logit_bias")));
  req.params = Greedy(500);
  req.request_id = "dup";
  ASSERT_OK_AND_ASSIGN(auto s1, engine->Submit(req));
  EXPECT_THAT(engine->Submit(req).status(), StatusIs(absl::StatusCode::kAlreadyExists));
  engine->Shutdown();
  EXPECT_THAT(engine->Submit(req).status(), StatusIs(absl::StatusCode::kFailedPrecondition));
  while (s1->Next().has_value()) {
  }
  EXPECT_TRUE(s1->finished());
  EXPECT_EQ(engine->Stats().kv_blocks_used, 0);
}

TEST(EngineTest, CreateRejectsTooSmallBudget) {
  EngineConfig config;
  config.kv_memory_bytes = 100;
  EXPECT_THAT(Engine::Create(std::make_unique<FakeModel>(), config).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("too small")));
}

}  // namespace
}  // namespace deepinfer::engine
