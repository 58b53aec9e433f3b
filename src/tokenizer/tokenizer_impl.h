// Internal pipeline behind Tokenizer (tokenizer.h): normalizer steps, pre-tokenizer steps, BPE
// model and the per-id decode table, as loaded from tokenizer.json. Not part of the public API;
// exposed for tests (pre-tokenization pieces) and the benchmark.
#ifndef DEEPINFER_TOKENIZER_TOKENIZER_IMPL_H_
#define DEEPINFER_TOKENIZER_TOKENIZER_IMPL_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "tokenizer/bpe.h"
#include "tokenizer/regex.h"

namespace deepinfer {
class ThreadPool;
}  // namespace deepinfer

namespace deepinfer::tokenizer_internal {

// HF SplitDelimiterBehavior.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct NormalizerStep {
  enum class Kind { kReplace, kPrepend };
  Kind kind = Kind::kReplace;
  std::unique_ptr<Regex> pattern;  // kReplace
  std::string content;             // kReplace: replacement; kPrepend: prefix
};

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel, kMetaspace };
  enum class PrependScheme { kAlways, kFirst, kNever };
  Kind kind = Kind::kSplit;
  std::unique_ptr<Regex> pattern;  // kSplit; kByteLevel with use_regex; kMetaspace split
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // kByteLevel
  std::string replacement;        // kMetaspace (UTF-8 of the replacement char, usually "▁")
  PrependScheme prepend_scheme = PrependScheme::kAlways;
  bool split = true;  // kMetaspace
};

// Result of normalization + pre-tokenization of one text span. `pieces` view `source` (the
// span itself when no normalizer changed it), `normalized` or `arena`; do not move a
// Pretokenized after filling it unless `normalized` is empty (SSO would invalidate views).
struct Pretokenized {
  std::string normalized;
  std::deque<std::string> arena;
  std::vector<std::string_view> pieces;
};

class TokenizerImpl {
 public:
  static absl::StatusOr<std::unique_ptr<TokenizerImpl>> Load(std::string_view tokenizer_json,
                                                             std::string_view config_json);

  // Normalizes and pre-tokenizes `text`. `first_section`: the span starts the input (Metaspace
  // prepend_scheme "first"). With a `pool`, pieces of at least kParallelScanBytes are split
  // with Regex::FindAllParallel (same pieces as sequential).
  void Pretokenize(std::string_view text, bool first_section, Pretokenized* out,
                   ThreadPool* pool = nullptr) const;
  static constexpr size_t kParallelScanBytes = 256 * 1024;
  // BPE-encodes pre-tokenized pieces, appending ids. Stops early and returns false once `out`
  // holds more than `max_out` ids (every piece encodes to at least one id).
  bool EncodePieces(const std::string_view* pieces, size_t count, std::vector<int32_t>* out,
                    size_t max_out = SIZE_MAX) const;
  // Pretokenize + EncodePieces. Returns false as soon as `out` provably ends up with more than
  // `max_out` ids: more pre-token pieces than that, or more ids so far (then `out` is partial).
  bool EncodeSpan(std::string_view text, bool first_section, std::vector<int32_t>* out,
                  size_t max_out = SIZE_MAX) const;

  // Decoding: bytes of one token mid-sequence, and the sequence-start rule.
  std::string_view TokenBytes(int32_t id) const {
    return id >= 0 && id < static_cast<int32_t>(token_bytes_.size()) ? token_bytes_[id]
                                                                     : std::string_view();
  }
  // Number of leading ' ' removed at the start of a decoded sequence (Strip after Fuse,
  // Metaspace prefix space).
  int strip_leading_spaces() const { return strip_leading_spaces_; }

  int32_t vocab_size() const { return static_cast<int32_t>(token_strings_.size()); }
  std::string_view TokenString(int32_t id) const {
    return id >= 0 && id < vocab_size() ? token_strings_[id] : std::string_view();
  }
  bool IsAdded(int32_t id) const { return id >= 0 && id < vocab_size() && (flags_[id] & 1); }
  bool IsSpecial(int32_t id) const { return id >= 0 && id < vocab_size() && (flags_[id] & 2); }
  std::optional<int32_t> TokenId(std::string_view s) const;

  int32_t bos_id = -1;
  int32_t eos_id = -1;
  bool add_bos = false;
  bool add_eos = false;

 private:
  absl::Status LoadImpl(std::string_view tokenizer_json, std::string_view config_json);

  std::vector<NormalizerStep> normalizers_;
  std::vector<PreTokenizerStep> pre_tokenizers_;
  std::unique_ptr<BpeModel> model_;

  std::vector<std::string> token_strings_;  // by id
  std::vector<std::string> token_bytes_;    // by id, decoder applied per token
  std::vector<uint8_t> flags_;              // bit 0: added, bit 1: special
  absl::flat_hash_map<std::string, int32_t> added_to_id_;
  absl::flat_hash_map<std::string, int32_t> vocab_to_id_;
  int strip_leading_spaces_ = 0;
};

}  // namespace deepinfer::tokenizer_internal

#endif  // DEEPINFER_TOKENIZER_TOKENIZER_IMPL_H_
