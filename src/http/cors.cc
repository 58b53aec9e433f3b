#include "http/cors.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace deepinfer::http {
namespace {

bool Contains(const std::vector<std::string>& list, const std::string& v) {
  return std::find(list.begin(), list.end(), v) != list.end();
}

bool AllowsAll(const std::vector<std::string>& list) { return Contains(list, "*"); }

bool ContainsIgnoreCase(const std::vector<std::string>& list, absl::string_view v) {
  return std::any_of(list.begin(), list.end(),
                     [&](const std::string& x) { return absl::EqualsIgnoreCase(x, v); });
}

bool OriginAllowed(const CorsPolicy& p, const std::string& origin) {
  return AllowsAll(p.allowed_origins) || Contains(p.allowed_origins, origin);
}

// Access-Control-Allow-Origin (+ Vary, credentials) for an allowed origin.
void AddOriginHeaders(const CorsPolicy& p, const std::string& origin,
                      std::map<std::string, std::string>* h) {
  // With credentials the Fetch standard forbids "*": echo the origin (and say the answer
  // depends on it, so caches keep one copy per origin).
  if (AllowsAll(p.allowed_origins) && !p.allow_credentials) {
    (*h)["Access-Control-Allow-Origin"] = "*";
  } else {
    (*h)["Access-Control-Allow-Origin"] = origin;
    (*h)["Vary"] = "Origin";
  }
  if (p.allow_credentials) (*h)["Access-Control-Allow-Credentials"] = "true";
}

}  // namespace

std::map<std::string, std::string> CorsResponseHeaders(const CorsPolicy& policy,
                                                       const std::string& origin) {
  std::map<std::string, std::string> h;
  if (!policy.enabled() || origin.empty() || !OriginAllowed(policy, origin)) return h;
  AddOriginHeaders(policy, origin, &h);
  h["Access-Control-Expose-Headers"] = "X-Request-Id";
  return h;
}

std::optional<CorsPreflight> CorsPreflightFor(const CorsPolicy& policy, const std::string& method,
                                              const std::string& origin,
                                              const std::string& request_method,
                                              const std::string& request_headers) {
  if (!policy.enabled() || method != "OPTIONS" || origin.empty() || request_method.empty()) {
    return std::nullopt;
  }
  CorsPreflight out;
  std::vector<std::string> refused;
  if (!OriginAllowed(policy, origin)) refused.push_back("origin");
  if (!AllowsAll(policy.allowed_methods) &&
      !ContainsIgnoreCase(policy.allowed_methods, request_method)) {
    refused.push_back("method");
  }
  std::vector<std::string> requested;
  for (absl::string_view h : absl::StrSplit(request_headers, ',')) {
    h = absl::StripAsciiWhitespace(h);
    if (!h.empty()) requested.push_back(absl::AsciiStrToLower(h));
  }
  if (!AllowsAll(policy.allowed_headers)) {
    for (const std::string& h : requested) {
      // The CORS-safelisted request headers need no permission (Fetch standard §2.2.2).
      if (h == "accept" || h == "accept-language" || h == "content-language" ||
          h == "content-type" || ContainsIgnoreCase(policy.allowed_headers, h)) {
        continue;
      }
      refused.push_back("headers");
      break;
    }
  }
  if (!refused.empty()) {
    out.status = 400;
    out.body = absl::StrCat("Disallowed CORS ", absl::StrJoin(refused, ", "), "\n");
    out.headers["Content-Type"] = "text/plain; charset=utf-8";
    return out;
  }
  AddOriginHeaders(policy, origin, &out.headers);
  out.headers["Access-Control-Allow-Methods"] =
      AllowsAll(policy.allowed_methods) ? "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT"
                                        : absl::StrJoin(policy.allowed_methods, ", ");
  if (AllowsAll(policy.allowed_headers)) {
    // "*" would not cover Authorization (Fetch standard): echo what was asked for.
    if (!requested.empty()) {
      out.headers["Access-Control-Allow-Headers"] = absl::StrJoin(requested, ", ");
    }
  } else {
    std::vector<std::string> allowed = {"Accept", "Accept-Language", "Content-Language",
                                        "Content-Type"};
    allowed.insert(allowed.end(), policy.allowed_headers.begin(), policy.allowed_headers.end());
    out.headers["Access-Control-Allow-Headers"] = absl::StrJoin(allowed, ", ");
  }
  out.headers["Access-Control-Max-Age"] = "600";
  out.headers["Content-Type"] = "text/plain; charset=utf-8";
  out.body = "OK";
  return out;
}

}  // namespace deepinfer::http
