#include "model/deepseek_v4_chunk_check.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace deepinfer::model::dsv4 {

absl::Status ValidateForwardChunk(absl::string_view model, const SequenceChunk& chunk,
                                  const KvCacheView& kv, const KvLayout& layout,
                                  int64_t max_positions, int64_t vocab_size) {
  const int64_t T = static_cast<int64_t>(chunk.tokens.size());
  if (T == 0) return absl::InvalidArgumentError(absl::StrCat(model, " forward: empty chunk"));
  if (chunk.start_pos < 0 || chunk.start_pos + T > max_positions) {
    return absl::InvalidArgumentError(absl::StrCat(
        model, " forward: positions [", chunk.start_pos, ", ", chunk.start_pos + T,
        ") exceed max_position_embeddings ", max_positions));
  }
  for (int32_t tok : chunk.tokens) {
    if (tok < 0 || tok >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(model, " forward: token id ", tok,
                                                     " outside vocabulary ", vocab_size));
    }
  }
  if (chunk.state_slot < 0 || chunk.state_slot >= kv.num_state_slots || kv.state_base == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(model, " forward: bad state slot ", chunk.state_slot));
  }
  if (chunk.replay_start < 0 || chunk.replay_start > chunk.start_pos || chunk.replay_until < 0 ||
      chunk.replay_start % kBlockTokens != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        model, " forward: bad replay range [", chunk.replay_start, ", ", chunk.replay_until,
        ") for a chunk at ", chunk.start_pos, " (the start must be block-aligned and <= it)"));
  }
  if (!layout.paged.empty()) {
    const int64_t need = (chunk.start_pos + T + kBlockTokens - 1) / kBlockTokens;
    if (static_cast<int64_t>(chunk.block_table.size()) < need) {
      return absl::InvalidArgumentError(absl::StrCat(model, " forward: block table has ",
                                                     chunk.block_table.size(), " entries, need ",
                                                     need));
    }
    for (int64_t i = 0; i < need; ++i) {
      if (chunk.block_table[i] < 0 || chunk.block_table[i] >= kv.num_blocks) {
        return absl::InvalidArgumentError(absl::StrCat(model, " forward: block id ",
                                                       chunk.block_table[i], " out of range"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckDistinctStateSlots(absl::string_view model, std::vector<int32_t> slots) {
  std::sort(slots.begin(), slots.end());
  if (auto dup = std::adjacent_find(slots.begin(), slots.end()); dup != slots.end()) {
    return absl::InvalidArgumentError(absl::StrCat(model, " forward: state slot ", *dup,
                                                   " used by two chunks of one batch"));
  }
  return absl::OkStatus();
}

}  // namespace deepinfer::model::dsv4
