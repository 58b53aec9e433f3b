// DeepSeek-V4 MTP chaining (k = 1..5) and frontier rollback through the engine (issue #26;
// ../shared/spec/speculative.md §2.4, §4.6; docs/speculative-decoding.md "Rollback").
//
// Oracle: the same engine and checkpoint with speculation off (greedy and seeded sampled ids are
// identical by sample-and-compare, spec §4.2), with row-invariant kernels
// (DEEPINFER_BATCH_INVARIANT semantics) so a row's logits do not depend on the rows computed with
// it. The model-level state checks (E8 rollback, E9 chain vs a from-scratch recompute) are in
// src/model/deepseek_v4_speculative_test.cc.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/config.h"
#include "engine/engine.h"
#include "engine/speculative/drafter.h"
#include "engine/testing/engine_test_util.h"
#include "engine/testing/speculative_testing.h"
#include "gtest/gtest.h"
#include "model/model.h"

namespace deepinfer::engine {
namespace {

namespace fs = std::filesystem;
using ::deepinfer::engine::testing::Greedy;
using ::deepinfer::engine::testing::LoadBatchInvariant;
using ::deepinfer::engine::testing::SlotRestoreModel;

const fs::path kShared = fs::path(DEEPINFER_SHARED_DIR);
const fs::path kTiny = kShared / "models/dsv4-tiny-a";

struct SpecRun {
  std::vector<std::vector<int32_t>> tokens;
  EngineStats stats;
};

SpecRun RunEngine(const std::vector<std::vector<int32_t>>& prompts,
                  const std::vector<SamplingParams>& params, const std::vector<bool>& speculative,
                  SpeculativeConfig spec, bool async, bool slot_restore = false) {
  EngineConfig config;
  config.kv_memory_bytes = 256 << 20;
  config.async_scheduling = async;
  config.speculative = std::move(spec);
  std::unique_ptr<model::CausalLM> m = LoadBatchInvariant(kTiny);
  if (slot_restore) m = std::make_unique<SlotRestoreModel>(std::move(m));
  auto engine = Engine::Create(std::move(m), config);
  CHECK(engine.ok()) << engine.status();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateRequest req;
    req.prompt = prompts[i];
    req.params = params[i];
    req.speculative = speculative.empty() || speculative[i];
    auto s = (*engine)->Submit(req);
    CHECK(s.ok()) << s.status();
    streams.push_back(*s);
  }
  SpecRun r;
  for (auto& s : streams) {
    std::vector<int32_t> t;
    while (std::optional<StepOutput> o = s->Next()) {
      t.insert(t.end(), o->token_ids.begin(), o->token_ids.end());
    }
    r.tokens.push_back(t);
  }
  (*engine)->Shutdown(int64_t{5} * 1000 * 1000 * 1000);
  r.stats = (*engine)->Stats();
  return r;
}

std::vector<std::vector<int32_t>> Prompts(std::initializer_list<int> lens, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> prompts;
  for (int len : lens) {
    std::vector<int32_t> p(len);
    for (int32_t& t : p) t = 3 + static_cast<int32_t>(rng() % 400);
    prompts.push_back(p);
  }
  return prompts;
}

// E2/E3 with the MTP drafter, every chain length 1..5: greedy and seeded sampled outputs equal
// speculation off, in one batch with a request that does not speculate, sync (odd k) and async
// (even k); for
// k >= 2 the chain proposes more than one draft per verify. The MTP ring's provisional chain
// entries and the main rings' rejected entries are left in place (frontier rollback).
TEST(SpecMtpChainTest, Dsv4TinyMtpEveryChainLengthEqualsSpeculationOff) {
  if (!fs::exists(kTiny / "config.json")) GTEST_SKIP() << "no dsv4-tiny-a";
  const auto prompts = Prompts({5, 33, 140, 12}, 4);
  std::vector<SamplingParams> params(prompts.size(), Greedy(24));
  params[1].temperature = 1.0f;  // seeded sampling: identical too (sample-and-compare)
  params[1].seed = 8;
  const std::vector<bool> speculative = {true, true, true, false};
  const SpecRun off = RunEngine(prompts, params, {}, {}, false);
  for (int k = 1; k <= 5; ++k) {
    for (bool async : {k % 2 == 0}) {
      SpeculativeConfig spec;
      spec.method = SpeculativeConfig::Method::kMtp;
      spec.num_speculative_tokens = k;
      const SpecRun on = RunEngine(prompts, params, speculative, spec, async);
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(on.tokens[i], off.tokens[i])
            << "k " << k << " async " << async << " prompt " << i;
      }
      EXPECT_GT(on.stats.spec_verify_steps, 0) << "k " << k;
      if (k >= 2) {
        EXPECT_GT(on.stats.spec_draft_tokens, on.stats.spec_verify_steps) << "k " << k;
      }
      std::printf("dsv4-tiny-a MTP k=%d async=%d: verifies %lld drafted %lld accepted %lld\n", k,
                  async, static_cast<long long>(on.stats.spec_verify_steps),
                  static_cast<long long>(on.stats.spec_draft_tokens),
                  static_cast<long long>(on.stats.spec_accepted_tokens));
    }
  }
}

