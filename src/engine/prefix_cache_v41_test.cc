// Prefix caching on DeepSeek-V4.1 through the engine (KV-CACHE.md §5, spec deepseek-v41.md §7):
// dsv41-tiny-a from ../shared and the `tiny` / `demo` presets of make-test-model --arch
// deepseek_v41. The reference is the same request on an engine with prefix caching off and
// unchunked prefill: the uncached computation, independent of every cache path.
//
// What is asserted, per truncation mode (`none`, and `compact` with the default 140 and with 28
// kept rows, the replay goldens' keep):
// - the hit rule: a hit is block aligned and at most L - max(window + 6, kept rows), the window
//   read from the checkpoint's own config.json;
// - a snapshot hit gives the uncached logprobs bitwise (encoder windows restored exactly; the
//   decoder floor prefill_end - kept is at or above the hit in compact mode, so no snapshot's
//   decoder windows are read);
// - without snapshots (encoder-side bounded replay of the block before the hit end) the result
//   is the uncached one bitwise where the replay's window cone fits in the replayed block
//   ((layers - 1)(W - 1) + W <= 128 on the tiny models), and within a measured bound on `demo`
//   (W = 128), as for V4 (docs/prefix-cache.md "Replay error");
// - decoder windows of a compact (approximate) run are never restored into another request: a
//   decode-boundary snapshot of such a run, hit by a longer prompt, changes nothing.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/config.h"
#include "common/status_matchers.h"
#include "engine/engine.h"
#include "engine/llm.h"
#include "engine/testing/output_compare.h"
#include "gtest/gtest.h"
#include "model/deepseek_v41.h"
#include "model/deepseek_v41_make_test_model.h"
#include "model/model.h"
#include "nlohmann/json.hpp"

