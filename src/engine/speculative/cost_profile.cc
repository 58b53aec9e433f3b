#include "engine/speculative/cost_profile.h"

#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "common/clock.h"
#include "common/status.h"

namespace deepinfer::engine {

absl::StatusOr<CostTable> ProfileVerifyCost(model::CausalLM& model, const model::KvCacheView& kv,
                                            const CostProfileOptions& options) {
  if (kv.num_blocks < 1) return absl::FailedPreconditionError("cost profile: no KV block");
  const bool has_state = model.kv_layout().StateBytes() > 0;
  const int per = std::clamp(options.tokens_per_seq, 1, model::kBlockTokens);
  int64_t seqs_cap = std::min<int64_t>(options.max_seqs, kv.num_blocks);
  if (has_state) seqs_cap = std::min<int64_t>(seqs_cap, kv.num_state_slots);
  const int max_m =
      static_cast<int>(std::min<int64_t>(options.max_tokens, std::max<int64_t>(seqs_cap, 1) * per));
  std::vector<int> grid;
  for (int m = 1; m < max_m; m *= 2) grid.push_back(m);
  grid.push_back(max_m);

  const int32_t token = model.info().vocab_size > 1 ? 1 : 0;
  std::vector<int32_t> ids(per, token);
  std::vector<int32_t> tables(seqs_cap);
  for (int64_t i = 0; i < seqs_cap; ++i) tables[i] = static_cast<int32_t>(i);
  std::vector<CostTable::Point> points;
  const int64_t start = MonotonicNanos();
  for (int m : grid) {
    model::ForwardBatch batch;
    for (int left = m, i = 0; left > 0; ++i) {
      model::SequenceChunk c;
      c.start_pos = 0;
      c.tokens = std::span<const int32_t>(ids.data(), std::min(left, per));
      c.block_table = std::span<const int32_t>(&tables[i], 1);
      c.state_slot = has_state ? i : -1;
      c.logits = model::LogitsMode::kAll;
      batch.chunks.push_back(c);
      left -= static_cast<int>(c.tokens.size());
    }
    std::vector<int64_t> ns;
    for (int rep = 0; rep <= std::max(options.replays, 1); ++rep) {
      model::ForwardOutput out;
      const int64_t t0 = MonotonicNanos();
      RETURN_IF_ERROR(model.Forward(batch, kv, &out));
      if (rep > 0) ns.push_back(MonotonicNanos() - t0);  // rep 0 warms up
    }
    std::sort(ns.begin(), ns.end());
    points.push_back({m, std::max(1e-6, static_cast<double>(ns[ns.size() / 2]) / 1e6)});
    if (MonotonicNanos() - start > options.max_total_ns) break;
  }
  return CostTable::Create(std::move(points));
}

}  // namespace deepinfer::engine
