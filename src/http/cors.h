// Cross-origin resource sharing (the Fetch standard's CORS protocol) for browser clients, with
// the semantics of vLLM's --allowed-origins / --allowed-methods / --allowed-headers /
// --allow-credentials (Starlette's CORSMiddleware):
//   * a request without an `Origin` header, or with CORS off (no allowed origins), gets no CORS
//     headers;
//   * an actual request from an allowed origin gets Access-Control-Allow-Origin ("*" when every
//     origin is allowed and credentials are off, else the origin itself plus `Vary: Origin`),
//     Access-Control-Allow-Credentials when enabled, and Access-Control-Expose-Headers naming
//     X-Request-Id (so browser code can read the id the server logged);
//   * a preflight (OPTIONS with Origin and Access-Control-Request-Method) is answered by the
//     transport for every path, before authentication (browsers never send credentials on a
//     preflight): 200 with the allowed origin, methods, headers and Access-Control-Max-Age: 600
//     when origin, method and every requested header are allowed, else 400 naming what was
//     refused (the browser then blocks the actual request).
// Origins are compared exactly (scheme://host[:port], as browsers send them); methods and
// header names case-insensitively. "*" in a list allows everything.
//
// Difference from vLLM: vLLM allows every origin by default; here CORS is off until origins are
// configured, so a web page cannot drive a local server unless the operator opts in.
#ifndef DEEPINFER_HTTP_CORS_H_
#define DEEPINFER_HTTP_CORS_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace deepinfer::http {

struct CorsPolicy {
  std::vector<std::string> allowed_origins;  // empty = CORS off
  std::vector<std::string> allowed_methods = {"*"};
  std::vector<std::string> allowed_headers = {"*"};
  bool allow_credentials = false;

  bool enabled() const { return !allowed_origins.empty(); }
};

// The answer to a preflight request.
struct CorsPreflight {
  int status = 200;  // 200 allowed, 400 refused
  std::map<std::string, std::string> headers;
  std::string body;  // "OK" or the refusal, plain text
};

// Headers to add to an actual (non-preflight) response for a request whose Origin header is
// `origin` ("" = none): empty unless the policy is on and the origin is allowed.
std::map<std::string, std::string> CorsResponseHeaders(const CorsPolicy& policy,
                                                       const std::string& origin);

// The preflight answer when the request is a CORS preflight under an enabled policy (OPTIONS with
// a non-empty `origin` and `request_method`), nullopt otherwise (the request goes to the
// handler). `request_headers` is the Access-Control-Request-Headers value ("" = none).
std::optional<CorsPreflight> CorsPreflightFor(const CorsPolicy& policy, const std::string& method,
                                              const std::string& origin,
                                              const std::string& request_method,
                                              const std::string& request_headers);

}  // namespace deepinfer::http

#endif  // DEEPINFER_HTTP_CORS_H_
