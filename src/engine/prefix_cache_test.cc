// Prefix caching in the engine (KV-CACHE.md §2-6) against the FakeModel, whose logits depend on
// every KV row it reads back and on its state slot, and whose ReferenceLogits() is the
// cache-free oracle (with `replay_start`, the oracle of a bounded replay).
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "engine/engine.h"
#include "engine/llm.h"
#include "engine/testing/engine_test_util.h"
#include "engine/testing/fake_model.h"
#include "gtest/gtest.h"

namespace deepinfer::engine {
namespace {

using ::deepinfer::engine::testing::ExpectAllReturned;
using ::deepinfer::engine::testing::FakeModel;
using ::deepinfer::engine::testing::FakeModelOptions;
using ::deepinfer::engine::testing::Greedy;
using ::deepinfer::engine::testing::MakeLLM;
using ::deepinfer::engine::testing::MakePrompts;

constexpr int kB = 128;

// Greedy tokens from the oracle, optionally as a replay from `replay_start` would give them.
std::vector<int32_t> Oracle(const FakeModel& ref, std::vector<int32_t> seq, int max_tokens,
                            int64_t replay_start = 0) {
  std::vector<int32_t> out;
  const int64_t vocab = ref.info().vocab_size;
  while (static_cast<int>(out.size()) < max_tokens) {
    std::vector<float> row = ref.ReferenceLogits(seq, false, replay_start);
    const int32_t t =
        static_cast<int32_t>(std::max_element(row.begin(), row.begin() + vocab) - row.begin());
    out.push_back(t);
    seq.push_back(t);
    if (t == ref.info().eos_token_ids[0]) break;
  }
  return out;
}

EngineConfig Config(bool async) {
  EngineConfig c;
  c.async_scheduling = async;
  c.max_num_batched_tokens = 256;
  c.kv_memory_bytes = int64_t{64} << 20;
  return c;
}

std::vector<int32_t> Prefix(const std::vector<int32_t>& p, size_t n) {
  return std::vector<int32_t>(p.begin(), p.begin() + static_cast<long>(n));
}

class PrefixCacheTest : public ::testing::TestWithParam<bool> {};  // param: async

TEST_P(PrefixCacheTest, HitAtASnapshotComputesOnlyTheRestAndMatchesTheOracle) {
  FakeModelOptions mo;
  mo.eos_period = 0;
  const FakeModel ref(mo);
  auto llm = MakeLLM(mo, Config(GetParam()));
  const std::vector<int32_t> p = MakePrompts(1, 700, 700, 3)[0];
  // Turn 1: 400 tokens; its prefill snapshot is at floor(399 / 128) * 128 = 384.
  ASSERT_OK_AND_ASSIGN(auto a, llm->Generate({Prefix(p, 400)}, Greedy(4)));
  EXPECT_EQ(a[0].samples[0].cached_tokens, 0);
  const int64_t computed_before = llm->engine().Stats().total_prompt_tokens;
  EXPECT_EQ(computed_before, 400);
  // Turn 2: 700 tokens sharing the first 400: the hit is 384 (3 blocks, snapshot there).
  ASSERT_OK_AND_ASSIGN(auto b, llm->Generate({p}, Greedy(6)));
  EXPECT_EQ(b[0].samples[0].cached_tokens, 3 * kB);
  EXPECT_EQ(b[0].samples[0].replayed_tokens, 0);
  EXPECT_FALSE(b[0].samples[0].approximate);
  EXPECT_EQ(b[0].samples[0].token_ids, Oracle(ref, p, 6));
  EXPECT_EQ(llm->engine().Stats().total_prompt_tokens - computed_before, 700 - 3 * kB);
  const EngineStats s = llm->engine().Stats();
  EXPECT_EQ(s.prefix_cache_hit_tokens, 3 * kB);
  EXPECT_EQ(s.prefix_cache_query_tokens, 400 + 700);
  EXPECT_EQ(s.prefix_cache_replays, 0);
  EXPECT_GT(s.snapshots, 0);
  ExpectAllReturned(llm->engine());
}

TEST_P(PrefixCacheTest, WithoutASnapshotTheLastHitBlockIsReplayed) {
  FakeModelOptions mo;
  mo.eos_period = 0;
  const FakeModel ref(mo);
  EngineConfig config = Config(GetParam());
  config.snapshot_memory_bytes = 0;
  auto llm = MakeLLM(mo, config);
  const std::vector<int32_t> p = MakePrompts(1, 700, 700, 4)[0];
  ASSERT_OK_AND_ASSIGN(auto a, llm->Generate({Prefix(p, 400)}, Greedy(2)));
  ASSERT_OK_AND_ASSIGN(auto b, llm->Generate({p}, Greedy(6)));
  // L1 = 384, no snapshot: the hit is 256 and positions 256..383 are replayed.
  EXPECT_EQ(b[0].samples[0].cached_tokens, 2 * kB);
  EXPECT_EQ(b[0].samples[0].replayed_tokens, kB);
  EXPECT_TRUE(b[0].samples[0].approximate);
  EXPECT_EQ(b[0].samples[0].token_ids, Oracle(ref, p, 6, /*replay_start=*/2 * kB));
  EXPECT_NE(Oracle(ref, p, 6, 2 * kB), Oracle(ref, p, 6));  // the replay is observable
  EXPECT_EQ(llm->engine().Stats().prefix_cache_replays, 1);
  EXPECT_EQ(llm->engine().Stats().prefix_cache_replayed_tokens, kB);
  ExpectAllReturned(llm->engine());
}

TEST_P(PrefixCacheTest, ExactModeNeverReplaysAndEqualsTheUncachedOracle) {
  FakeModelOptions mo;
  mo.eos_period = 0;
  const FakeModel ref(mo);
  EngineConfig config = Config(GetParam());
  config.prefix_cache_mode = EngineConfig::PrefixCacheMode::kExact;
  config.snapshot_memory_bytes = 0;  // no snapshots at all: a stateful model cannot hit
  auto llm = MakeLLM(mo, config);
  const std::vector<int32_t> p = MakePrompts(1, 600, 600, 5)[0];
  ASSERT_OK_AND_ASSIGN(auto a, llm->Generate({Prefix(p, 300)}, Greedy(2)));
  ASSERT_OK_AND_ASSIGN(auto b, llm->Generate({p}, Greedy(5)));
  EXPECT_EQ(b[0].samples[0].cached_tokens, 0);
  EXPECT_EQ(b[0].samples[0].token_ids, Oracle(ref, p, 5));
  EXPECT_EQ(llm->engine().Stats().prefix_cache_replays, 0);
  // Without window state, exact block reuse needs no snapshot.
  FakeModelOptions stateless = mo;
  stateless.with_state = false;
  const FakeModel ref2(stateless);
  auto llm2 = MakeLLM(stateless, config);
  ASSERT_OK_AND_ASSIGN(auto c, llm2->Generate({Prefix(p, 300)}, Greedy(2)));
  ASSERT_OK_AND_ASSIGN(auto d, llm2->Generate({p}, Greedy(5)));
  EXPECT_EQ(d[0].samples[0].cached_tokens, 2 * kB);
  EXPECT_EQ(d[0].samples[0].token_ids, Oracle(ref2, p, 5));
  ExpectAllReturned(llm->engine());
  ExpectAllReturned(llm2->engine());
}

TEST_P(PrefixCacheTest, ExactModeEndsTheHitAtTheLastSnapshot) {
  FakeModelOptions mo;
  mo.eos_period = 0;
  const FakeModel ref(mo);
  EngineConfig config = Config(GetParam());
  config.prefix_cache_mode = EngineConfig::PrefixCacheMode::kExact;
  auto llm = MakeLLM(mo, config);
  const std::vector<int32_t> p = MakePrompts(1, 900, 900, 6)[0];
  // Snapshot at 256 (prefill of 300 tokens); blocks up to 512 from a 600-token prefill whose
  // snapshot is at 512 but whose KV then diverges: use a different tail so 512 does not match.
  ASSERT_OK_AND_ASSIGN(auto a, llm->Generate({Prefix(p, 300)}, Greedy(1)));
  std::vector<int32_t> other = Prefix(p, 450);
  other.resize(600, 7);  // blocks 0-2 shared with p, snapshot at 512 belongs to `other`
  ASSERT_OK_AND_ASSIGN(auto b, llm->Generate({other}, Greedy(1)));
  ASSERT_OK_AND_ASSIGN(auto c, llm->Generate({p}, Greedy(5)));
  // Longest chain 3 blocks (384); no snapshot at 384; the last exact snapshot is at 256.
  EXPECT_EQ(c[0].samples[0].cached_tokens, 2 * kB);
  EXPECT_EQ(c[0].samples[0].replayed_tokens, 0);
  EXPECT_EQ(c[0].samples[0].token_ids, Oracle(ref, p, 5));
  ExpectAllReturned(llm->engine());
}

TEST_P(PrefixCacheTest, CacheSaltSeparatesTenants) {
  FakeModelOptions mo;
  mo.eos_period = 0;
  auto engine_or = Engine::Create(std::make_unique<FakeModel>(mo), Config(GetParam()));
  ASSERT_OK(engine_or.status());
  Engine& engine = **engine_or;
  const std::vector<int32_t> p = MakePrompts(1, 500, 500, 7)[0];
  auto run = [&](const std::string& salt, const std::vector<int32_t>& prompt) {
    GenerateRequest r;
    r.prompt = prompt;
    r.params = Greedy(2);
    r.cache_salt = salt;
    auto stream = engine.Submit(r);
    CHECK(stream.ok());
    int cached = -1;
    while (std::optional<StepOutput> o = (*stream)->Next()) cached = o->cached_tokens;
    return cached;
  };
  EXPECT_EQ(run("tenant-a", Prefix(p, 300)), 0);
  EXPECT_EQ(run("tenant-b", p), 0);         // another tenant's blocks are invisible
  EXPECT_EQ(run("", p), 0);                 // and so are they to unsalted requests
  EXPECT_EQ(run("tenant-a", p), 2 * kB);    // the same tenant hits (snapshot at 256)
  EXPECT_EQ(run("tenant-b", p), 3 * kB);    // tenant b hits its own 500-token prefill
  engine.ResetPrefixCache();
  EXPECT_EQ(engine.Stats().prefix_cache_blocks, 0);
  EXPECT_EQ(engine.Stats().snapshots, 0);
  EXPECT_EQ(run("tenant-b", p), 0);
  ExpectAllReturned(engine);
}

TEST_P(PrefixCacheTest, SamplesOfOneRequestForkThePromptOnce) {
  FakeModelOptions mo;
  mo.eos_period = 0;
  auto llm = MakeLLM(mo, Config(GetParam()));
  const std::vector<int32_t> p = MakePrompts(1, 300, 300, 8)[0];
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.seed = 11;
  sp.n = 4;
  sp.max_tokens = 8;
  ASSERT_OK_AND_ASSIGN(auto forked, llm->Generate({p}, sp));
  // Sample 0 computes the prompt; each other sample forks at the last boundary (256) and
  // computes 300 - 256 = 44 tokens.
  EXPECT_EQ(llm->engine().Stats().total_prompt_tokens, 300 + 3 * 44);
  for (int s = 1; s < 4; ++s) EXPECT_EQ(forked[0].samples[s].cached_tokens, 2 * kB);
  // The same seeded request without prefix caching gives the same samples.
  EngineConfig off = Config(GetParam());
  off.enable_prefix_caching = false;
  auto plain = MakeLLM(mo, off);
  ASSERT_OK_AND_ASSIGN(auto ref, plain->Generate({p}, sp));
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(forked[0].samples[s].token_ids, ref[0].samples[s].token_ids) << "sample " << s;
  }
  EXPECT_EQ(plain->engine().Stats().total_prompt_tokens, 4 * 300);
  ExpectAllReturned(llm->engine());
}

TEST_P(PrefixCacheTest, PromptLogprobsAreComputedNotReused) {
  FakeModelOptions mo;
  mo.eos_period = 0;
  const FakeModel ref(mo);
  auto llm = MakeLLM(mo, Config(GetParam()));
  const std::vector<int32_t> p = MakePrompts(1, 400, 400, 9)[0];
  ASSERT_OK_AND_ASSIGN(auto warm, llm->Generate({p}, Greedy(1)));
  SamplingParams sp = Greedy(1);
  sp.prompt_logprobs = 0;
  ASSERT_OK_AND_ASSIGN(auto out, llm->Generate({p}, sp));
  EXPECT_EQ(out[0].samples[0].cached_tokens, 0);
  ASSERT_EQ(out[0].prompt_logprobs.size(), p.size() - 1);
  const std::vector<float> all = ref.ReferenceLogits(p, true);
  const int64_t vocab = ref.info().vocab_size;
  for (size_t i = 0; i + 1 < p.size(); ++i) {
    std::vector<float> row(all.begin() + static_cast<long>(i * vocab),
                           all.begin() + static_cast<long>((i + 1) * vocab));
    float mx = *std::max_element(row.begin(), row.end());
    double z = 0;
    for (float v : row) z += std::exp(static_cast<double>(v - mx));
    const double lp = row[p[i + 1]] - mx - std::log(z);
    EXPECT_NEAR(out[0].prompt_logprobs[i].logprob, lp, 1e-4) << "position " << i + 1;
  }
  ExpectAllReturned(llm->engine());
}

// Random requests drawn from a few shared prefixes under a KV budget that forces eviction and
// preemption: exact mode reproduces the cache-free oracle, and afterwards every block, slot and
// reference is back.
TEST_P(PrefixCacheTest, RandomisedSharedPrefixStressUnderEviction) {
  FakeModelOptions mo;
  const FakeModel ref(mo);
  EngineConfig config = Config(GetParam());
  config.max_num_seqs = 16;
  config.max_num_batched_tokens = 300;
  config.prefix_cache_mode = EngineConfig::PrefixCacheMode::kExact;
  config.kv_memory_bytes =
      24 * FakeModel(mo).kv_layout().BlockBytes() + 16 * FakeModel(mo).kv_layout().StateBytes();
  config.snapshot_memory_bytes = 20 * FakeModel(mo).kv_layout().StateBytes();
  auto engine_or = Engine::Create(std::make_unique<FakeModel>(mo), config);
  ASSERT_OK(engine_or.status());
  Engine& engine = **engine_or;
  std::mt19937 rng(12);
  const auto bases = MakePrompts(8, 200, 700, 13);
  struct Req {
    std::vector<int32_t> prompt;
    int max_tokens;
    std::shared_ptr<RequestStream> stream;
  };
  std::vector<Req> reqs;
  for (int i = 0; i < 600; ++i) {
    Req r;
    const auto& base = bases[rng() % bases.size()];
    r.prompt = Prefix(base, 1 + rng() % base.size());
    const int tail = static_cast<int>(rng() % 40);
    for (int k = 0; k < tail; ++k) r.prompt.push_back(2 + static_cast<int32_t>(rng() % 60));
    r.max_tokens = 1 + static_cast<int>(rng() % 30);
    GenerateRequest g;
    g.prompt = r.prompt;
    g.params = Greedy(r.max_tokens);
    ASSERT_OK_AND_ASSIGN(r.stream, engine.Submit(g));
    reqs.push_back(std::move(r));
  }
  int64_t hits = 0;
  for (Req& r : reqs) {
    std::vector<int32_t> got;
    while (std::optional<StepOutput> o = r.stream->Next()) {
      got.insert(got.end(), o->token_ids.begin(), o->token_ids.end());
      if (o->finish.has_value()) hits += o->cached_tokens;
    }
    ASSERT_EQ(got, Oracle(ref, r.prompt, r.max_tokens));
  }
  const EngineStats s = engine.Stats();
  EXPECT_GT(hits, 0);
  EXPECT_GT(s.prefix_cache_evicted_blocks, 0);
  EXPECT_GT(s.num_preemptions, 0);
  EXPECT_EQ(s.prefix_cache_replays, 0);
  ExpectAllReturned(engine);
}

// The KV-event seam: the observer sees each stored block once, with its chain, and each removal.
class CountingObserver : public kv::PrefixIndexObserver {
 public:
  void OnBlockStored(const kv::BlockKey& key, const kv::BlockKey& parent, bool) override {
    stored.push_back({key, parent});
  }
  void OnBlockRemoved(const kv::BlockKey& key) override { removed.push_back(key); }
  std::vector<std::pair<kv::BlockKey, kv::BlockKey>> stored;
  std::vector<kv::BlockKey> removed;
};

TEST_P(PrefixCacheTest, ObserverSeesStoredAndRemovedBlocks) {
  FakeModelOptions mo;
  mo.eos_period = 0;
  CountingObserver obs;
  EngineConfig config = Config(GetParam());
  config.prefix_index_observer = &obs;
  auto llm = MakeLLM(mo, config);
  const std::vector<int32_t> p = MakePrompts(1, 300, 300, 14)[0];
  ASSERT_OK_AND_ASSIGN(auto out, llm->Generate({p}, Greedy(1)));
  const std::vector<kv::BlockKey> keys = kv::ComputeBlockKeyChain(0, 0xFA4E, p);
  ASSERT_EQ(obs.stored.size(), 2u);  // two complete blocks of the 300-token prompt
  EXPECT_EQ(obs.stored[0].first, keys[0]);
  EXPECT_EQ(obs.stored[0].second, kv::kRootBlockKey);
  EXPECT_EQ(obs.stored[1].first, keys[1]);
  EXPECT_EQ(obs.stored[1].second, keys[0]);
  llm->engine().ResetPrefixCache();
  EXPECT_EQ(obs.removed.size(), 2u);
  ExpectAllReturned(llm->engine());
}

INSTANTIATE_TEST_SUITE_P(Modes, PrefixCacheTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Async" : "Sync"; });

}  // namespace
}  // namespace deepinfer::engine
