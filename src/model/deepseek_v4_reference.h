// A self-contained decode loop over DeepseekV4Model for tests and tools: owns a private block
// arena and one state slot (the engine's role), feeds prompts in chunks of any sizes and
// single-token decode steps, and runs the MTP block. Not for serving (no batching, no sharing).
#ifndef DEEPINFER_MODEL_DEEPSEEK_V4_REFERENCE_H_
#define DEEPINFER_MODEL_DEEPSEEK_V4_REFERENCE_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "model/deepseek_v4.h"

namespace deepinfer::model::dsv4 {

class ReferenceSession {
 public:
  // Room for `max_tokens` positions. `model` must outlive the session.
  ReferenceSession(DeepseekV4Model* model, int64_t max_tokens);

  // Feeds `ids` at the current position as consecutive chunks of `chunk_sizes` (cycled; empty =
  // one chunk). Returns logits of every fed position, [ids.size(), vocab]. When `streams` is
  // given it receives the final HC streams of every fed position, [ids.size(), hc, hidden].
  // Errors: OutOfRange past max_tokens; the model's errors.
  // `mode` applies to every chunk (kLast: one row per chunk).
  absl::StatusOr<std::vector<float>> Feed(std::span<const int32_t> ids,
                                          std::span<const int64_t> chunk_sizes = {},
                                          std::vector<float>* streams = nullptr,
                                          LogitsMode mode = LogitsMode::kAll);
  // MTP over the positions [start, start + next.size()) whose main streams are `streams`.
  absl::StatusOr<std::vector<float>> Mtp(int64_t start, std::span<const float> streams,
                                         std::span<const int32_t> next, LogitsMode mode);
  int64_t position() const { return pos_; }
  // Starts a new sequence (position 0) on the same memory.
  void Reset() { pos_ = 0; }

 private:
  DeepseekV4Model* model_;
  int64_t max_tokens_;
  int64_t pos_ = 0;
  std::vector<float> blocks_;  // block arena (floats for alignment)
  std::vector<float> state_;
  std::vector<int32_t> block_table_;
  KvCacheView view_;
};

// Greedy continuation (spec "reference decode loop"): prefill `prompt` (whole), then `steps`
// single-token decode steps. When `teacher` is non-empty the decode feeds teacher[i] instead of
// the argmax (teacher forcing). With `with_mtp`, also runs the MTP block over the prompt with
// next tokens prompt[1:] + [g0] and returns its last-position logits.
struct GreedyResult {
  std::vector<float> prompt_logits;    // [T, vocab]
  std::vector<int32_t> tokens;         // g0..g_steps (steps + 1 ids)
  std::vector<float> step_logits;      // [steps, vocab]
  std::vector<float> mtp_logits_last;  // [vocab] (with_mtp)
};
absl::StatusOr<GreedyResult> GreedyDecode(DeepseekV4Model* model, std::span<const int32_t> prompt,
                                          int steps, bool with_mtp,
                                          std::span<const int32_t> teacher = {});

// Index of the largest value (first on ties).
int32_t ArgMax(std::span<const float> v);

}  // namespace deepinfer::model::dsv4

#endif  // DEEPINFER_MODEL_DEEPSEEK_V4_REFERENCE_H_
