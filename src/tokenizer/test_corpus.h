// Deterministic multilingual test corpus for the tokenizer tests and benchmark (no downloads):
// English prose, source code, CJK (inside and outside the DeepSeek CJK pre-tokenizer class),
// emoji (incl. ZWJ sequences, skin tones, flags), combining marks, digit runs (ASCII and other
// Unicode digits), whitespace runs (spaces, tabs, CR/LF, NBSP, ideographic space) and mixed
// scripts (Cyrillic, Greek, Arabic, Hebrew, Devanagari, Thai, Hangul).
//
// Only characters assigned in Unicode 14 are used, so PCRE2 10.42 (Unicode 14) and node's ICU
// agree on their general categories; U+FEFF and U+0085 are avoided because `\s` differs between
// JavaScript, PCRE2 and Rust for them.
#ifndef DEEPINFER_TOKENIZER_TEST_CORPUS_H_
#define DEEPINFER_TOKENIZER_TEST_CORPUS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer::tokenizer_testing {

// Documents of a few hundred to a few thousand bytes (they contain newlines) whose total size is
// at least `min_total_bytes`; the same seed always gives the same corpus.
std::vector<std::string> GenerateCorpus(size_t min_total_bytes, uint64_t seed = 1);

// Only English prose (the throughput target is stated for it).
std::vector<std::string> GenerateEnglishProse(size_t min_total_bytes, uint64_t seed = 2);

}  // namespace deepinfer::tokenizer_testing

#endif  // DEEPINFER_TOKENIZER_TEST_CORPUS_H_
