#include "tokenizer/utf8.h"

#include "common/utf8.h"

namespace deepinfer::tokenizer_internal {

namespace {

// Valid range of the second byte given the lead byte (Unicode Table 3-7); later continuation
// bytes are always 80..BF.
inline bool SecondByteOk(uint8_t lead, uint8_t b) {
  switch (lead) {
    case 0xE0:
      return b >= 0xA0 && b <= 0xBF;
    case 0xED:
      return b >= 0x80 && b <= 0x9F;
    case 0xF0:
      return b >= 0x90 && b <= 0xBF;
    case 0xF4:
      return b >= 0x80 && b <= 0x8F;
    default:
      return b >= 0x80 && b <= 0xBF;
  }
}

}  // namespace

size_t AppendUtf8Lossy(std::string_view in, bool final, std::string* out) {
  const auto* p = reinterpret_cast<const uint8_t*>(in.data());
  const size_t n = in.size();
  size_t i = 0;
  size_t run_start = 0;  // start of the pending run of valid bytes not yet appended
  while (i < n) {
    const uint8_t lead = p[i];
    if (lead < 0x80) {
      ++i;
      continue;
    }
    const int len = Utf8SeqLen(lead);
    if (len == 1) {  // invalid lead byte (80..C1, F5..FF): one replacement
      out->append(in.data() + run_start, i - run_start);
      out->append(kReplacementChar);
      ++i;
      run_start = i;
      continue;
    }
    // Count how many bytes of the sequence are valid.
    int valid = 1;
    while (valid < len && i + valid < n) {
      const uint8_t b = p[i + valid];
      const bool ok = valid == 1 ? SecondByteOk(lead, b) : (b >= 0x80 && b <= 0xBF);
      if (!ok) break;
      ++valid;
    }
    if (valid == len) {
      i += len;
      continue;
    }
    if (i + valid == n && !final) {
      // Incomplete but still completable: stop here, keep the tail for later.
      out->append(in.data() + run_start, i - run_start);
      return i;
    }
    // Maximal ill-formed subpart: lead plus the valid continuation bytes.
    out->append(in.data() + run_start, i - run_start);
    out->append(kReplacementChar);
    i += valid;
    run_start = i;
  }
  out->append(in.data() + run_start, n - run_start);
  return n;
}

void AppendCodePoint(uint32_t cp, std::string* out) {
  AppendUtf8CodePoint(cp, out);
}

}  // namespace deepinfer::tokenizer_internal
