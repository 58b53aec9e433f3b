#include "engine/testing/fake_model.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/clock.h"

namespace deepinfer::engine::testing {
namespace {

using model::kBlockTokens;

uint64_t Mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
uint64_t Mix2(uint64_t a, uint64_t b) { return Mix(a * 0x100000001B3ull ^ Mix(b)); }

constexpr int kGroup = 4;  // positions per "cmp" row

}  // namespace

FakeModel::FakeModel(const FakeModelOptions& options) : options_(options) {
  info_.architecture = "FakeForCausalLM";
  info_.model_type = "fake";
  info_.vocab_size = options.vocab_size;
  info_.max_context = options.max_context;
  info_.hidden_size = 8;
  info_.num_layers = 1;
  info_.bos_token_id = 0;
  info_.eos_token_ids = {options.eos_token_id};
  layout_.paged = {{"tok", 8, kBlockTokens}, {"cmp", 8, kBlockTokens / kGroup}};
  if (options.with_state) layout_.state = {{"ring", 16}};
  layout_.layout_id = 0xFA4E;
}

void FakeModel::FillLogits(uint64_t seed, float* row) const {
  for (int64_t v = 0; v < options_.vocab_size; ++v) {
    const uint64_t h = Mix2(seed, static_cast<uint64_t>(v));
    row[v] = static_cast<float>(h >> 40) * (8.0f / 16777216.0f) - 4.0f;
  }
  if (options_.eos_period > 0 && Mix(seed ^ 0xE05) % options_.eos_period == 0) {
    row[options_.eos_token_id] += 16.0f;
  }
}

absl::Status FakeModel::Forward(const model::ForwardBatch& batch, const model::KvCacheView& kv,
                                model::ForwardOutput* out) {
  const int64_t block_bytes = layout_.BlockBytes();
  const int64_t state_bytes = layout_.StateBytes();
  const int64_t cmp_offset = layout_.PagedOffset(1);
  // Validate first: on error nothing is produced.
  for (size_t c = 0; c < batch.chunks.size(); ++c) {
    const model::SequenceChunk& ch = batch.chunks[c];
    if (ch.tokens.empty())
      return absl::InvalidArgumentError(absl::StrCat("chunk ", c, ": no tokens"));
    const int64_t end = ch.start_pos + static_cast<int64_t>(ch.tokens.size());
    if (ch.start_pos < 0 || end > options_.max_context) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk ", c, ": positions beyond max_context"));
    }
    if (static_cast<int64_t>(ch.block_table.size()) < (end + kBlockTokens - 1) / kBlockTokens) {
      return absl::InvalidArgumentError(absl::StrCat("chunk ", c, ": block table too short"));
    }
    for (int32_t b : ch.block_table) {
      if (b < 0 || b >= kv.num_blocks) {
        return absl::InvalidArgumentError(absl::StrCat("chunk ", c, ": bad block id ", b));
      }
    }
    for (int32_t t : ch.tokens) {
      if (t < 0 || t >= options_.vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("chunk ", c, ": token ", t, " out of vocabulary"));
      }
    }
    if (state_bytes > 0 && (ch.state_slot < 0 || ch.state_slot >= kv.num_state_slots)) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk ", c, ": bad state slot ", ch.state_slot));
    }
  }
  if (options_.forward_delay_us > 0) {
    const int64_t until = MonotonicNanos() + int64_t{options_.forward_delay_us} * 1000;
    while (MonotonicNanos() < until) {
    }
  }
  ++num_forwards_;
  // Both paged caches ("tok" 0, "cmp" 1) are read below: wait for a swap-in running beside us.
  kv.BeforeRead(0);
  kv.BeforeRead(1);
  out->logits.clear();
  out->chunk_row_begin.assign(1, 0);
  const int64_t vocab = options_.vocab_size;
  for (const model::SequenceChunk& ch : batch.chunks) {
    auto tok_row = [&](int64_t pos) -> uint64_t* {
      return reinterpret_cast<uint64_t*>(kv.block_base +
                                         ch.block_table[pos / kBlockTokens] * block_bytes +
                                         (pos % kBlockTokens) * 8);
    };
    auto cmp_row = [&](int64_t group) -> uint64_t* {
      const int64_t pos = group * kGroup;
      return reinterpret_cast<uint64_t*>(kv.block_base +
                                         ch.block_table[pos / kBlockTokens] * block_bytes +
                                         cmp_offset + ((pos % kBlockTokens) / kGroup) * 8);
    };
    uint64_t* state = state_bytes > 0
                          ? reinterpret_cast<uint64_t*>(kv.state_base + ch.state_slot * state_bytes)
                          : nullptr;
    if (state != nullptr && ch.start_pos == ch.replay_start) {
      // A replay starts the state afresh at its start, so its output differs from a full run's
      // (as a real window state's approximation does).
      state[0] = 0x5EED ^ static_cast<uint64_t>(ch.replay_start);
      state[1] = 0;
    }
    const int64_t n = static_cast<int64_t>(ch.tokens.size());
    for (int64_t i = 0; i < n; ++i) {
      const int64_t pos = ch.start_pos + i;
      if (pos < ch.replay_until) {
        // Cached block KV is read, never written: check it is what this token would write.
        if (*tok_row(pos) != Mix2(static_cast<uint64_t>(ch.tokens[i]), static_cast<uint64_t>(pos))) {
          return absl::InternalError(absl::StrCat("replayed position ", pos, " has foreign KV"));
        }
        if (state != nullptr) {
          state[0] = Mix2(state[0], static_cast<uint64_t>(ch.tokens[i]));
          state[1] += 1;
        }
        continue;
      }
      *tok_row(pos) = Mix2(static_cast<uint64_t>(ch.tokens[i]), static_cast<uint64_t>(pos));
      if (pos % kGroup == kGroup - 1) {
        uint64_t g = 0xC0;
        for (int64_t q = pos - kGroup + 1; q <= pos; ++q) g = Mix2(g, *tok_row(q));
        *cmp_row(pos / kGroup) = g;
      }
      if (state != nullptr) {
        state[0] = Mix2(state[0], static_cast<uint64_t>(ch.tokens[i]));
        state[1] += 1;
      }
      const bool want = ch.logits == model::LogitsMode::kAll ||
                        (ch.logits == model::LogitsMode::kLast && i == n - 1);
      if (!want) continue;
      // "Attention" over the whole history, read back from the paged KV.
      uint64_t acc = 0xA11;
      for (int64_t q = 0; q <= pos; ++q) acc = Mix2(acc, *tok_row(q));
      for (int64_t g = 0; g < (pos + 1) / kGroup; ++g) acc = Mix2(acc, *cmp_row(g));
      if (state != nullptr) acc = Mix2(Mix2(acc, state[0]), state[1]);
      const size_t at = out->logits.size();
      out->logits.resize(at + vocab);
      FillLogits(acc, out->logits.data() + at);
    }
    out->chunk_row_begin.push_back(static_cast<int64_t>(out->logits.size()) / vocab);
  }
  return absl::OkStatus();
}

