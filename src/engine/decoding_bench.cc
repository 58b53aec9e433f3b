// Decoding benchmarks (make bench; issues #22 part 3 and #26), on stories260K:
//  - BM_JumpForwardSchema: forward passes per output token for a JSON schema with long
//    property names, jump-forward on and off (the same seeded requests, one at a time).
//  - BM_NgramSpeculation: output tokens/s and acceptance with n-gram speculation off and on
//    (k = 3) at 1, 16 and 64 concurrent greedy requests, printed as ratios of the same run.
//  - BM_NgramVarlen: n-gram k = 5, speculation off / fixed length / variable length (async
//    and sync planners, profiled cost table) at 1, 16 and 64 concurrent requests, as ratios.
//  - BM_Dsv4NgramRollback (dsv4-tiny-a, DeepSeek-V4 window rings and compressors): n-gram
//    speculation off, on with frontier rollback (the model's layout), and on with the slot
//    copy + restore + recompute path (the same model behind a layout that does not declare
//    frontier rollback), at 1 and 16 concurrent greedy requests (16 also without async
//    scheduling).
//  - BM_Dsv4MtpSpeculation (the DeepSeek-V4 `bench` preset): MTP speculation off, fixed k = 1
//    and k = 3, and variable length (k = 3) at 1, 16 and 64 concurrent greedy requests (random
//    weights: acceptance near 0).
// Figures are noisy on a shared machine: compare the ratios, and record the load average.
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/check.h"
#include "engine/engine.h"
#include "engine/llm.h"
#include "engine/testing/speculative_testing.h"
#include "model/deepseek_v4_make_test_model.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::engine {
namespace {

using ::deepinfer::engine::testing::SlotRestoreModel;

const std::string kStories = std::string(DEEPINFER_SHARED_DIR) + "/models/stories260K";

constexpr char kLongNames[] = R"({"type":"object","properties":{
  "customer_identification_number":{"type":"integer","minimum":0,"maximum":99999},
  "preferred_delivery_window_description":{"enum":["early morning","late afternoon","evening"]},
  "requires_signature_on_delivery_confirmation":{"type":"boolean"},
  "additional_delivery_instructions_text":{"type":"string","maxLength":24}},
  "required":["customer_identification_number","preferred_delivery_window_description",
              "requires_signature_on_delivery_confirmation",
              "additional_delivery_instructions_text"],"additionalProperties":false})";

std::unique_ptr<LLM> MakeLLM(const Tokenizer& tok, EngineConfig config) {
  model::LoadOptions lo;
  lo.show_progress = false;
  auto m = model::LoadModel(kStories, lo);
  CHECK(m.ok()) << m.status();
  config.kv_memory_bytes = 256 << 20;
  auto llm = LLM::Create(std::move(*m), config, tok);
  CHECK(llm.ok()) << llm.status();
  return std::move(*llm);
}

std::vector<int32_t> Prompt(const Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> p = {tok.bos_id()};
  for (int32_t id : tok.EncodeText(text)) p.push_back(id);
  return p;
}

// The four stories260K prompts, repeated to `concurrency` requests.
std::vector<std::vector<int32_t>> StoriesPrompts(const Tokenizer& tok, int concurrency) {
  const char* texts[] = {"Once upon a time", "Lily and Ben went to the park.",
                         "The cat sat on the mat.", "One day, a little girl"};
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < concurrency; ++i) prompts.push_back(Prompt(tok, texts[i % 4]));
  return prompts;
}

// stories260K's tokenizer, or null after marking `state` skipped when the checkpoint is absent.
std::unique_ptr<Tokenizer> StoriesTokenizer(benchmark::State& state) {
  if (!std::filesystem::exists(kStories + "/config.json")) {
    state.SkipWithError("stories260K absent");
    return nullptr;
  }
  auto tok = Tokenizer::FromDirectory(kStories);
  CHECK(tok.ok());
  return std::move(*tok);
}

