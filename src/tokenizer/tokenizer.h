// Native Hugging Face `tokenizer.json` tokenizer for the two families deepinfer serves:
// byte-level BPE (DeepSeek V3/V4: Split pre-tokenizers + ByteLevel) and SentencePiece-style BPE
// (Llama/stories260K: Prepend/Replace normalizers, byte_fallback, Metaspace-like decoding).
//
// Safety rules (shared/spec/protocol.md §4.4, DEEPINFER-DESIGN.md §13):
//   * EncodeText() never recognises added/special tokens inside the text: user, tool and argument
//     text can never become control tokens. `<｜User｜>` typed by a user encodes to the ids of its
//     characters ([30, 28217, 6756, 28217, 32] with the DeepSeek vocabulary), never to 128803.
//   * Special tokens enter a prompt only by id, through EncodeTemplate()'s special pieces.
//   * Segments are cut only at special tokens (spec §4.4: cutting plain text elsewhere changes
//     ids), so segment-parallel encoding is exactly equal to sequential encoding.
//
// Supported components (anything else is an Unimplemented load error naming it):
//   normalizers:     Sequence, Replace (String/Regex pattern), Prepend (NFC/NFKC and the others
//                    are Unimplemented: neither tokenizer family we serve uses them)
//   pre-tokenizers:  Sequence, Split (Regex/String pattern, PCRE2 with UTF+UCP+JIT; behaviours
//                    Isolated/Removed/MergedWithPrevious/MergedWithNext/Contiguous; invert),
//                    ByteLevel (add_prefix_space, use_regex), Metaspace, Digits
//   model:           BPE (merge ranks, byte_fallback, unk_token, fuse_unk, ignore_merges)
//   decoders:        Sequence, ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace
//   post_processor, truncation, padding: ignored (templates add BOS/EOS explicitly)
// Known divergence: regex classes follow PCRE2 10.42 (Unicode 14): `\s` matches U+0085, which
// JavaScript ports (@lenml/tokenizers) do not treat as a space; characters assigned after
// Unicode 14 may differ in category from newer engines.
//
// Thread-safety: a Tokenizer is immutable after loading; every const method may be called
// concurrently from any number of threads (the per-piece BPE cache is internally sharded and
// locked). StreamingDetokenizer is single-threaded (one per output stream).
#ifndef DEEPINFER_TOKENIZER_TOKENIZER_H_
#define DEEPINFER_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace deepinfer {

class ThreadPool;

namespace tokenizer_internal {
class TokenizerImpl;
}  // namespace tokenizer_internal

// One piece of a rendered chat template: either a special token given by id (special_id >= 0;
// `text` ignored) or a span of plain text (special_id < 0) that is encoded with added-token
// matching switched off. The text must outlive the EncodeTemplate() call.
struct TemplatePiece {
  int32_t special_id = -1;
  std::string_view text;

  static TemplatePiece Special(int32_t id) { return TemplatePiece{id, {}}; }
  static TemplatePiece Text(std::string_view t) { return TemplatePiece{-1, t}; }
};

// Facts about one vocabulary entry, for decoding and for grammar-constrained sampling.
struct TokenInfo {
  bool is_added = false;    // listed in tokenizer.json "added_tokens"
  bool is_special = false;  // added token with "special": true (dropped by skip_special decode)
};

class Tokenizer {
 public:
  // Loads `dir`/tokenizer.json and, if present, `dir`/tokenizer_config.json (bos/eos token
  // strings, add_bos_token/add_eos_token). Errors: NotFound (no tokenizer.json),
  // InvalidArgument (malformed JSON or fields, naming the field), Unimplemented (a component
  // type we do not support, naming it).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromDirectory(std::string_view dir);