std::vector<float> FakeModel::ReferenceLogits(const std::vector<int32_t>& tokens, bool all_rows,
                                              int64_t replay_start) const {
  std::vector<float> out;
  std::vector<uint64_t> rows;
  std::vector<uint64_t> groups;
  uint64_t s0 = 0x5EED ^ static_cast<uint64_t>(replay_start), s1 = 0;
  const int64_t vocab = options_.vocab_size;
  for (size_t i = 0; i < tokens.size(); ++i) {
    rows.push_back(Mix2(static_cast<uint64_t>(tokens[i]), i));
    if (i % kGroup == kGroup - 1) {
      uint64_t g = 0xC0;
      for (size_t q = i - kGroup + 1; q <= i; ++q) g = Mix2(g, rows[q]);
      groups.push_back(g);
    }
    if (static_cast<int64_t>(i) >= replay_start) {
      s0 = Mix2(s0, static_cast<uint64_t>(tokens[i]));
      s1 += 1;
    }
    if (!all_rows && i + 1 != tokens.size()) continue;
    uint64_t acc = 0xA11;
    for (uint64_t r : rows) acc = Mix2(acc, r);
    for (uint64_t g : groups) acc = Mix2(acc, g);
    if (options_.with_state) acc = Mix2(Mix2(acc, s0), s1);
    const size_t at = out.size();
    out.resize(at + vocab);
    FillLogits(acc, out.data() + at);
  }
  return out;
}

}  // namespace deepinfer::engine::testing