// MTP drafts at most 5 tokens (the ring's spare slots: anchor + 5); 6 is a start-up error.
TEST(SpecMtpChainTest, MoreThanFiveMtpDraftsIsAStartUpError) {
  if (!fs::exists(kTiny / "config.json")) GTEST_SKIP() << "no dsv4-tiny-a";
  std::unique_ptr<model::CausalLM> m = LoadBatchInvariant(kTiny);
  EXPECT_EQ(m->max_model_drafts(), 5);
  EXPECT_TRUE(m->kv_layout().frontier_rollback);
  EngineConfig config;
  config.speculative.method = SpeculativeConfig::Method::kMtp;
  config.speculative.num_speculative_tokens = 6;
  auto engine = Engine::Create(std::move(m), config);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("5"), std::string::npos) << engine.status().message();
}

// The engine API's default MTP length is 1 (MTP-1, spec §2.1), as the CLI's: every verify step
// verifies exactly one draft, and the output equals speculation off.
TEST(SpecMtpChainTest, DefaultLengthIsOneDraftPerStep) {
  if (!fs::exists(kTiny / "config.json")) GTEST_SKIP() << "no dsv4-tiny-a";
  const auto prompts = Prompts({9, 30}, 5);
  const std::vector<SamplingParams> params(prompts.size(), Greedy(24));
  const SpecRun off = RunEngine(prompts, params, {}, SpeculativeConfig{}, false);
  SpeculativeConfig spec;
  spec.method = SpeculativeConfig::Method::kMtp;
  ASSERT_EQ(spec.num_speculative_tokens, 0);  // the method's default
  const SpecRun on = RunEngine(prompts, params, {}, spec, false);
  EXPECT_EQ(on.tokens, off.tokens);
  EXPECT_GT(on.stats.spec_verify_steps, 0);
  EXPECT_EQ(on.stats.spec_draft_tokens, on.stats.spec_verify_steps);
}

// Frontier rollback costs no recompute step: with scripted drafts whose draft c + 1 is always
// wrong, each verify commits exactly c + 1 tokens (c accepted + the target's own), so after the
// prefill every forward is a verify that commits c + 1 tokens. (The slot-restore path needed a
// second forward after every rejection to recompute the anchor and the accepted tokens: the
// same run through it, kept for models without frontier rollback, gives the same output with
// more forwards whenever drafts are accepted.) Output equals speculation off.
TEST(SpecMtpChainTest, RejectionsNeedNoRecomputeStep) {
  if (!fs::exists(kTiny / "config.json")) GTEST_SKIP() << "no dsv4-tiny-a";
  const auto prompts = Prompts({7}, 11);
  const int kTokens = 40;
  const std::vector<SamplingParams> params = {Greedy(kTokens)};
  const SpecRun off = RunEngine(prompts, params, {}, {}, false);
  ASSERT_EQ(off.tokens[0].size(), static_cast<size_t>(kTokens));
  std::vector<int32_t> full = prompts[0];
  full.insert(full.end(), off.tokens[0].begin(), off.tokens[0].end());
  for (int c : {0, 1, 2, 3}) {
    SpeculativeConfig spec;
    spec.method = SpeculativeConfig::Method::kCustom;
    spec.num_speculative_tokens = 4;
    spec.drafter = std::make_shared<ScriptedDrafter>([&, c](const DraftContext& ctx, int k) {
      std::vector<int32_t> d;
      for (int j = 0; j < k; ++j) {
        const size_t at = ctx.tokens.size() + j;
        if (at >= full.size()) break;
        d.push_back(j == c ? (full[at] + 1) % 400 : full[at]);
      }
      return d;
    });
    const SpecRun on = RunEngine(prompts, params, {}, spec, false);
    EXPECT_EQ(on.tokens[0], off.tokens[0]) << "corrupt " << c;
    // 1 prefill forward (commits 1 token), then verifies of c + 1 tokens each; the last steps
    // may verify fewer drafts (max_tokens caps them) and commit fewer.
    const int64_t verifies = (kTokens - 1 + c) / (c + 1);
    EXPECT_LE(on.stats.num_forward_passes, 1 + verifies + 2) << "corrupt " << c;
    EXPECT_GE(on.stats.spec_verify_steps, on.stats.num_forward_passes - 3) << "corrupt " << c;
    // Every verify accepts c drafts, except the last ones whose drafts max_tokens cut short.
    EXPECT_LE(on.stats.spec_accepted_tokens, c * on.stats.spec_verify_steps) << "corrupt " << c;
    EXPECT_GE(on.stats.spec_accepted_tokens, c * (on.stats.spec_verify_steps - 2))
        << "corrupt " << c;
    const SpecRun restore = RunEngine(prompts, params, {}, spec, false, /*slot_restore=*/true);
    EXPECT_EQ(restore.tokens[0], off.tokens[0]) << "corrupt " << c << " (slot restore)";
    if (c > 0) {
      EXPECT_GT(restore.stats.num_forward_passes, on.stats.num_forward_passes) << "corrupt " << c;
    }
    std::printf("corrupt %d: forwards %lld verifies %lld; slot restore %lld; off %lld\n", c,
                static_cast<long long>(on.stats.num_forward_passes),
                static_cast<long long>(on.stats.spec_verify_steps),
                static_cast<long long>(restore.stats.num_forward_passes),
                static_cast<long long>(off.stats.num_forward_passes));
  }
}

}  // namespace
}  // namespace deepinfer::engine
