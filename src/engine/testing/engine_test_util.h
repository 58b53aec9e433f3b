// Helpers shared by the engine tests (engine_test.cc, engine_soak_test.cc). Test-only.
#ifndef DEEPINFER_ENGINE_TESTING_ENGINE_TEST_UTIL_H_
#define DEEPINFER_ENGINE_TESTING_ENGINE_TEST_UTIL_H_

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/check.h"
#include "common/status_matchers.h"
#include "engine/engine.h"
#include "engine/llm.h"
#include "engine/testing/fake_model.h"
#include "gtest/gtest.h"

namespace deepinfer::engine::testing {

inline std::unique_ptr<LLM> MakeLLM(const FakeModelOptions& mo, EngineConfig config) {
  auto llm = LLM::Create(std::make_unique<FakeModel>(mo), config);
  CHECK(llm.ok()) << std::string(llm.status().message());
  return std::move(*llm);
}

// Greedy generation computed from the cache-free reference logits.
inline std::vector<int32_t> ReferenceGreedy(const FakeModel& model, std::vector<int32_t> seq,
                                            int max_tokens, FinishReason* finish) {
  const int64_t vocab = model.info().vocab_size;
  std::vector<int32_t> out;
  *finish = FinishReason::kLength;
  while (static_cast<int>(out.size()) < max_tokens) {
    std::vector<float> row = model.ReferenceLogits(seq, /*all_rows=*/false);
    const int32_t t =
        static_cast<int32_t>(std::max_element(row.begin(), row.begin() + vocab) - row.begin());
    out.push_back(t);
    seq.push_back(t);
    if (t == model.info().eos_token_ids[0]) {
      *finish = FinishReason::kStop;
      break;
    }
  }
  return out;
}

inline std::vector<std::vector<int32_t>> MakePrompts(int count, int min_len, int max_len,
                                                     uint32_t seed, int vocab = 64) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < count; ++i) {
    const int len = std::uniform_int_distribution<int>(min_len, max_len)(rng);
    std::vector<int32_t> p(len);
    for (int32_t& t : p) t = std::uniform_int_distribution<int>(2, vocab - 1)(rng);
    prompts.push_back(p);
  }
  return prompts;
}

inline SamplingParams Greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  return p;
}

inline void ExpectAllReturned(Engine& engine) {
  engine.Shutdown(int64_t{5} * 1000 * 1000 * 1000);
  const EngineStats s = engine.Stats();
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.state_slots_used, 0);
  EXPECT_EQ(s.num_running, 0);
  EXPECT_EQ(s.num_waiting, 0);
}

// Stress: random lengths, random max_tokens, random aborts; every block and slot comes back
// and every sample of every request finishes exactly once.
inline void RunStress(bool async, int num_requests, uint32_t seed) {
  FakeModelOptions mo;
  const FakeModel ref(mo);
  EngineConfig config;
  config.async_scheduling = async;
  config.max_num_seqs = 32;
  config.max_num_batched_tokens = 512;
  config.kv_memory_bytes =
      40 * FakeModel(mo).kv_layout().BlockBytes() + 32 * FakeModel(mo).kv_layout().StateBytes();
  ASSERT_OK_AND_ASSIGN(auto engine, Engine::Create(std::make_unique<FakeModel>(mo), config));
  std::mt19937 rng(seed);
  const auto prompts = MakePrompts(num_requests, 1, 400, seed);
  struct Live {
    std::shared_ptr<RequestStream> stream;
    SamplingParams params;
    bool aborted = false;
    std::map<int, std::vector<int32_t>> tokens;
    std::map<int, int> finishes;
    std::map<int, FinishReason> reason;
  };
  std::vector<Live> live(num_requests);
  std::set<std::string> ids;
  auto drain = [&](Live& l) {
    for (StepOutput& o : l.stream->Drain()) {
      auto& t = l.tokens[o.sample_index];
      t.insert(t.end(), o.token_ids.begin(), o.token_ids.end());
      if (o.finish.has_value()) {
        ++l.finishes[o.sample_index];
        l.reason[o.sample_index] = *o.finish;
      }
    }
  };
  for (int i = 0; i < num_requests; ++i) {
    GenerateRequest req;
    req.request_id = "r" + std::to_string(i);
    req.prompt = prompts[i];
    req.params = Greedy(std::uniform_int_distribution<int>(1, 60)(rng));
    if (rng() % 5 == 0) {
      req.params.temperature = 1.0f;
      req.params.n = 1 + rng() % 3;
    }
    live[i].params = req.params;
    ASSERT_OK_AND_ASSIGN(live[i].stream, engine->Submit(req));
    ids.insert(req.request_id);
    // Abort a random earlier request now and then.
    if (rng() % 7 == 0) {
      const int victim = rng() % (i + 1);
      engine->Abort("r" + std::to_string(victim));
      live[victim].aborted = true;
    }
    if (i % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int i = 0; i < num_requests; ++i) {
    while (!live[i].stream->finished()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    drain(live[i]);
    for (int s = 0; s < live[i].params.n; ++s) {
      ASSERT_EQ(live[i].finishes[s], 1) << "request " << i << " sample " << s;
      if (live[i].reason[s] == FinishReason::kAbort) {
        EXPECT_TRUE(live[i].aborted) << "request " << i;
        continue;
      }
      EXPECT_LE(live[i].tokens[s].size(), static_cast<size_t>(live[i].params.max_tokens));
      if (live[i].params.greedy()) {
        FinishReason finish;
        EXPECT_EQ(live[i].tokens[s],
                  ReferenceGreedy(ref, prompts[i], live[i].params.max_tokens, &finish))
            << "request " << i;
      }
    }
  }
  const EngineStats stats = engine->Stats();
  std::printf("stress: %d requests, %lld steps, %lld preemptions, %lld output tokens\n",
              num_requests, static_cast<long long>(stats.num_steps),
              static_cast<long long>(stats.num_preemptions),
              static_cast<long long>(stats.total_output_tokens));
  EXPECT_EQ(stats.num_finished_requests, num_requests);
  EXPECT_EQ(stats.kv_blocks_used, 0);
  EXPECT_EQ(stats.state_slots_used, 0);
  ExpectAllReturned(*engine);
}

}  // namespace deepinfer::engine::testing

#endif  // DEEPINFER_ENGINE_TESTING_ENGINE_TEST_UTIL_H_
