#include "kvstore/config.h"

#include <cctype>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/strings.h"

namespace deepinfer::kvstore {
namespace {

// Splits "123xy" into 123 and "xy"; false when there are no leading digits or it overflows.
bool SplitNumber(std::string_view text, uint64_t* number, std::string_view* suffix) {
  size_t i = 0;
  uint64_t v = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    const uint64_t d = static_cast<uint64_t>(text[i] - '0');
    if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) return false;
    v = v * 10 + d;
    ++i;
  }
  if (i == 0) return false;
  *number = v;
  *suffix = text.substr(i);
  return true;
}

}  // namespace

absl::Status KvStoreConfig::Validate() const {
  if (dir.empty()) return absl::InvalidArgumentError("kvstore: --dir is required");
  if (capacity_bytes == 0) return absl::InvalidArgumentError("kvstore: --capacity must be > 0");
  if (!(high_watermark > 0 && high_watermark <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("kvstore: --high-watermark ", high_watermark, " must be in (0, 1]"));
  }
  if (!(low_watermark > 0 && low_watermark <= high_watermark)) {
    return absl::InvalidArgumentError(absl::StrCat("kvstore: --low-watermark ", low_watermark,
                                                   " must be in (0, high watermark]"));
  }
  for (int c = 0; c < kv::kNumTrafficClasses; ++c) {
    if (ttl_nanos[c] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("kvstore: --ttl-", kv::TrafficClassName(static_cast<kv::TrafficClass>(c)),
                       " must be positive"));
    }
  }
  if (gc_interval_nanos <= 0) return absl::InvalidArgumentError("kvstore: gc interval must be > 0");
  if (temp_grace_nanos <= 0) return absl::InvalidArgumentError("kvstore: --temp-grace must be > 0");
  if (hit_grace_nanos < 4) return absl::InvalidArgumentError("kvstore: --hit-grace must be > 0");
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ParseDuration(std::string_view text) {
  uint64_t n = 0;
  std::string_view suffix;
  if (!SplitNumber(text, &n, &suffix)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad duration '", AbslView(text), "' (expected e.g. 3d, 12h, 30m, 45s)"));
  }
  int64_t unit;
  if (suffix.empty() || suffix == "s") {
    unit = kNanosPerSecond;
  } else if (suffix == "ms") {
    unit = 1000000;
  } else if (suffix == "m") {
    unit = 60 * kNanosPerSecond;
  } else if (suffix == "h") {
    unit = 3600 * kNanosPerSecond;
  } else if (suffix == "d") {
    unit = kNanosPerDay;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("bad duration '", AbslView(text),
                                                   "': unknown unit '", AbslView(suffix),
                                                   "' (use ms, s, m, h or d)"));
  }
  if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max() / unit)) {
    return absl::InvalidArgumentError(absl::StrCat("duration '", AbslView(text), "' is too large"));
  }
  return static_cast<int64_t>(n) * unit;
}

absl::StatusOr<uint64_t> ParseByteSize(std::string_view text) {
  uint64_t n = 0;
  std::string_view suffix;
  if (!SplitNumber(text, &n, &suffix)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad size '", AbslView(text), "' (expected e.g. 10G, 512M, 1073741824)"));
  }
  std::string s(suffix);
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (s.size() >= 2 && s.substr(s.size() - 2) == "IB")
    s.resize(s.size() - 2);
  else if (!s.empty() && s.back() == 'B')
    s.pop_back();
  int shift;
  if (s.empty())
    shift = 0;
  else if (s == "K")
    shift = 10;
  else if (s == "M")
    shift = 20;
  else if (s == "G")
    shift = 30;
  else if (s == "T")
    shift = 40;
  else {
    return absl::InvalidArgumentError(absl::StrCat("bad size '", AbslView(text),
                                                   "': unknown unit '", AbslView(suffix),
                                                   "' (use K, M, G or T)"));
  }
  if (shift > 0 && n > (std::numeric_limits<uint64_t>::max() >> shift)) {
    return absl::InvalidArgumentError(absl::StrCat("size '", AbslView(text), "' is too large"));
  }
  return n << shift;
}

}  // namespace deepinfer::kvstore
