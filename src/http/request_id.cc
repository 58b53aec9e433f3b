#include "http/request_id.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "common/clock.h"

namespace deepinfer::http {

absl::StatusOr<std::string> RequestIdFor(const std::string& header_value) {
  if (header_value.empty()) return NewRequestId();
  bool visible = true;
  for (unsigned char c : header_value) visible = visible && c >= 0x21 && c <= 0x7e;
  if (!visible || header_value.size() > kMaxRequestIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("X-Request-Id must be 1 to ", kMaxRequestIdBytes,
                     " visible ASCII characters without spaces (and sent once)"));
  }
  return header_value;
}

std::string NewRequestId() {
  static constexpr char kHex[] = "0123456789abcdef";
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   static_cast<uint64_t>(MonotonicNanos()));
  std::string id(32, '0');
  uint64_t bits = 0;
  for (int i = 0; i < 32; ++i) {
    if (i % 16 == 0) bits = rng();
    id[i] = kHex[bits & 15];
    bits >>= 4;
  }
  return id;
}

}  // namespace deepinfer::http