// Greedy sampling of `max_tokens` new tokens (all of them when `ignore_eos`).
SamplingParams GreedyParams(int max_tokens, bool ignore_eos = false) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = ignore_eos;
  return p;
}

// `count` deterministic prompts of `len` tokens for random-weight checkpoints: token j of prompt
// i is base + (i * mul_i + j * mul_j) % modulo.
std::vector<std::vector<int32_t>> SyntheticPrompts(int count, int len, int base, int mul_i,
                                                   int mul_j, int modulo) {
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < count; ++i) {
    std::vector<int32_t> p;
    for (int j = 0; j < len; ++j) p.push_back(base + (i * mul_i + j * mul_j) % modulo);
    prompts.push_back(p);
  }
  return prompts;
}

// N-gram prompt lookup (n = 1..4) proposing `k` drafts per step.
void SetNgram(SpeculativeConfig& spec, int k) {
  spec.method = SpeculativeConfig::Method::kNgram;
  spec.num_speculative_tokens = k;
  spec.prompt_lookup_min = 1;
  spec.prompt_lookup_max = 4;
}

// Draft tokens accepted per draft token proposed (0 without drafts).
double Acceptance(const EngineStats& st) {
  return st.spec_draft_tokens ? double(st.spec_accepted_tokens) / st.spec_draft_tokens : 0;
}

// Tokens committed per verify step: 1 sampled + the accepted drafts (1 without verifies).
double MeanAcceptedLen(const EngineStats& st) {
  return st.spec_verify_steps ? 1.0 + double(st.spec_accepted_tokens) / st.spec_verify_steps : 1.0;
}

// Drafts verified per verify step (0 without verifies).
double VerifiedPerStep(const EngineStats& st) {
  return st.spec_verify_steps ? double(st.spec_draft_tokens) / st.spec_verify_steps : 0;
}

// The set-up of a stories260K benchmark over `state.range(0)` concurrent requests: its tokenizer
// in *tok and StoriesPrompts in *prompts; false after marking `state` skipped when the checkpoint
// is absent.
bool StoriesConcurrentSetUp(benchmark::State& state, std::unique_ptr<Tokenizer>* tok,
                            std::vector<std::vector<int32_t>>* prompts) {
  *tok = StoriesTokenizer(state);
  if (*tok == nullptr) return false;
  *prompts = StoriesPrompts(**tok, static_cast<int>(state.range(0)));
  return true;
}

// Registration of the concurrency sweeps: 1, 16 and 64 concurrent requests, one iteration each
// in wall-clock seconds.
void OneSixteenSixtyFourRequests(benchmark::internal::Benchmark* b) {
  b->Arg(1)->Arg(16)->Arg(64)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();
}

// Generates `prompts` with `p` on `llm` and shuts its engine down: output tokens per second of
// wall time, and the engine's final counters in *stats.
double TimedGenerate(LLM& llm, const std::vector<std::vector<int32_t>>& prompts,
                     const SamplingParams& p, EngineStats* stats) {
  const auto t0 = std::chrono::steady_clock::now();
  auto out = llm.Generate(prompts, p);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(out.ok()) << out.status();
  llm.engine().Shutdown(int64_t{5} * 1000 * 1000 * 1000);
  *stats = llm.engine().Stats();
  return static_cast<double>(stats->total_output_tokens) / s;
}

