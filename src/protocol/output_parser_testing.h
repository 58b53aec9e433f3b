// Test-only helpers for driving protocol::OutputStateMachine with a scripted model output:
// "{think}", "{/think}", "{DSML}" and "{EOS}" in the script stand for the control token ids, all
// other text is split into code points, and a test chooses where the stream is cut into chunks.
// Shared by the parser's own tests and the API codec tests (api/scripted_output_testing.h).
#ifndef DEEPINFER_PROTOCOL_OUTPUT_PARSER_TESTING_H_
#define DEEPINFER_PROTOCOL_OUTPUT_PARSER_TESTING_H_

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "protocol/output_parser.h"

namespace deepinfer::protocol::parser_testing {

// One step of the script: a control token, or the bytes of one code point.
struct Unit {
  bool is_marker = false;
  OutputStateMachine::Marker marker = OutputStateMachine::Marker::kEos;
  std::string text;
};

inline std::vector<Unit> Units(std::string_view s) {
  using Marker = OutputStateMachine::Marker;
  static const std::pair<std::string_view, Marker> kMarkers[] = {{"{/think}", Marker::kThinkEnd},
                                                                 {"{think}", Marker::kThinkBegin},
                                                                 {"{DSML}", Marker::kDsml},
                                                                 {"{EOS}", Marker::kEos}};
  std::vector<Unit> units;
  size_t i = 0;
  while (i < s.size()) {
    bool matched = false;
    for (const auto& [spelling, m] : kMarkers) {
      if (s.substr(i, spelling.size()) == spelling) {
        units.push_back(Unit{true, m, {}});
        i += spelling.size();
        matched = true;
        break;
      }
    }
    if (matched) continue;
    const unsigned char c = s[i];
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    units.push_back(Unit{false, Marker::kEos, std::string(s.substr(i, n))});
    i += n;
  }
  return units;
}

// Feeds units [0, n) split into chunks at `cuts` (sorted unit indices); the text of adjacent
// units within a chunk goes in one FeedText call. Calls Finish(*end) when `end` is set.
inline std::vector<OutputEvent> Feed(const std::vector<Unit>& units,
                                     const std::vector<size_t>& cuts,
                                     const OutputParserOptions& opt, std::optional<StreamEnd> end) {
  OutputStateMachine m(opt);
  std::vector<OutputEvent> out;
  size_t start = 0;
  std::vector<size_t> bounds = cuts;
  bounds.push_back(units.size());
  for (size_t b : bounds) {
    std::string text;
    for (size_t i = start; i < b; ++i) {
      if (units[i].is_marker) {
        m.FeedText(text, &out);
        text.clear();
        m.FeedMarker(units[i].marker, &out);
      } else {
        text += units[i].text;
      }
    }
    m.FeedText(text, &out);
    start = b;
  }
  if (end.has_value()) m.Finish(*end, &out);
  return out;
}

}  // namespace deepinfer::protocol::parser_testing

#endif  // DEEPINFER_PROTOCOL_OUTPUT_PARSER_TESTING_H_
