// Start-up profiling of the verification cost table (spec §5.4; after vLLM's
// `batches_to_profile` and `_PROFILE_REPLAYS`): times real forwards of verify-shaped batches —
// chunks of up to `tokens_per_seq` tokens (anchor + drafts), every row's logits — over a grid of
// total target tokens M, and keeps the median of a few replays per point.
//
// The profile writes KV rows of the first blocks and state slots of `kv`: call it before the
// engine hands any block or slot out (their contents are garbage until a sequence computes them,
// so nothing reads what the profile wrote). Forward time only: the per-row sampling cost is not
// in the table (it makes trimming look a little less attractive than it is).
//
// Thread-safety: uses the model exclusively while it runs.
#ifndef DEEPINFER_ENGINE_SPECULATIVE_COST_PROFILE_H_
#define DEEPINFER_ENGINE_SPECULATIVE_COST_PROFILE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "engine/speculative/verify_planner.h"
#include "model/model.h"

namespace deepinfer::engine {

struct CostProfileOptions {
  int tokens_per_seq = 6;  // 1 + k_max
  int max_tokens = 256;    // largest M profiled (clamped by the blocks / slots available)
  int max_seqs = 64;       // chunks per forward at most
  int replays = 3;         // median of this many timed forwards per M (after one warm-up)
  int64_t max_total_ns = int64_t{3'000'000'000};  // stop the grid when profiling exceeds this
};

// Grid M = 1, 2, 4, ... up to the largest M the options and `kv` allow (and that M itself).
// Errors: the model's Forward errors; FailedPrecondition when `kv` has no block.
absl::StatusOr<CostTable> ProfileVerifyCost(model::CausalLM& model, const model::KvCacheView& kv,
                                            const CostProfileOptions& options);

}  // namespace deepinfer::engine

#endif  // DEEPINFER_ENGINE_SPECULATIVE_COST_PROFILE_H_
