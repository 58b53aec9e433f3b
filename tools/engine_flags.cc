#include "tools/engine_flags.h"

#include <cctype>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace deepinfer::cli {

absl::StatusOr<int64_t> ParseByteSize(const std::string& flag, const std::string& text,
                                      bool allow_zero) {
  std::string num = text;
  double scale = 1;
  while (!num.empty() && std::isalpha(static_cast<unsigned char>(num.back()))) num.pop_back();
  std::string suffix = text.substr(num.size());
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (suffix == "" || suffix == "B") {
    scale = 1;
  } else if (suffix == "K" || suffix == "KB" || suffix == "KIB") {
    scale = 1024.0;
  } else if (suffix == "M" || suffix == "MB" || suffix == "MIB") {
    scale = 1024.0 * 1024;
  } else if (suffix == "G" || suffix == "GB" || suffix == "GIB") {
    scale = 1024.0 * 1024 * 1024;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": '", text, "' is not a size (e.g. 512M, 2G)"));
  }
  double v = 0;
  const bool parsed = absl::SimpleAtod(num, &v) && std::isfinite(v);
  if (!parsed || !(v > 0 || (allow_zero && v == 0)) || v * scale >= 9.2e18) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": '", text, "' is not a ", allow_zero ? "size" : "positive size",
                     " (e.g. 512M, 2G", allow_zero ? ", 0" : "", ")"));
  }
  return static_cast<int64_t>(v * scale);
}

void AddPrefixCacheFlags(FlagSet& flags) {
  flags.AddBool("prefix-caching", true,
                "reuse the KV of earlier requests' shared prompt prefixes (--no-prefix-caching: "
                "recompute every prompt)");
  flags.AddString("prefix-cache-mode", "replay",
                  "replay: hit up to the last cached block, rebuilding the window state by a "
                  "bounded replay when no snapshot exists; exact: reuse only exact blocks and end "
                  "the hit at a snapshot (outputs equal an uncached run)");
  flags.AddString("snapshot-memory", "1G",
                  "host memory for sliding-window state snapshots (e.g. 512M; 0 = none)");
}

absl::Status ApplyPrefixCacheFlags(const FlagSet& flags, engine::EngineConfig* config) {
  const std::string mode = flags.GetString("prefix-cache-mode");
  if (mode == "replay") {
    config->prefix_cache_mode = engine::EngineConfig::PrefixCacheMode::kReplay;
  } else if (mode == "exact") {
    config->prefix_cache_mode = engine::EngineConfig::PrefixCacheMode::kExact;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--prefix-cache-mode: '", mode, "' is not one of replay, exact"));
  }
  absl::StatusOr<int64_t> snapshot =
      ParseByteSize("snapshot-memory", flags.GetString("snapshot-memory"), /*allow_zero=*/true);
  if (!snapshot.ok()) return snapshot.status();
  config->snapshot_memory_bytes = *snapshot;
  config->enable_prefix_caching = flags.GetBool("prefix-caching");
  return absl::OkStatus();
}

}  // namespace deepinfer::cli
