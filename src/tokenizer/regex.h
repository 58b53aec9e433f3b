// Thin PCRE2 wrapper for tokenizer.json Split/Replace patterns: compiled once with PCRE2_UTF |
// PCRE2_UCP (Unicode classes: \p{L}, \s, ...) and JIT, matched with per-thread match data, so
// one compiled Regex is safely shared by every encoding thread (protocol.md §4.4 requires
// Unicode general categories and lookahead, which std::regex lacks).
#ifndef DEEPINFER_TOKENIZER_REGEX_H_
#define DEEPINFER_TOKENIZER_REGEX_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace deepinfer {
class ThreadPool;
}  // namespace deepinfer

namespace deepinfer::tokenizer_internal {

class Regex {
 public:
  // Compiles `pattern` (UTF-8). InvalidArgument naming the pattern and PCRE2's message if it
  // does not compile. Input texts may contain invalid UTF-8 (PCRE2_MATCH_INVALID_UTF): such
  // bytes never match and end up in gaps.
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(std::string_view pattern);
  // Regex matching `literal` exactly.
  static absl::StatusOr<std::unique_ptr<Regex>> Literal(std::string_view literal);
  ~Regex();

  // Appends the [begin, end) byte offsets of every non-overlapping match of the pattern in
  // `text`, scanning left to right (after an empty match the scan advances by one character;
  // empty matches are not reported). Offsets are relative to text.data().
  void FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* matches) const;

  // Exactly the matches of FindAll(text), computed on `pool`: the text is cut into one chunk
  // per thread; each thread scans the FULL subject (so lookahead/lookbehind see across the cut)
  // from its chunk start until its first match beginning at or after the next chunk start. The
  // scans are stitched at a match both neighbours found: scanning is deterministic from a match
  // end, so from a common match on they agree, and the part before it comes from the left scan,
  // which started at a true scan position. Where no common match exists the left scan simply
  // continues sequentially. Used for very long pre-tokenizer pieces (one huge prompt segment).
  void FindAllParallel(std::string_view text, ThreadPool* pool,
                       std::vector<std::pair<size_t, size_t>>* matches) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  // Scans from byte `pos` (a scan position: 0 or a match end), appending matches; stops after
  // appending the first match that begins at or after `stop`. Returns true if it stopped that
  // way, false if it reached the end of the text.
  bool Scan(std::string_view text, size_t pos, size_t stop,
            std::vector<std::pair<size_t, size_t>>* matches) const;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;      // JIT compilation succeeded
};

}  // namespace deepinfer::tokenizer_internal

#endif  // DEEPINFER_TOKENIZER_REGEX_H_
