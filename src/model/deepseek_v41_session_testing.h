// Test and benchmark helper for DeepSeek-V4.1 (not used by the engine): a private paged arena
// and one state slot per sequence, i.e. the engine's role reduced to feeding chunks in order.
#ifndef DEEPINFER_MODEL_DEEPSEEK_V41_SESSION_TESTING_H_
#define DEEPINFER_MODEL_DEEPSEEK_V41_SESSION_TESTING_H_

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "common/status.h"
#include "model/deepseek_v41.h"

namespace deepinfer::model::dsv41 {

// Sequences s = 0..slots-1, each with max_tokens of blocks and state slot s.

class Session {
 public:
  Session(DeepseekV41Model* m, int64_t max_tokens, int slots = 1) : m_(m) {
    const KvLayout& L = m->kv_layout();
    nblocks_ = (max_tokens + kBlockTokens - 1) / kBlockTokens;
    blocks_.assign((nblocks_ * slots * L.BlockBytes()) / 8 + 8, 0);
    state_.assign((slots * L.StateBytes()) / 8 + 8, 0);
    view_.block_base = reinterpret_cast<uint8_t*>(blocks_.data());
    view_.num_blocks = nblocks_ * slots;
    view_.state_base = reinterpret_cast<uint8_t*>(state_.data());
    view_.num_state_slots = slots;
    tables_.resize(slots);
    for (int s = 0; s < slots; ++s) {
      for (int64_t b = 0; b < nblocks_; ++b)
        tables_[s].push_back(static_cast<int32_t>(s * nblocks_ + b));
    }
    pos_.assign(slots, 0);
  }
  // Feeds ids in chunks of `chunk` (0 = one chunk); returns logits of every position.
  absl::StatusOr<std::vector<float>> Feed(std::span<const int32_t> ids, int64_t chunk = 0,
                                          int slot = 0, std::span<const uint8_t> image = {},
                                          LogitsMode mode = LogitsMode::kAll) {
    std::vector<float> all;
    size_t i = 0;
    while (i < ids.size()) {
      const size_t n = chunk > 0 ? std::min<size_t>(chunk, ids.size() - i) : ids.size() - i;
      ForwardBatch b;
      SequenceChunk c;
      c.start_pos = pos_[slot];
      c.tokens = ids.subspan(i, n);
      c.block_table = tables_[slot];
      c.state_slot = slot;
      c.logits = mode;
      b.chunks.push_back(c);
      ForwardOutput out;
      std::vector<std::vector<uint8_t>> masks;
      if (!image.empty()) masks.emplace_back(image.begin() + i, image.begin() + i + n);
      RETURN_IF_ERROR(m_->ForwardWithImages(b, masks, view_, &out));
      all.insert(all.end(), out.logits.begin(), out.logits.end());
      pos_[slot] += n;
      i += n;
    }
    return all;
  }
  const KvCacheView& view() const { return view_; }
  std::span<const int32_t> table(int s) const { return tables_[s]; }

 private:
  DeepseekV41Model* m_;
  int64_t nblocks_ = 0;
  std::vector<uint64_t> blocks_, state_;
  std::vector<std::vector<int32_t>> tables_;
  std::vector<int64_t> pos_;
  KvCacheView view_;
};

}  // namespace deepinfer::model::dsv41

#endif  // DEEPINFER_MODEL_DEEPSEEK_V41_SESSION_TESTING_H_
