// The BPE model of tokenizer.json ("model": {"type": "BPE"}), with Hugging Face tokenizers'
// merge semantics: inside one pre-tokenized piece, repeatedly merge the adjacent pair with the
// lowest merge rank (leftmost on ties) until no pair has a rank.
//
// Two symbol alphabets:
//   * byte-level (a ByteLevel pre-tokenizer is present): vocabulary strings are translated from
//     the GPT-2 printable alphabet (`Ġ` = 0x20, ...) to raw bytes once at load, and pieces are
//     split into bytes — no per-encode byte->char mapping;
//   * char-level (SentencePiece-style): pieces are split into UTF-8 characters; characters
//     missing from the vocabulary use `<0xXX>` byte tokens (byte_fallback) or unk_token.
// Merges are keyed by (left id, right id) -> (rank, merged id). The merge loop uses reusable
// per-thread buffers (no per-token heap allocation): a rank-array scan for short pieces and a
// binary heap with lazy invalidation for long ones (SentencePiece-style tokenizers without a
// pre-tokenizer hand whole lines to BPE). A sharded, mutex-protected cache maps short pieces to
// their ids.
#ifndef DEEPINFER_TOKENIZER_BPE_H_
#define DEEPINFER_TOKENIZER_BPE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace deepinfer::tokenizer_internal {

// Maps a byte-level vocabulary string (GPT-2 alphabet) to raw bytes; false if it contains a
// character outside the 256-character alphabet.
bool ByteLevelToBytes(std::string_view token, std::string* bytes);
// The GPT-2 alphabet character (as UTF-8) of byte `b`.
std::string_view ByteLevelChar(uint8_t b);

struct BpeOptions {
  bool byte_level = false;
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;
  int32_t unk_id = -1;  // -1: characters without a token are dropped (HF behaviour)
};

class BpeModel {
 public:
  // `vocab`: token string -> id; `merges`: (left, right) token strings in rank order.
  // InvalidArgument naming the merge if a merge refers to a missing token or its concatenation
  // is not in the vocabulary.
  static absl::StatusOr<std::unique_ptr<BpeModel>> Create(
      const std::vector<std::pair<std::string, int32_t>>& vocab,
      const std::vector<std::pair<std::string, std::string>>& merges, const BpeOptions& options);

  // Appends the ids of one pre-tokenized piece (UTF-8 text as produced by the normalizer and
  // pre-tokenizer, before any byte-level mapping) to `out`. Thread-safe.
  void Encode(std::string_view piece, std::vector<int32_t>* out) const;

  const BpeOptions& options() const { return options_; }

 private:
  BpeModel() = default;
  void EncodeUncached(std::string_view piece, std::vector<int32_t>* out) const;
  void InitialSymbols(std::string_view piece, std::vector<int32_t>* syms) const;
  void MergeSmall(std::vector<int32_t>* syms) const;
  void MergeLarge(std::vector<int32_t>* syms) const;
  // Packed (rank << 32 | merged id), or kNoMerge.
  uint64_t LookupMerge(int32_t left, int32_t right) const {
    auto it = merges_.find((static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
                           static_cast<uint32_t>(right));
    return it == merges_.end() ? kNoMerge : it->second;
  }
  static constexpr uint64_t kNoMerge = ~uint64_t{0};

  BpeOptions options_;
  // Model-space symbol string (raw bytes when byte_level) -> id.
  absl::flat_hash_map<std::string, int32_t> symbol_to_id_;
  // byte_level: id of each single byte; char-level: id of `<0xXX>` (byte_fallback); -1 if none.
  std::array<int32_t, 256> byte_ids_;
  absl::flat_hash_map<uint64_t, uint64_t> merges_;

  // Pieces of at most 2 bytes merge faster than a cache lookup; longer than 64 are rare.
  static constexpr size_t kMinCachedPieceBytes = 2;
  static constexpr size_t kMaxCachedPieceBytes = 64;
  static constexpr size_t kCacheShards = 64;
  static constexpr size_t kMaxEntriesPerShard = 8192;
  struct CacheShard {
    std::mutex mu;
    absl::flat_hash_map<std::string, std::vector<int32_t>> map;
  };
  std::unique_ptr<CacheShard[]> cache_;
};

}  // namespace deepinfer::tokenizer_internal

#endif  // DEEPINFER_TOKENIZER_BPE_H_
