#include "structured/text_util.h"

#include "absl/strings/str_cat.h"
#include "common/utf8.h"

namespace deepinfer::structured {

void AppendUtf8(uint32_t cp, std::string* out) { AppendUtf8CodePoint(cp, out); }

absl::StatusOr<uint32_t> DecodeUtf8(std::string_view s, size_t* len) {
  if (s.empty()) return absl::InvalidArgumentError("unexpected end of text");
  const auto b0 = static_cast<uint8_t>(s[0]);
  int n;
  uint32_t cp;
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  } else if ((b0 & 0xE0) == 0xC0) {
    n = 2;
    cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3;
    cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4;
    cp = b0 & 0x07;
  } else {
    return absl::InvalidArgumentError("invalid UTF-8");
  }
  if (s.size() < static_cast<size_t>(n)) return absl::InvalidArgumentError("truncated UTF-8");
  for (int i = 1; i < n; ++i) {
    const auto b = static_cast<uint8_t>(s[i]);
    if ((b & 0xC0) != 0x80) return absl::InvalidArgumentError("invalid UTF-8");
    cp = (cp << 6) | (b & 0x3F);
  }
  *len = n;
  return cp;
}

namespace {
int HexVal(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

absl::StatusOr<uint32_t> ParseHex(std::string_view s, size_t digits, size_t* used) {
  if (s.size() < digits) return absl::InvalidArgumentError("truncated hex escape");
  uint32_t v = 0;
  for (size_t i = 0; i < digits; ++i) {
    int h = HexVal(s[i]);
    if (h < 0) return absl::InvalidArgumentError("bad hex digit in escape");
    v = v * 16 + h;
  }
  *used = digits;
  return v;
}
}  // namespace

absl::StatusOr<uint32_t> DecodeEscapedChar(std::string_view s, size_t* len) {
  if (s.empty()) return absl::InvalidArgumentError("unexpected end of text");
  if (s[0] != '\\') return DecodeUtf8(s, len);
  if (s.size() < 2) return absl::InvalidArgumentError("dangling backslash");
  char e = s[1];
  size_t used = 0;
  uint32_t cp;
  switch (e) {
    case 'n':
      *len = 2;
      return '\n';
    case 'r':
      *len = 2;
      return '\r';
    case 't':
      *len = 2;
      return '\t';
    case 'f':
      *len = 2;
      return '\f';
    case 'v':
      *len = 2;
      return '\v';
    case '0':
      *len = 2;
      return 0;
    case 'x': {
      auto v = ParseHex(s.substr(2), 2, &used);
      if (!v.ok()) return v.status();
      *len = 2 + used;
      return *v;
    }
    case 'u':
    case 'U': {
      if (s.size() > 2 && s[2] == '{') {
        size_t close = s.find('}', 3);
        if (close == std::string_view::npos || close == 3 || close > 9) {
          return absl::InvalidArgumentError("bad \\u{...} escape");
        }
        auto v = ParseHex(s.substr(3, close - 3), close - 3, &used);
        if (!v.ok()) return v.status();
        cp = *v;
        *len = close + 1;
      } else {
        auto v = ParseHex(s.substr(2), e == 'u' ? 4 : 8, &used);
        if (!v.ok()) return v.status();
        cp = *v;
        *len = 2 + used;
      }
      if (cp > 0x10FFFF) return absl::InvalidArgumentError("code point above U+10FFFF");
      return cp;
    }
    default: {
      // Any other escaped character stands for itself (\\ \" \' \/ \- \] \[ \^ \. ...).
      auto v = DecodeUtf8(s.substr(1), &used);
      if (!v.ok()) return v.status();
      *len = 1 + used;
      return *v;
    }
  }
}

}  // namespace deepinfer::structured
