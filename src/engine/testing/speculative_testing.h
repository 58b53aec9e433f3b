// Helpers shared by the speculative-decoding tests (speculative_test.cc,
// speculative_varlen_test.cc, speculative_exact_test.cc, speculative_mtp_test.cc,
// speculative_dspark_test.cc) and decoding_bench.cc. Test-only and header-only; it includes no
// GoogleTest header, so the bench can use it too.
#ifndef DEEPINFER_ENGINE_TESTING_SPECULATIVE_TESTING_H_
#define DEEPINFER_ENGINE_TESTING_SPECULATIVE_TESTING_H_

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/check.h"
#include "common/config.h"
#include "engine/speculative/drafter.h"
#include "engine/testing/fake_model.h"
#include "model/model.h"

namespace deepinfer::engine::testing {

// Loads the checkpoint in `dir` with row-invariant kernels (DEEPINFER_BATCH_INVARIANT semantics,
// spec §7.1: a row's logits do not depend on the rows computed with it), so speculative and
// non-speculative runs of one binary can be compared bitwise. Sets the process-wide EnvConfig;
// CHECK-fails when the checkpoint does not load.
inline std::unique_ptr<model::CausalLM> LoadBatchInvariant(const std::filesystem::path& dir) {
  EnvConfig env = Env();
  env.batch_invariant = true;
  SetEnvConfigForTesting(env);
  model::LoadOptions lo;
  lo.show_progress = false;
  auto m = model::LoadModel(dir.string(), lo);
  CHECK(m.ok()) << m.status();
  return std::move(*m);
}

// ../shared/models/<name> (DEEPINFER_SHARED_DIR) loaded by LoadBatchInvariant, or null when the
// checkpoint is absent (the caller skips).
inline std::unique_ptr<model::CausalLM> LoadSharedModel(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(DEEPINFER_SHARED_DIR) / "models" / name;
  if (!std::filesystem::exists(dir / "config.json")) return nullptr;
  return LoadBatchInvariant(dir);
}

// The model it wraps, behind a copy of its layout with frontier_rollback = false: the runner then
// copies the state slot before each verify, restores it on a rejection and recomputes the
// accepted tokens next step (the rollback path before issue #26's ring geometry), on the same
// numerics. Only Forward and the paged-cache gate are forwarded (no MTP / model drafts).
class SlotRestoreModel final : public model::CausalLM {
 public:
  explicit SlotRestoreModel(std::unique_ptr<model::CausalLM> m)
      : m_(std::move(m)), layout_(m_->kv_layout()) {
    layout_.frontier_rollback = false;
  }
  const model::ModelInfo& info() const override { return m_->info(); }
  const model::KvLayout& kv_layout() const override { return layout_; }
  absl::Status Forward(const model::ForwardBatch& b, const model::KvCacheView& kv,
                       model::ForwardOutput* out) override {
    return m_->Forward(b, kv, out);
  }
  bool supports_paged_gate() const override { return m_->supports_paged_gate(); }

 private:
  std::unique_ptr<model::CausalLM> m_;
  model::KvLayout layout_;
};

// The FakeModel's greedy continuation of ctx.tokens, computed from its cache-free
// ReferenceLogits (the oracle drafter of spec §7.1), with the draft at index `corrupt` (if < the
// requested count) replaced by another token: a verify then accepts exactly `corrupt` drafts.
// Thread-safe call counter, for tests that check when the engine asks for drafts.
class OracleDrafter : public Drafter {
 public:
  OracleDrafter(const FakeModelOptions& mo, int corrupt) : ref_(mo), corrupt_(corrupt) {}
  std::vector<int32_t> Propose(const DraftContext& ctx, int max_tokens) override {
    std::vector<int32_t> seq(ctx.tokens.begin(), ctx.tokens.end());
    std::vector<int32_t> out;
    const int64_t vocab = ref_.info().vocab_size;
    for (int j = 0; j < max_tokens; ++j) {
      std::vector<float> row = ref_.ReferenceLogits(seq, /*all_rows=*/false);
      int32_t t =
          static_cast<int32_t>(std::max_element(row.begin(), row.begin() + vocab) - row.begin());
      if (j == corrupt_) t = static_cast<int32_t>((t + 7) % vocab);
      out.push_back(t);
      seq.push_back(t);
    }
    std::lock_guard<std::mutex> lock(mu_);
    ++calls_;
    return out;
  }
  // How many times Propose ran.
  int calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  const FakeModel ref_;
  const int corrupt_;
  std::mutex mu_;
  int calls_ = 0;
};

// Random drafts from a seeded stream: each call proposes a uniform count in
// [min_drafts, max_tokens] of tokens uniform in [0, vocab). Any drafter is lossless under
// sample-and-compare, so outputs must equal speculation off whatever it proposes. Not
// thread-safe.
class RandomDrafter : public Drafter {
 public:
  RandomDrafter(int64_t vocab, uint32_t seed, int min_drafts = 0)
      : vocab_(vocab), min_drafts_(min_drafts), rng_(seed) {}
  std::vector<int32_t> Propose(const DraftContext&, int max_tokens) override {
    std::vector<int32_t> out(std::uniform_int_distribution<int>(min_drafts_, max_tokens)(rng_));
    for (int32_t& t : out) t = std::uniform_int_distribution<int32_t>(0, vocab_ - 1)(rng_);
    return out;
  }

 private:
  int64_t vocab_;
  int min_drafts_;
  std::mt19937 rng_;
};

// One FakeModel test configuration: async scheduling on / off, FakeModel state slot on / off.
struct SchedulingCase {
  bool async;
  bool with_state;
};

// The four SchedulingCases, for ::testing::ValuesIn.
inline constexpr SchedulingCase kSchedulingCases[] = {
    {false, true}, {true, true}, {false, false}, {true, false}};

// Test-name suffix of a SchedulingCase ("AsyncState", "SyncNoState", ...); `info` is a
// ::testing::TestParamInfo<SchedulingCase> (a template so this header needs no GoogleTest).
template <typename ParamInfo>
std::string SchedulingCaseName(const ParamInfo& info) {
  return std::string(info.param.async ? "Async" : "Sync") +
         (info.param.with_state ? "State" : "NoState");
}

}  // namespace deepinfer::engine::testing

#endif  // DEEPINFER_ENGINE_TESTING_SPECULATIVE_TESTING_H_
