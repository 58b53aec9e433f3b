#include "kvstore/rados_config.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/strings.h"

namespace deepinfer::kvstore {

absl::Status RadosStoreConfig::Validate() const {
  if (pool.empty()) return absl::InvalidArgumentError("rados: the pool name is empty");
  if (client_id.empty()) return absl::InvalidArgumentError("rados: id (cephx client) is empty");
  if (timeout_ms < 1000 || timeout_ms > 3600 * 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("rados: timeout_ms must be in [1000, 3600000], got ", timeout_ms));
  }
  if (!(low_watermark > 0 && low_watermark <= high_watermark && high_watermark <= 1)) {
    return absl::InvalidArgumentError("rados: watermarks must satisfy 0 < low <= high <= 1");
  }
  for (int64_t ttl : ttl_nanos) {
    if (ttl <= 0) return absl::InvalidArgumentError("rados: TTLs must be positive");
  }
  if (refresh_nanos < 0 || hit_grace_nanos < 0) {
    return absl::InvalidArgumentError("rados: refresh and hit grace must be >= 0");
  }
  if (lookup_batch < 1 || gc_batch < 1) {
    return absl::InvalidArgumentError("rados: batch sizes must be >= 1");
  }
  return absl::OkStatus();
}

absl::StatusOr<RadosStoreConfig> ParseRadosUrl(std::string_view url) {
  constexpr std::string_view kScheme = "rados://";
  if (!url.starts_with(kScheme)) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected rados://POOL?conf=PATH&id=CLIENT, got '", AbslView(url), "'"));
  }
  const absl::string_view u = AbslView(url);
  std::string_view rest = url.substr(kScheme.size());
  RadosStoreConfig c;
  const size_t q = rest.find('?');
  c.pool = std::string(rest.substr(0, q));
  if (c.pool.empty() || c.pool.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("'", u, "': missing or bad pool name"));
  }
  if (q != std::string_view::npos) {
    for (absl::string_view kv_a :
         absl::StrSplit(AbslView(rest.substr(q + 1)), '&', absl::SkipEmpty())) {
      const std::string_view kv = StdView(kv_a);
      const size_t eq = kv.find('=');
      if (eq == std::string_view::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", u, "': '", AbslView(kv), "' is not KEY=VALUE"));
      }
      const std::string_view key = kv.substr(0, eq);
      const std::string value(kv.substr(eq + 1));
      if (key == "conf") {
        c.conf_path = value;
      } else if (key == "id") {
        c.client_id = value;
      } else if (key == "keyring") {
        c.keyring = value;
      } else if (key == "ns") {
        c.name_space = value;
      } else if (key == "timeout_ms") {
        if (!absl::SimpleAtoi(value, &c.timeout_ms)) {
          return absl::InvalidArgumentError(
              absl::StrCat("'", u, "': timeout_ms '", value, "' is not an integer"));
        }
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("'", u, "': unknown parameter '", AbslView(key),
                         "' (known: conf, id, keyring, ns, timeout_ms)"));
      }
    }
  }
  if (absl::Status s = c.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("'", u, "': ", s.message()));
  }
  return c;
}

}  // namespace deepinfer::kvstore