void BM_JumpForwardSchema(benchmark::State& state) {
  std::unique_ptr<Tokenizer> tok = StoriesTokenizer(state);
  if (tok == nullptr) return;
  for (auto _ : state) {
    double per_token[2] = {0, 0};
    for (int on = 0; on < 2; ++on) {
      EngineConfig cfg;
      cfg.jump_forward = on == 1;
      cfg.max_num_seqs = 1;  // one request at a time: forward passes are its own
      auto llm = MakeLLM(*tok, cfg);
      std::vector<SamplingParams> params(8);
      for (int s = 0; s < 8; ++s) {
        params[s].temperature = 1.0f;
        params[s].seed = 40 + s;
        params[s].max_tokens = 400;
        StructuredOutputArgs a;
        a.schema = kLongNames;
        params[s].so_args = a;
      }
      auto out = llm->Generate(
          std::vector<std::vector<int32_t>>(8, Prompt(*tok, "Once upon a time")), params);
      CHECK(out.ok()) << out.status();
      llm->engine().Shutdown(int64_t{5} * 1000 * 1000 * 1000);
      const EngineStats st = llm->engine().Stats();
      per_token[on] = static_cast<double>(st.num_forward_passes) /
                      static_cast<double>(std::max<int64_t>(1, st.total_output_tokens));
      state.counters[on ? "tokens_on" : "tokens_off"] =
          static_cast<double>(st.total_output_tokens);
    }
    state.counters["forwards_per_token_off"] = per_token[0];
    state.counters["forwards_per_token_on"] = per_token[1];
    state.counters["ratio_off_over_on"] = per_token[0] / per_token[1];
  }
}
BENCHMARK(BM_JumpForwardSchema)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

void BM_NgramSpeculation(benchmark::State& state) {
  std::unique_ptr<Tokenizer> tok;
  std::vector<std::vector<int32_t>> prompts;
  if (!StoriesConcurrentSetUp(state, &tok, &prompts)) return;
  const SamplingParams p = GreedyParams(200);
  for (auto _ : state) {
    double tps[2] = {0, 0};
    for (int on = 0; on < 2; ++on) {
      EngineConfig cfg;
      cfg.max_num_seqs = 64;
      if (on) {
        SetNgram(cfg.speculative, 3);
      }
      auto llm = MakeLLM(*tok, cfg);
      EngineStats st;
      tps[on] = TimedGenerate(*llm, prompts, p, &st);
      if (on) {
        state.counters["acceptance"] = Acceptance(st);
        state.counters["mean_accepted_len"] = MeanAcceptedLen(st);
      }
    }
    state.counters["tokens_per_s_off"] = tps[0];
    state.counters["tokens_per_s_ngram"] = tps[1];
    state.counters["speedup"] = tps[1] / tps[0];
  }
}
BENCHMARK(BM_NgramSpeculation)->Apply(OneSixteenSixtyFourRequests);

// Variable-length verification (spec §5): n-gram k = 5 with fixed-length verification vs the
// planner (async budget from stale confidences, split by current ones; cost table profiled at
// start-up; also with the measured-benefit gate, the CLI's default), and speculation off, at 1,
// 16 and 64 concurrent greedy requests. Ratios of the same run; acceptance, mean accepted length
// and verified drafts per verify step show what the planner trimmed.
void BM_NgramVarlen(benchmark::State& state) {
  std::unique_ptr<Tokenizer> tok;
  std::vector<std::vector<int32_t>> prompts;
  if (!StoriesConcurrentSetUp(state, &tok, &prompts)) return;
  const SamplingParams p = GreedyParams(200);
  for (auto _ : state) {
    // 0 = off, 1 = fixed k = 5, 2 = varlen async, 3 = varlen sync (Algorithm 1),
    // 4 = varlen async with the measured-benefit gate.
    constexpr int kModes = 5;
    double tps[kModes] = {};
    for (int mode = 0; mode < kModes; ++mode) {
      EngineConfig cfg;
      cfg.max_num_seqs = 64;
      if (mode > 0) {
        SetNgram(cfg.speculative, 5);
        if (mode >= 2) {
          cfg.speculative.varlen =
              mode == 3 ? VarlenMode::kSyncGreedyStop : VarlenMode::kAsyncBudget;
          cfg.speculative.profile_cost_table = true;
          cfg.speculative.varlen_benefit_gate = mode == 4;
        }
      }
      auto llm = MakeLLM(*tok, cfg);
      EngineStats st;
      tps[mode] = TimedGenerate(*llm, prompts, p, &st);
      const char* name[] = {"off", "fixed", "async", "sync", "gated"};
      if (mode > 0) {
        state.counters[std::string("acceptance_") + name[mode]] = Acceptance(st);
        state.counters[std::string("verified_per_step_") + name[mode]] = VerifiedPerStep(st);
        state.counters[std::string("mean_accepted_len_") + name[mode]] = MeanAcceptedLen(st);
        state.counters[std::string(name[mode]) + "_vs_off"] = tps[mode] / tps[0];
      }
      if (mode == 4) {
        state.counters["gated_planned_steps"] = static_cast<double>(st.spec_varlen_steps);
        state.counters["gated_full_steps"] = static_cast<double>(st.spec_varlen_benefit_gated_steps);
      }
    }
    state.counters["tokens_per_s_off"] = tps[0];
    state.counters["async_vs_fixed"] = tps[2] / tps[1];
    state.counters["sync_vs_fixed"] = tps[3] / tps[1];
    state.counters["gated_vs_fixed"] = tps[4] / tps[1];
  }
}
BENCHMARK(BM_NgramVarlen)->Apply(OneSixteenSixtyFourRequests);

