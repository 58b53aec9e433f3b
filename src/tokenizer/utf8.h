// UTF-8 helpers for the tokenizer: lossy validation with Rust `String::from_utf8_lossy`
// semantics (one U+FFFD per maximal ill-formed subpart, Unicode §3.9 "substitution of maximal
// subparts"), usable incrementally for streaming detokenization (protocol.md §4.4).
#ifndef DEEPINFER_TOKENIZER_UTF8_H_
#define DEEPINFER_TOKENIZER_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace deepinfer::tokenizer_internal {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Appends `in` to `out` as valid UTF-8, replacing each maximal ill-formed subpart with U+FFFD.
// If `final` is false and `in` ends with an incomplete (but so far valid) sequence, that tail is
// not consumed. Returns the number of bytes of `in` consumed (== in.size() when final).
size_t AppendUtf8Lossy(std::string_view in, bool final, std::string* out);

// Length in bytes of the UTF-8 sequence starting with lead byte `b` (1 for ASCII and for
// invalid lead bytes, which are then treated as single units).
inline int Utf8SeqLen(uint8_t b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 1;
}

// Appends the UTF-8 encoding of code point `cp` (< 0x110000, not a surrogate) to `out`.
void AppendCodePoint(uint32_t cp, std::string* out);

}  // namespace deepinfer::tokenizer_internal

#endif  // DEEPINFER_TOKENIZER_UTF8_H_