  // Same from the file contents; `tokenizer_config_json` may be empty.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(
      std::string_view tokenizer_json, std::string_view tokenizer_config_json = {});

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Encodes plain text: normalizer -> pre-tokenizer -> BPE. Added/special tokens are NOT matched
  // inside `text` (protocol.md §4.4). No BOS/EOS is added. Invalid UTF-8 in `text` is encoded
  // byte by byte where the vocabulary allows it (byte-level BPE), so it never crashes.
  std::vector<int32_t> EncodeText(std::string_view text) const;

  // Encodes a rendered template: special pieces contribute their id, every text piece is encoded
  // independently with EncodeText(), results are concatenated in order (segments are cut only
  // at special tokens, protocol.md §4.4). When `pool` is non-null and the text is long (>= 64 KiB
  // in total), the work runs on `pool`: text pieces are pre-tokenized in parallel, a piece of
  // >= 256 KiB (one huge user message) is pre-tokenized with parallel regex scans that are
  // stitched exactly, and BPE runs over ordered chunks of pre-token pieces. The result is
  // identical to sequential encoding for any thread count. special_id values are passed through
  // unchanged (the model's vocabulary may be larger than the tokenizer's).
  std::vector<int32_t> EncodeTemplate(std::span<const TemplatePiece> pieces,
                                      ThreadPool* pool = nullptr) const;

  // EncodeText() / EncodeTemplate() that give up early: the same ids when there are at most
  // `max_tokens` of them, nullopt as soon as the count provably exceeds it (more pre-token
  // pieces than that, each being at least one id, or more ids so far). A prompt far longer than
  // a context of `max_tokens` then costs ids for about max_tokens tokens, not for the whole
  // text (the pre-token pieces are views into the text, bounded by its bytes).
  std::optional<std::vector<int32_t>> EncodeTextAtMost(std::string_view text,
                                                       size_t max_tokens) const;
  std::optional<std::vector<int32_t>> EncodeTemplateAtMost(std::span<const TemplatePiece> pieces,
                                                           size_t max_tokens,
                                                           ThreadPool* pool = nullptr) const;

  // Looks up an added/special token by its exact string (e.g. "<｜User｜>" -> 128803), then the
  // base vocabulary (token strings in the model's symbol alphabet, e.g. "Ġworld"). nullopt if
  // absent.
  std::optional<int32_t> TokenId(std::string_view token_string) const;

  // The vocabulary string of `id` as stored in tokenizer.json (e.g. "Ġworld", "▁the",
  // "<0x0A>", "<｜User｜>"); empty for ids without an entry or out of range.
  std::string_view TokenString(int32_t id) const;

  // The raw bytes `id` contributes to the output when decoded in the middle of a sequence
  // (decoder applied to this token alone, without sequence-start rules such as Strip):
  // "Ġworld" -> " world", "<0x0A>" -> "\n", "▁the" -> " the", a special token -> its content.
  // May be an incomplete UTF-8 sequence (a single byte of a multi-byte character). Empty for
  // ids out of range. Precomputed: O(1), valid for the Tokenizer's lifetime.
  std::string_view TokenBytes(int32_t id) const;

  // Added/special flags of `id` (all false for base-vocabulary or out-of-range ids).
  TokenInfo GetTokenInfo(int32_t id) const;

  // Decodes ids to UTF-8 text: the decoder pipeline of tokenizer.json (byte mapping, ▁ -> space,
  // byte fallback, Strip at sequence start). Byte sequences that are not valid UTF-8 become
  // U+FFFD (one per maximal ill-formed subpart, as Rust's from_utf8_lossy). With skip_special,
  // added tokens marked special are dropped. Ids out of range are skipped.
  std::string Decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // Number of ids the tokenizer knows: max(base vocab id, added token id) + 1. The model's
  // embedding table may be larger (DeepSeek: 129 280 rows vs 128 815 ids in the V3 file).
  int32_t vocab_size() const;

  // BOS/EOS ids from tokenizer_config.json (bos_token/eos_token strings or objects), falling
  // back to well-known added tokens (<｜begin▁of▁sentence｜>, <s>, ...); -1 if unknown.
  int32_t bos_id() const;
  int32_t eos_id() const;
  // tokenizer_config.json add_bos_token / add_eos_token (default false). The tokenizer itself
  // never adds them; templates do.
  bool add_bos() const;
  bool add_eos() const;

  const tokenizer_internal::TokenizerImpl& impl() const { return *impl_; }

 private:
  explicit Tokenizer(std::unique_ptr<tokenizer_internal::TokenizerImpl> impl);
  std::unique_ptr<tokenizer_internal::TokenizerImpl> impl_;
};

// Incremental detokenizer for streaming output (protocol.md §2.3, §4.4). Push() ids one at a
// time; it returns only complete, valid UTF-8 and holds an incomplete trailing sequence until
// later ids complete it: 🦀 = [3574, 102, 225] gives "", "", "🦀". Bytes that can never become
// valid UTF-8 are emitted as U+FFFD exactly as Decode() would, so the concatenation of all
// Push() results plus Flush() equals Decode(all ids, skip_special).
// Flush policy: at end of stream, Flush() emits a held incomplete sequence as U+FFFD (one per
// maximal ill-formed subpart, matching Decode()) and resets the stream state; a client never
// receives a partial code point.
class StreamingDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  explicit StreamingDetokenizer(const Tokenizer* tokenizer, bool skip_special = false);

  // Returns the newly completed UTF-8 text after appending `id` (may be empty).
  std::string Push(int32_t id);

  // Ends the stream (see flush policy above). The detokenizer can be reused afterwards.
  std::string Flush();

  // Bytes currently held back (an incomplete UTF-8 prefix), for diagnostics/tests.
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  int strip_remaining_ = 0;  // leading spaces still to strip at sequence start (Strip decoder)
  std::string pending_;
};

}  // namespace deepinfer

#endif  // DEEPINFER_TOKENIZER_TOKENIZER_H_
