// Validation of a forward's chunks, shared by DeepSeek-V4 and V4.1: both accept the same
// SequenceChunk contract (positions within the context, token ids in the vocabulary, a valid
// state slot, a block-aligned replay range, a block table covering the chunk), and a batch must
// not give one state slot to two chunks. Messages start with the model's name ("DeepSeek-V4",
// "DeepSeek-V4.1") so a caller sees which model refused the request.
#ifndef DEEPINFER_MODEL_DEEPSEEK_V4_CHUNK_CHECK_H_
#define DEEPINFER_MODEL_DEEPSEEK_V4_CHUNK_CHECK_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "model/kv_layout.h"
#include "model/model.h"

namespace deepinfer::model::dsv4 {

// InvalidArgument unless `chunk` fits the model (max_positions, vocab_size) and `kv` (state
// slots, and blocks when `layout` has paged caches); checked before anything is written.
absl::Status ValidateForwardChunk(absl::string_view model, const SequenceChunk& chunk,
                                  const KvCacheView& kv, const KvLayout& layout,
                                  int64_t max_positions, int64_t vocab_size);

// InvalidArgument when two chunks of one batch use the same state slot (`slots`: one per chunk).
absl::Status CheckDistinctStateSlots(absl::string_view model, std::vector<int32_t> slots);

}  // namespace deepinfer::model::dsv4

#endif  // DEEPINFER_MODEL_DEEPSEEK_V4_CHUNK_CHECK_H_
