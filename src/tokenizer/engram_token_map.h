// The Engram compressed token map of DeepSeek-V4.1 (shared/spec/deepseek-v41.md §4.2, official
// inference/engram.py build_compressed_token_map), derived from a tokenizer: every id is decoded
// alone (decoder pipeline, special tokens kept); text containing U+FFFD (a partial UTF-8 byte
// token) is keyed by its raw vocabulary string, any other text by
//   NFKC -> NFD -> StripAccents (drop General_Category=Mark) -> Lowercase (per code point, full
//   mapping, no context) -> "[ \t\r\n]+" -> " " -> a lone " " becomes U+E000 -> Strip (Unicode
//   White_Space) -> U+E000 -> " "
// (the original text when that is empty). Compressed ids number the distinct keys in order of
// first appearance by token id, so " The", "the" and "THE" share one id.
//
// Lives in the tokenizer layer (it needs the decoder and ICU's normalisation data); the model
// layer receives the result through dsv41::SetEngramTokenMapSource (model/deepseek_v41_engram.h).
#ifndef DEEPINFER_TOKENIZER_ENGRAM_TOKEN_MAP_H_
#define DEEPINFER_TOKENIZER_ENGRAM_TOKEN_MAP_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer {

struct CompressedTokenMap {
  std::vector<int32_t> map;  // [tokenizer.vocab_size()] compressed id per token id
  int64_t num_keys = 0;      // number of distinct keys = the compressed vocabulary size
};

// The normalisation chain above applied to UTF-8 `text` (valid UTF-8 expected; ill-formed bytes
// are treated as U+FFFD by ICU's conversion).
std::string EngramNormalize(std::string_view text);

// Builds the map for every id below tok.vocab_size(). Errors: Internal if ICU's normaliser data
// cannot be loaded.
absl::StatusOr<CompressedTokenMap> BuildEngramTokenMap(const Tokenizer& tok);

}  // namespace deepinfer::tokenizer

#endif  // DEEPINFER_TOKENIZER_ENGRAM_TOKEN_MAP_H_
