// UTF-8 helpers shared by the grammar front ends.
#ifndef DEEPINFER_STRUCTURED_TEXT_UTIL_H_
#define DEEPINFER_STRUCTURED_TEXT_UTIL_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace deepinfer::structured {

// Appends the UTF-8 encoding of code point `cp` (<= 0x10FFFF).
void AppendUtf8(uint32_t cp, std::string* out);

// Decodes one UTF-8 code point at the start of `s`; sets *len. InvalidArgument on bad UTF-8.
absl::StatusOr<uint32_t> DecodeUtf8(std::string_view s, size_t* len);

// Decodes one possibly escaped character at the start of `s` (a raw UTF-8 code point, or an
// escape \n \r \t \f \v \0 \\ \" \' \/ \- \] \[ \^ \xHH \uHHHH \u{H..} \U{H..}); sets *len.
absl::StatusOr<uint32_t> DecodeEscapedChar(std::string_view s, size_t* len);

}  // namespace deepinfer::structured

#endif  // DEEPINFER_STRUCTURED_TEXT_UTIL_H_
