#include "model/deepseek_v4_reference.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace deepinfer::model::dsv4 {

ReferenceSession::ReferenceSession(DeepseekV4Model* model, int64_t max_tokens)
    : model_(model), max_tokens_(max_tokens) {
  const KvLayout& L = model->kv_layout();
  const int64_t nblocks = (max_tokens + kBlockTokens - 1) / kBlockTokens;
  blocks_.assign((nblocks * L.BlockBytes() + 3) / 4 + 16, 0.f);
  state_.assign((L.StateBytes() + 3) / 4 + 16, 0.f);
  block_table_.resize(nblocks);
  // Reverse order so that a bug assuming block id == block index shows up.
  for (int64_t i = 0; i < nblocks; ++i) block_table_[i] = static_cast<int32_t>(nblocks - 1 - i);
  view_.block_base = reinterpret_cast<uint8_t*>(blocks_.data());
  view_.num_blocks = nblocks;
  view_.state_base = reinterpret_cast<uint8_t*>(state_.data());
  view_.num_state_slots = 1;
}

absl::StatusOr<std::vector<float>> ReferenceSession::Feed(std::span<const int32_t> ids,
                                                          std::span<const int64_t> chunk_sizes,
                                                          std::vector<float>* streams,
                                                          LogitsMode mode) {
  const int64_t T = static_cast<int64_t>(ids.size());
  if (pos_ + T > max_tokens_) {
    return absl::OutOfRangeError(absl::StrCat("reference session holds ", max_tokens_, " tokens"));
  }
  std::vector<float> all, logits, st;
  if (streams != nullptr) streams->clear();
  int64_t done = 0, ci = 0;
  while (done < T) {
    int64_t size = chunk_sizes.empty() ? T : chunk_sizes[ci++ % chunk_sizes.size()];
    size = std::clamp<int64_t>(size, 1, T - done);
    SequenceChunk chunk;
    chunk.start_pos = pos_;
    chunk.tokens = ids.subspan(done, size);
    const int64_t nb = (pos_ + size + kBlockTokens - 1) / kBlockTokens;
    chunk.block_table = std::span<const int32_t>(block_table_.data(), nb);
    chunk.state_slot = 0;
    chunk.logits = mode;
    RETURN_IF_ERROR(model_->ForwardChunk(chunk, view_, &logits, streams ? &st : nullptr));
    all.insert(all.end(), logits.begin(), logits.end());
    if (streams != nullptr) streams->insert(streams->end(), st.begin(), st.end());
    pos_ += size;
    done += size;
  }
  return all;
}

absl::StatusOr<std::vector<float>> ReferenceSession::Mtp(int64_t start,
                                                         std::span<const float> streams,
                                                         std::span<const int32_t> next,
                                                         LogitsMode mode) {
  std::vector<float> logits;
  RETURN_IF_ERROR(model_->ForwardMtp(start, streams, next, 0, view_, mode, &logits));
  return logits;
}

int32_t ArgMax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

absl::StatusOr<GreedyResult> GreedyDecode(DeepseekV4Model* model, std::span<const int32_t> prompt,
                                          int steps, bool with_mtp,
                                          std::span<const int32_t> teacher) {
  const int64_t V = model->config().vocab_size, T = static_cast<int64_t>(prompt.size());
  ReferenceSession session(model, T + steps + 1);
  GreedyResult r;
  std::vector<float> streams;
  ASSIGN_OR_RETURN(r.prompt_logits, session.Feed(prompt, {}, with_mtp ? &streams : nullptr));
  r.tokens.push_back(ArgMax(std::span<const float>(r.prompt_logits).subspan((T - 1) * V, V)));
  if (with_mtp) {
    std::vector<int32_t> next(prompt.begin() + 1, prompt.end());
    next.push_back(r.tokens[0]);
    // The MTP window is its own state; it lives in the same slot and restarts at position 0.
    ASSIGN_OR_RETURN(r.mtp_logits_last, session.Mtp(0, streams, next, LogitsMode::kLast));
  }
  for (int i = 0; i < steps; ++i) {
    const int32_t feed = teacher.size() > static_cast<size_t>(i) ? teacher[i] : r.tokens.back();
    ASSIGN_OR_RETURN(std::vector<float> l, session.Feed(std::span<const int32_t>(&feed, 1)));
    r.step_logits.insert(r.step_logits.end(), l.begin(), l.end());
    r.tokens.push_back(ArgMax(l));
  }
  return r;
}

}  // namespace deepinfer::model::dsv4
