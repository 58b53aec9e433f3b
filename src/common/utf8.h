// UTF-8 encoding shared by the tokenizer, protocol and structured-output layers (RFC 3629).
#ifndef DEEPINFER_COMMON_UTF8_H_
#define DEEPINFER_COMMON_UTF8_H_

#include <cstdint>
#include <string>

namespace deepinfer {

// Appends the UTF-8 encoding (1-4 bytes) of code point `cp` (<= 0x10FFFF) to `out`. Surrogates
// are encoded as-is (callers that must reject them check first).
inline void AppendUtf8CodePoint(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace deepinfer

#endif  // DEEPINFER_COMMON_UTF8_H_
