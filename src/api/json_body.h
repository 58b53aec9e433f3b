// Request-body JSON parsing in time linear in the body, bounded by a deadline.
//
// nlohmann::ordered_json's own parser inserts each key with a linear scan for duplicates, so an
// object with n keys costs O(n^2) (a 13 MB body of 1,000,000 keys kept a core busy for minutes).
// This parser builds the same ordered_json through the SAX interface and finds duplicates with a
// hash index per large object, so the cost is linear; it gives up at `deadline_ns` (checked every
// few thousand tokens) so no body holds a request thread past it.
//
// Key order is kept everywhere: it matters inside tool call arguments (re-serialized
// Python-exactly into the prompt, protocol::PyJson), tool parameter schemas (rendered into the
// prompt) and response_format schemas (property order of the grammar); elsewhere it is harmless
// now that it costs nothing. Duplicate keys: the last value wins at the first key's position
// (nlohmann's behaviour).
#ifndef DEEPINFER_API_JSON_BODY_H_
#define DEEPINFER_API_JSON_BODY_H_

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace deepinfer::api {

// How long one request body may take to parse (a 32 MB body of tiny values parses in well under
// a second).
inline constexpr int64_t kJsonParseBudgetMs = 5000;

// Parses `text` as one JSON value. Errors: InvalidArgument "not valid JSON: <where>" for a syntax
// error; InvalidArgument with error code `request_too_complex` when parsing passes
// `deadline_ns` (common/clock.h MonotonicNanos; 0 = now + kJsonParseBudgetMs).
absl::StatusOr<nlohmann::ordered_json> ParseJsonLinear(std::string_view text,
                                                       int64_t deadline_ns = 0);

}  // namespace deepinfer::api

#endif  // DEEPINFER_API_JSON_BODY_H_
