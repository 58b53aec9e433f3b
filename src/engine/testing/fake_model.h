// FakeModel: a deterministic CausalLM for engine tests that honestly uses the KV memory the
// engine hands it, so chunking, preemption, block-table and state-slot bugs change its output.
//
// Layout (KvLayout): paged cache "tok" (128 rows of 8 bytes: a hash of (token, position) per
// position), paged cache "cmp" (32 rows of 8 bytes per block: one row per 4 positions, the hash
// of that group's "tok" rows, like DeepSeek-V4's ratio-4 compressed KV) and, if with_state, a
// 64-byte state slot holding a running hash and the count of tokens absorbed (like a window ring).
// The logits at position p are a pseudo-random function of every "tok" row 0..p and every
// complete "cmp" row read back from the blocks, and of the state slot: any corrupted, missing or
// misplaced KV changes them. All integer math, so results are bitwise batch invariant.
#ifndef DEEPINFER_ENGINE_TESTING_FAKE_MODEL_H_
#define DEEPINFER_ENGINE_TESTING_FAKE_MODEL_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "model/model.h"

namespace deepinfer::engine::testing {

struct FakeModelOptions {
  int64_t vocab_size = 64;
  int64_t max_context = 4096;
  int32_t eos_token_id = 1;
  bool with_state = true;
  // The EOS logit gets a boost at about 1 position in `eos_period` so greedy generations end at
  // varied lengths (0 = never boosted).
  int eos_period = 24;
  // Busy-waits this many microseconds per forward (to make async overlap observable).
  int forward_delay_us = 0;
};

class FakeModel : public model::CausalLM {
 public:
  explicit FakeModel(const FakeModelOptions& options = {});
  const model::ModelInfo& info() const override { return info_; }
  const model::KvLayout& kv_layout() const override { return layout_; }
  absl::Status Forward(const model::ForwardBatch& batch, const model::KvCacheView& kv,
                       model::ForwardOutput* out) override;
  bool supports_paged_gate() const override { return true; }

  int64_t num_forwards() const { return num_forwards_.load(); }

  // Reference logits for a whole sequence computed without any KV cache (the oracle):
  // [tokens.size()][vocab] when all_rows, else the last row only.
  // `replay_start` > 0: the logits a bounded replay from that position gives (the state slot
  // restarted there, KV rows unchanged), for prefix-cache tests.
  std::vector<float> ReferenceLogits(const std::vector<int32_t>& tokens, bool all_rows,
                                     int64_t replay_start = 0) const;

 private:
  void FillLogits(uint64_t seed, float* row) const;

  FakeModelOptions options_;
  model::ModelInfo info_;
  model::KvLayout layout_;
  std::atomic<int64_t> num_forwards_{0};
};

}  // namespace deepinfer::engine::testing

#endif  // DEEPINFER_ENGINE_TESTING_FAKE_MODEL_H_
