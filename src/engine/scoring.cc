#include "engine/scoring.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace deepinfer::engine {
namespace {

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<uint8_t[], FreeDeleter>;

AlignedBuffer AllocAligned(int64_t bytes) {
  const int64_t rounded = std::max<int64_t>(64, (bytes + 63) / 64 * 64);
  return AlignedBuffer(static_cast<uint8_t*>(std::aligned_alloc(64, rounded)));
}

}  // namespace

void LogSoftmax(std::span<const float> logits, std::vector<double>* out) {
  out->resize(logits.size());
  double max = -INFINITY;
  for (float v : logits) max = std::max<double>(max, v);
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - max);
  const double lse = max + std::log(sum);
  for (size_t i = 0; i < logits.size(); ++i) (*out)[i] = static_cast<double>(logits[i]) - lse;
}

absl::StatusOr<ScoreResult> ScoreTokens(model::CausalLM& model, std::span<const int32_t> tokens,
                                        const ScoreOptions& options) {
  const model::ModelInfo& info = model.info();
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 2) return absl::InvalidArgumentError("scoring needs at least 2 tokens");
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= info.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token ", tokens[i], " at position ", i,
                                                     " is outside the vocabulary [0, ",
                                                     info.vocab_size, ")"));
    }
  }
  const int64_t context = options.context > 0 ? options.context : n;
  const int64_t stride = options.stride > 0 ? options.stride : context;
  if (context < 2) return absl::InvalidArgumentError("--context must be at least 2");
  if (stride > context) return absl::InvalidArgumentError("--stride must not exceed --context");
  if (info.max_context > 0 && std::min(context, n) > info.max_context) {
    return absl::OutOfRangeError(absl::StrCat(
        "scoring window of ", std::min(context, n), " tokens exceeds the model's context of ",
        info.max_context, " tokens; use --context and --stride"));
  }
  if (options.top_logprobs < 0 || options.top_logprobs > info.vocab_size) {
    return absl::InvalidArgumentError("top_logprobs out of range");
  }

  // KV memory for one window (block table 0..nb-1, state slot 0).
  const model::KvLayout& layout = model.kv_layout();
  const int64_t window = std::min(context, n);
  const int64_t num_blocks = (window + model::kBlockTokens - 1) / model::kBlockTokens;
  AlignedBuffer blocks = AllocAligned(layout.BlockBytes() * num_blocks);
  AlignedBuffer state = AllocAligned(std::max<int64_t>(layout.StateBytes(), 64));
  model::KvCacheView kv;
  kv.block_base = blocks.get();
  kv.num_blocks = num_blocks;
  kv.state_base = state.get();
  kv.num_state_slots = 1;
  std::vector<int32_t> block_table(num_blocks);
  for (int64_t b = 0; b < num_blocks; ++b) block_table[b] = static_cast<int32_t>(b);

  ScoreResult result;
  result.tokens.assign(tokens.begin(), tokens.end());
  result.token_logprobs.assign(n, std::nullopt);
  result.top_logprobs.assign(n, {});
  const int64_t total_windows = n <= context ? 1 : 1 + (n - context + stride - 1) / stride;
  int64_t windows_done = 0;
  std::vector<double> lsm;
  double nll_sum = 0;
  int64_t prev_end = 0;
  for (int64_t begin = 0;; begin += stride) {
    const int64_t end = std::min(begin + context, n);
    // Score positions [max(prev_end, begin + 1), end): each predicted by row p - 1 - begin.
    const int64_t first_scored = std::max(prev_end, begin + 1);
    for (int64_t chunk_begin = begin; chunk_begin < end; chunk_begin += options.chunk_tokens) {
      const int64_t chunk_end = std::min(end, chunk_begin + options.chunk_tokens);
      // Rows of this chunk predict positions chunk_begin+1 .. chunk_end.
      const bool needed = chunk_end >= first_scored;
      model::ForwardBatch batch;
      model::SequenceChunk chunk;
      chunk.start_pos = chunk_begin - begin;
      chunk.tokens = tokens.subspan(chunk_begin, chunk_end - chunk_begin);
      chunk.block_table = std::span<const int32_t>(
          block_table.data(), (chunk_end - begin + model::kBlockTokens - 1) / model::kBlockTokens);
      chunk.state_slot = 0;
      chunk.logits = needed ? model::LogitsMode::kAll : model::LogitsMode::kNone;
      batch.chunks.push_back(chunk);
      model::ForwardOutput out;
      RETURN_IF_ERROR(model.Forward(batch, kv, &out));
      if (!needed) continue;
      const int64_t vocab = info.vocab_size;
      for (int64_t row = 0; row < chunk_end - chunk_begin; ++row) {
        const int64_t p = chunk_begin + row + 1;  // position this row predicts
        if (p < first_scored || p >= end) continue;
        std::span<const float> logits(out.logits.data() + row * vocab, vocab);
        LogSoftmax(logits, &lsm);
        const double lp = lsm[tokens[p]];
        result.token_logprobs[p] = lp;
        nll_sum -= lp;
        ++result.scored_tokens;
        if (options.top_logprobs > 0) {
          std::vector<int32_t> idx(vocab);
          for (int64_t i = 0; i < vocab; ++i) idx[i] = static_cast<int32_t>(i);
          std::partial_sort(
              idx.begin(), idx.begin() + options.top_logprobs, idx.end(),
              [&](int32_t a, int32_t b) { return lsm[a] != lsm[b] ? lsm[a] > lsm[b] : a < b; });
          auto& top = result.top_logprobs[p];
          for (int k = 0; k < options.top_logprobs; ++k) top.emplace_back(idx[k], lsm[idx[k]]);
        }
      }
    }
    ++windows_done;
    if (options.progress) options.progress(windows_done, total_windows);
    prev_end = end;
    if (end == n) break;
  }
  result.nll = nll_sum / static_cast<double>(result.scored_tokens);
  result.ppl = std::exp(result.nll);
  return result;
}

}  // namespace deepinfer::engine