const std::string kDsv4Tiny = std::string(DEEPINFER_SHARED_DIR) + "/models/dsv4-tiny-a";

void BM_Dsv4NgramRollback(benchmark::State& state) {
  if (!std::filesystem::exists(kDsv4Tiny + "/config.json")) {
    state.SkipWithError("dsv4-tiny-a absent");
    return;
  }
  const std::vector<std::vector<int32_t>> prompts =
      SyntheticPrompts(static_cast<int>(state.range(0)), 24, 3, 37, 11, 400);
  const SamplingParams p = GreedyParams(48, /*ignore_eos=*/true);
  for (auto _ : state) {
    double tps[3] = {0, 0, 0}, fwd[3] = {0, 0, 0};
    for (int mode = 0; mode < 3; ++mode) {  // off, frontier rollback, slot restore
      EngineConfig cfg;
      cfg.max_num_seqs = 64;
      cfg.kv_memory_bytes = 256 << 20;
      cfg.async_scheduling = state.range(1) != 0;
      if (mode > 0) {
        SetNgram(cfg.speculative, 3);
      }
      model::LoadOptions lo;
      lo.show_progress = false;
      auto m = model::LoadModel(kDsv4Tiny, lo);
      CHECK(m.ok()) << m.status();
      std::unique_ptr<model::CausalLM> model = std::move(*m);
      if (mode == 2) model = std::make_unique<SlotRestoreModel>(std::move(model));
      auto engine = Engine::Create(std::move(model), cfg);
      CHECK(engine.ok()) << engine.status();
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<std::shared_ptr<RequestStream>> streams;
      for (const auto& prompt : prompts) {
        GenerateRequest req;
        req.prompt = prompt;
        req.params = p;
        auto s = (*engine)->Submit(req);
        CHECK(s.ok()) << s.status();
        streams.push_back(*s);
      }
      for (auto& s : streams) {
        while (s->Next().has_value()) {
        }
      }
      const double sec =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      (*engine)->Shutdown(int64_t{5} * 1000 * 1000 * 1000);
      const EngineStats st = (*engine)->Stats();
      tps[mode] = static_cast<double>(st.total_output_tokens) / sec;
      fwd[mode] = static_cast<double>(st.num_forward_passes);
      if (mode == 1) {
        state.counters["acceptance"] = Acceptance(st);
      }
    }
    state.counters["tokens_per_s_off"] = tps[0];
    state.counters["tokens_per_s_frontier"] = tps[1];
    state.counters["tokens_per_s_restore"] = tps[2];
    state.counters["speedup_frontier"] = tps[1] / tps[0];
    state.counters["speedup_restore"] = tps[2] / tps[0];
    state.counters["forwards_off"] = fwd[0];
    state.counters["forwards_frontier"] = fwd[1];
    state.counters["forwards_restore"] = fwd[2];
  }
}
BENCHMARK(BM_Dsv4NgramRollback)
    ->ArgNames({"requests", "async"})
    ->Args({1, 1})
    ->Args({16, 1})
    ->Args({16, 0})
    ->Iterations(1)
    ->Unit(benchmark::kSecond)
    ->UseRealTime();

