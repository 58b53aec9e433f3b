#include "tokenizer/engram_token_map.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {
namespace {

constexpr UChar32 kSentinel = 0xE000;  // private use: keeps a lone space through Strip

bool IsCollapsibleSpace(UChar32 c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

}  // namespace

std::string EngramNormalize(std::string_view text) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* nfkc = icu::Normalizer2::getNFKCInstance(err);
  const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(err);
  CHECK(U_SUCCESS(err)) << "ICU normaliser data: " << u_errorName(err);
  icu::UnicodeString s = icu::UnicodeString::fromUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  s = nfkc->normalize(s, err);
  s = nfd->normalize(s, err);
  CHECK(U_SUCCESS(err)) << "ICU normalize: " << u_errorName(err);
  // StripAccents, Lowercase (each code point alone, like Rust's char::to_lowercase), whitespace
  // runs -> one space, in one pass over the code points.
  icu::UnicodeString out;
  bool in_space_run = false;
  for (int32_t i = 0; i < s.length();) {
    const UChar32 c = s.char32At(i);
    i += U16_LENGTH(c);
    if ((U_GET_GC_MASK(c) & U_GC_M_MASK) != 0) continue;
    if (IsCollapsibleSpace(c)) {
      if (!in_space_run) out.append(static_cast<UChar>(' '));
      in_space_run = true;
      continue;
    }
    in_space_run = false;
    UChar one[2];
    int32_t n = 0;
    U16_APPEND_UNSAFE(one, n, c);
    UChar lower[8];
    UErrorCode lerr = U_ZERO_ERROR;
    const int32_t ln = u_strToLower(lower, 8, one, n, "", &lerr);
    if (U_SUCCESS(lerr)) {
      out.append(lower, ln);
    } else {
      out.append(c);
    }
  }
  if (out.length() == 1 && out.charAt(0) == ' ') out = icu::UnicodeString(kSentinel);
  // Strip: Unicode White_Space at both ends.
  int32_t b = 0, e = out.length();
  while (b < e && u_isUWhiteSpace(out.char32At(b))) b += U16_LENGTH(out.char32At(b));
  while (e > b) {
    const int32_t prev = out.moveIndex32(e, -1);
    if (!u_isUWhiteSpace(out.char32At(prev))) break;
    e = prev;
  }
  icu::UnicodeString stripped = out.tempSubStringBetween(b, e);
  stripped.findAndReplace(icu::UnicodeString(kSentinel),
                          icu::UnicodeString(static_cast<UChar>(' ')));
  std::string utf8;
  stripped.toUTF8String(utf8);
  return utf8;
}

absl::StatusOr<CompressedTokenMap> BuildEngramTokenMap(const Tokenizer& tok) {
  UErrorCode err = U_ZERO_ERROR;
  icu::Normalizer2::getNFKCInstance(err);
  icu::Normalizer2::getNFDInstance(err);
  if (U_FAILURE(err)) {
    return absl::InternalError(absl::StrCat("ICU normaliser data unavailable: ", u_errorName(err)));
  }
  CompressedTokenMap result;
  const int32_t n = tok.vocab_size();
  result.map.resize(static_cast<size_t>(n));
  absl::flat_hash_map<std::string, int32_t> key_to_id;
  for (int32_t id = 0; id < n; ++id) {
    const int32_t ids[1] = {id};
    const std::string text = tok.Decode(ids, /*skip_special=*/false);
    std::string key;
    if (text.find(tokenizer_internal::kReplacementChar) != std::string::npos) {
      key = std::string(tok.TokenString(id));  // partial UTF-8 byte token: its raw form
    } else {
      key = EngramNormalize(text);
      if (key.empty()) key = text;
    }
    auto [it, inserted] =
        key_to_id.try_emplace(std::move(key), static_cast<int32_t>(key_to_id.size()));
    result.map[static_cast<size_t>(id)] = it->second;
  }
  result.num_keys = static_cast<int64_t>(key_to_id.size());
  return result;
}

}  // namespace deepinfer::tokenizer