namespace deepinfer::engine {
namespace {

namespace fs = std::filesystem;
constexpr int kB = 128;

// Model directory: dsv41-tiny-a from ../shared, or a V4.1 preset written once.
std::string ModelDir(const std::string& name) {
  if (name == "dsv41-tiny-a") return std::string(DEEPINFER_SHARED_DIR) + "/models/" + name;
  const std::string dir = std::string(DEEPINFER_BINARY_DIR) + "/prefix_cache_models/v41-" + name;
  if (!fs::exists(dir + "/config.json")) {
    absl::StatusOr<std::string> json = model::dsv41::TestModelConfigJson41(name);
    CHECK(json.ok());
    fs::create_directories(dir);
    CHECK(model::dsv41::WriteTestModel41(*json, 7, dir).ok());
  }
  return dir;
}

// sliding_window of the checkpoint's config.json (nested `text_config` in the released layout).
int64_t WindowFromConfig(const std::string& dir) {
  std::ifstream f(dir + "/config.json");
  const nlohmann::json j = nlohmann::json::parse(f);
  const nlohmann::json& t = j.contains("text_config") ? j.at("text_config") : j;
  return t.at("sliding_window").get<int64_t>();
}

// Truncation mode of a case: keep = 0 is `none`.
struct Mode {
  const char* name;
  int64_t keep;
};

class PrefixCacheV41Test : public ::testing::Test {
 protected:
  void SetUp() override {
    EnvConfig env = Env();
    env.batch_invariant = true;
    SetEnvConfigForTesting(env);
  }
  void TearDown() override {
    EnvConfig env = Env();
    env.batch_invariant = false;
    SetEnvConfigForTesting(env);
  }
  // Loads `name` with the truncation mode into an LLM, or null (the caller skips) when
  // ../shared is absent. `min_recompute` gets the layout's min_recompute_tokens.
  std::unique_ptr<LLM> Make(const std::string& name, const Mode& mode, EngineConfig config,
                            int64_t* min_recompute = nullptr) {
    const std::string dir = ModelDir(name);
    if (!fs::exists(dir + "/config.json")) return nullptr;
    model::LoadOptions options;
    options.show_progress = false;
    absl::StatusOr<std::unique_ptr<model::CausalLM>> m = model::LoadModel(dir, options);
    CHECK(m.ok()) << std::string(m.status().message());
    auto* v41 = dynamic_cast<model::dsv41::DeepseekV41Model*>(m->get());
    CHECK(v41 != nullptr) << dir << " is not DeepSeek-V4.1";
    v41->set_prefill_truncation(mode.keep > 0, mode.keep);
    if (min_recompute != nullptr) *min_recompute = v41->kv_layout().min_recompute_tokens;
    absl::StatusOr<std::unique_ptr<LLM>> llm = LLM::Create(std::move(*m), config);
    CHECK(llm.ok()) << std::string(llm.status().message());
    return std::move(*llm);
  }
  // The reference engine: prefix caching off, one prefill chunk.
  std::unique_ptr<LLM> Plain(const std::string& name, const Mode& mode) {
    EngineConfig config;
    config.kv_memory_bytes = int64_t{256} << 20;
    config.enable_prefix_caching = false;
    config.max_num_batched_tokens = 4096;
    return Make(name, mode, config);
  }
  // The hit rule, with the window from config.json and the kept rows of the mode.
  static void ExpectHitRule(const SampleOutput& s, int64_t L, int64_t window, const Mode& mode) {
    const int64_t hit_end = s.cached_tokens + s.replayed_tokens;  // block KV reused up to here
    EXPECT_EQ(hit_end % kB, 0);
    EXPECT_LE(hit_end,
              L - std::max<int64_t>(window + model::kSpeculativeRollbackTokens, mode.keep));
  }
};

#define MAKE_OR_SKIP(var, expr) \
  auto var = (expr);            \
  if (var == nullptr) GTEST_SKIP() << "../shared/models absent";

const Mode kModes[] = {{"none", 0}, {"compact-140", 140}, {"compact-28", 28}};

// Turn 1 (300 tokens) leaves two blocks and the snapshot at 256; turn 2 (450 tokens, the same
// first 300) hits 256 from the snapshot. Turn 1 is compared as well: with compact truncation the
// cached engine's chunking (cut at the snapshot boundary, 200-token chunks) must not change the
// result either.
TEST_F(PrefixCacheV41Test, SnapshotHitEqualsTheUncachedRunBitwise) {
  for (const char* name : {"dsv41-tiny-a", "tiny", "demo"}) {
    const int64_t window = WindowFromConfig(ModelDir(name));
    for (const Mode& mode : kModes) {
      if (mode.keep > 0 && mode.keep < window + model::kSpeculativeRollbackTokens) continue;
      SCOPED_TRACE(std::string(name) + " " + mode.name);
      EngineConfig config;
      config.kv_memory_bytes = int64_t{256} << 20;
      config.max_num_batched_tokens = 200;
      int64_t min_recompute = -1;
      MAKE_OR_SKIP(cached, Make(name, mode, config, &min_recompute));
      EXPECT_EQ(min_recompute, mode.keep);
      MAKE_OR_SKIP(plain, Plain(name, mode));
      const std::vector<int32_t> p2 =
          testing::RandomPrompt(450, cached->engine().model_info().vocab_size, 31);
      const std::vector<int32_t> p1(p2.begin(), p2.begin() + 300);
      ASSERT_OK_AND_ASSIGN(auto t1, cached->Generate({p1}, testing::GreedyWithLogprobs(4)));
      EXPECT_EQ(t1[0].samples[0].cached_tokens, 0);
      ASSERT_OK_AND_ASSIGN(auto r1, plain->Generate({p1}, testing::GreedyWithLogprobs(4)));
      testing::ExpectBitwiseEqual(t1[0].samples[0], r1[0].samples[0]);
      ASSERT_OK_AND_ASSIGN(auto t2, cached->Generate({p2}, testing::GreedyWithLogprobs(8)));
      const SampleOutput& s = t2[0].samples[0];
      EXPECT_EQ(s.cached_tokens, 2 * kB);
      EXPECT_EQ(s.replayed_tokens, 0);
      EXPECT_FALSE(s.approximate);
      ExpectHitRule(s, 450, window, mode);
      ASSERT_OK_AND_ASSIGN(auto r2, plain->Generate({p2}, testing::GreedyWithLogprobs(8)));
      testing::ExpectBitwiseEqual(s, r2[0].samples[0]);
    }
  }
}

// Where the hit rule binds: a 400-token turn leaves three blocks and the snapshot at 384; a
// 410-token turn may hit 384 when L - (W + 6) allows it (window 16, `none`) but only 256 when
// the kept rows must be recomputed (compact; then from the snapshot at 256 of a third request).
TEST_F(PrefixCacheV41Test, HitRuleFollowsTheWindowAndTheKeptRows) {
  const char* name = "dsv41-tiny-a";
  const int64_t window = WindowFromConfig(ModelDir(name));
  for (const Mode& mode : kModes) {
    SCOPED_TRACE(mode.name);
    EngineConfig config;
    config.kv_memory_bytes = int64_t{256} << 20;
    MAKE_OR_SKIP(cached, Make(name, mode, config));
    MAKE_OR_SKIP(plain, Plain(name, mode));
    const std::vector<int32_t> p2 =
        testing::RandomPrompt(410, cached->engine().model_info().vocab_size, 33);
    const std::vector<int32_t> p1(p2.begin(), p2.begin() + 400);
    const std::vector<int32_t> p0(p2.begin(), p2.begin() + 300);
    ASSERT_OK(cached->Generate({p0}, testing::GreedyWithLogprobs(1)).status());  // snapshot at 256
    ASSERT_OK(cached->Generate({p1}, testing::GreedyWithLogprobs(1)).status());  // snapshot at 384
    ASSERT_OK_AND_ASSIGN(auto t2, cached->Generate({p2}, testing::GreedyWithLogprobs(8)));
    const SampleOutput& s = t2[0].samples[0];
    ExpectHitRule(s, 410, window, mode);
    const int64_t cap =
        410 - std::max<int64_t>(window + model::kSpeculativeRollbackTokens, mode.keep);
    EXPECT_EQ(s.cached_tokens, cap / kB * kB);
    EXPECT_EQ(s.replayed_tokens, 0);
    ASSERT_OK_AND_ASSIGN(auto r2, plain->Generate({p2}, testing::GreedyWithLogprobs(8)));
    testing::ExpectBitwiseEqual(s, r2[0].samples[0]);
  }
}

// Snapshots off: the hit ends one block early and that block is replayed (encoder windows, and
// in `none` mode the decoder's too, rebuilt from its start). On the tiny models the cone fits:
// 8 layers of W = 16 reach (8 - 1) * 15 + 16 = 121 <= 128 rows back, so the rebuilt windows equal
// the uncached ones and so do the logprobs, bitwise.
TEST_F(PrefixCacheV41Test, ReplayWithoutSnapshotEqualsTheUncachedRunOnTheTinyModels) {
  for (const char* name : {"dsv41-tiny-a", "tiny"}) {
    const int64_t window = WindowFromConfig(ModelDir(name));
    for (const Mode& mode : kModes) {
      SCOPED_TRACE(std::string(name) + " " + mode.name);
      EngineConfig config;
      config.kv_memory_bytes = int64_t{256} << 20;
      config.snapshot_memory_bytes = 0;
      MAKE_OR_SKIP(cached, Make(name, mode, config));
      MAKE_OR_SKIP(plain, Plain(name, mode));
      const model::ModelInfo& info = cached->engine().model_info();
      ASSERT_LE((info.num_layers - 1) * (window - 1) + window, kB);  // the cone premise
      const std::vector<int32_t> p2 = testing::RandomPrompt(450, info.vocab_size, 32);
      const std::vector<int32_t> p1(p2.begin(), p2.begin() + 300);
      ASSERT_OK(cached->Generate({p1}, testing::GreedyWithLogprobs(2)).status());
      ASSERT_OK_AND_ASSIGN(auto t2, cached->Generate({p2}, testing::GreedyWithLogprobs(8)));
      const SampleOutput& s = t2[0].samples[0];
      EXPECT_EQ(s.cached_tokens, kB);
      EXPECT_EQ(s.replayed_tokens, kB);
      EXPECT_TRUE(s.approximate);
      ExpectHitRule(s, 450, window, mode);
      EXPECT_EQ(cached->engine().Stats().prefix_cache_replays, 1);
      ASSERT_OK_AND_ASSIGN(auto r2, plain->Generate({p2}, testing::GreedyWithLogprobs(8)));
      testing::ExpectBitwiseEqual(s, r2[0].samples[0]);
    }
  }
}

// On `demo` (W = 128) the replay's cone does not fit in the replayed block: the rebuilt encoder
// windows are an approximation. Measured per mode and bounded as V4's demo replay is
// (docs/prefix-cache.md "Replay error": 1.5 nats on the top-5 logprobs).
TEST_F(PrefixCacheV41Test, ReplayWithoutSnapshotStaysCloseOnTheDemoPreset) {
  const int64_t window = WindowFromConfig(ModelDir("demo"));
  for (const Mode& mode : {kModes[0], kModes[1]}) {
    SCOPED_TRACE(mode.name);
    EngineConfig config;
    config.kv_memory_bytes = int64_t{256} << 20;
    config.snapshot_memory_bytes = 0;
    MAKE_OR_SKIP(cached, Make("demo", mode, config));
    MAKE_OR_SKIP(plain, Plain("demo", mode));
    const std::vector<int32_t> p2 =
        testing::RandomPrompt(600, cached->engine().model_info().vocab_size, 34);
    const std::vector<int32_t> p1(p2.begin(), p2.begin() + 420);
    ASSERT_OK(cached->Generate({p1}, testing::GreedyWithLogprobs(2)).status());
    ASSERT_OK_AND_ASSIGN(auto t2, cached->Generate({p2}, testing::GreedyWithLogprobs(6)));
    const SampleOutput& s = t2[0].samples[0];
    EXPECT_EQ(s.cached_tokens, 2 * kB);
    EXPECT_EQ(s.replayed_tokens, kB);
    EXPECT_TRUE(s.approximate);
    ExpectHitRule(s, 600, window, mode);
    ASSERT_OK_AND_ASSIGN(auto r2, plain->Generate({p2}, testing::GreedyWithLogprobs(6)));
    int agree = 0;
    const double diff = testing::MaxLogprobDiff(s, r2[0].samples[0], &agree);
    std::printf("demo %s: replayed hit, max |dlogprob| %.4g, %d/6 tokens agree\n", mode.name, diff,
                agree);
    EXPECT_LE(diff, 1.5);
  }
}

// Request A (300-token prompt, 90 tokens decoded, compact with 28 kept rows: its decoder windows
// are truncated at 272, an approximation on dsv41-tiny-a since 28 < 3 * 15 + 1) leaves a
// decode-boundary snapshot at 384. Longer prompts extending A's tokens must give their own
// uncached results: at L = 420 the hit may take that snapshot (384 <= 420 - 28) and the decoder
// floor 392 never reads its decoder windows; at L = 410 the kept rows keep the hit at 256.
TEST_F(PrefixCacheV41Test, DecoderWindowsOfACompactRunAreNeverRestored) {
  const char* name = "dsv41-tiny-a";
  const Mode mode = kModes[2];
  const int64_t window = WindowFromConfig(ModelDir(name));
  for (int64_t L : {420, 410}) {
    SCOPED_TRACE(L);
    EngineConfig config;
    config.kv_memory_bytes = int64_t{256} << 20;
    MAKE_OR_SKIP(cached, Make(name, mode, config));
    MAKE_OR_SKIP(plain, Plain(name, mode));
    const int64_t vocab = cached->engine().model_info().vocab_size;
    const std::vector<int32_t> pa = testing::RandomPrompt(300, vocab, 35);
    ASSERT_OK_AND_ASSIGN(auto a, cached->Generate({pa}, testing::GreedyWithLogprobs(90)));
    std::vector<int32_t> pb = pa;
    pb.insert(pb.end(), a[0].samples[0].token_ids.begin(), a[0].samples[0].token_ids.end());
    pb.resize(390);
    const std::vector<int32_t> more = testing::RandomPrompt(static_cast<int>(L - 390), vocab, 36);
    pb.insert(pb.end(), more.begin(), more.end());
    ASSERT_OK_AND_ASSIGN(auto b, cached->Generate({pb}, testing::GreedyWithLogprobs(8)));
    const SampleOutput& s = b[0].samples[0];
    ExpectHitRule(s, L, window, mode);
    EXPECT_EQ(s.cached_tokens, L == 420 ? 3 * kB : 2 * kB);
    EXPECT_FALSE(s.approximate);
    ASSERT_OK_AND_ASSIGN(auto r, plain->Generate({pb}, testing::GreedyWithLogprobs(8)));
    testing::ExpectBitwiseEqual(s, r[0].samples[0]);
  }
}

}  // namespace
}  // namespace deepinfer::engine