// The DeepSeek-V4 `bench` preset (make-test-model --arch deepseek_v4 --preset bench: 8 layers,
// hidden 1024, 129,280-token vocabulary, one MTP block; random weights), generated once into
// DSV4_BENCH_DIR as prefix_cache_bench does.
std::unique_ptr<model::CausalLM> Dsv4BenchModel() {
  const std::string dir = DSV4_BENCH_DIR;
  if (!std::filesystem::exists(dir + "/model.safetensors")) {
    auto config = model::dsv4::TestModelPreset("bench");
    CHECK(config.ok());
    CHECK(model::dsv4::WriteTestModel(*config, 1, dir).ok());
  }
  model::LoadOptions lo;
  lo.show_progress = false;
  auto m = model::LoadModel(dir, lo);
  CHECK(m.ok()) << m.status();
  return std::move(*m);
}

// MTP speculation (the model's own MTP block) on the `bench` preset: output tokens/s with
// speculation off, fixed length k = 1 (MTP's default) and k = 3 (the MTP chain), and variable
// length (k = 3, async budget from a cost table profiled at start-up) at 1, 16 and 64 concurrent
// greedy requests (32-token prompts, 32 new tokens each), ratios to off, and the acceptance. The
// weights are random, so the MTP block's drafts are almost never the target's argmax: acceptance
// is near 0 and the figures measure the cost of drafting + verifying, not the gain of a trained
// MTP head (variable length should then trim most verify rows).
void BM_Dsv4MtpSpeculation(benchmark::State& state) {
  const std::vector<std::vector<int32_t>> prompts =
      SyntheticPrompts(static_cast<int>(state.range(0)), 32, 1000, 7919, 104729, 100000);
  const SamplingParams p = GreedyParams(32, /*ignore_eos=*/true);
  for (auto _ : state) {
    // 0 = off, 1 = fixed k = 1, 2 = fixed k = 3, 3 = variable length k = 3 (async budget).
    const char* name[] = {"off", "k1", "k3", "varlen_k3"};
    double tps[4] = {0, 0, 0, 0};
    for (int mode = 0; mode < 4; ++mode) {
      EngineConfig cfg;
      cfg.max_num_seqs = 64;
      cfg.kv_memory_bytes = int64_t{1} << 30;
      if (mode > 0) {
        cfg.speculative.method = SpeculativeConfig::Method::kMtp;
        cfg.speculative.num_speculative_tokens = mode == 1 ? 1 : 3;
        if (mode == 3) {
          cfg.speculative.varlen = VarlenMode::kAsyncBudget;
          cfg.speculative.profile_cost_table = true;
        }
      }
      auto engine = Engine::Create(Dsv4BenchModel(), cfg);
      CHECK(engine.ok()) << engine.status();
      LLM llm(std::move(*engine));
      EngineStats st;
      tps[mode] = TimedGenerate(llm, prompts, p, &st);
      state.counters[std::string("tokens_per_s_") + name[mode]] = tps[mode];
      if (mode > 0) {
        const std::string n = name[mode];
        state.counters[n + "_vs_off"] = tps[mode] / tps[0];
        state.counters["acceptance_" + n] = Acceptance(st);
        state.counters["verified_per_step_" + n] = VerifiedPerStep(st);
      }
    }
  }
}
BENCHMARK(BM_Dsv4MtpSpeculation)->Apply(OneSixteenSixtyFourRequests);

}  // namespace
}  // namespace deepinfer::engine

BENCHMARK_MAIN();
