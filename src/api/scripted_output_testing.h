// Test-only helpers: a scripted model output (reasoning, text, two parallel DSML tool calls) fed
// through protocol::OutputStateMachine at a given chunk split, so codec tests see exactly the
// event fragmentation a real stream of that split would produce.
#ifndef DEEPINFER_API_SCRIPTED_OUTPUT_TESTING_H_
#define DEEPINFER_API_SCRIPTED_OUTPUT_TESTING_H_

#include <string>
#include <string_view>
#include <vector>

#include "protocol/output_parser.h"
#include "protocol/output_parser_testing.h"

namespace deepinfer::api::scripted {

// The model's raw output after `<think>`: "{/think}", "{DSML}", "{EOS}" stand for the control
// token ids. Expected (spec §2.2): reasoning "Let me think.", content "Hi there.", calls
// get_weather {"city": "Paris"} and get_time {"tz": "CET", "h24": true}, finish tool_calls.
inline constexpr std::string_view kScriptedOutput =
    "Let me think.{/think}Hi there.\n\n<{DSML}tool_calls>\n<{DSML}invoke name=\"get_weather\">\n"
    "<{DSML}parameter name=\"city\" string=\"true\">Paris</{DSML}parameter>\n</{DSML}invoke>\n"
    "<{DSML}invoke name=\"get_time\">\n<{DSML}parameter name=\"tz\" string=\"true\">CET</{DSML}"
    "parameter>\n<{DSML}parameter name=\"h24\" string=\"false\">true</{DSML}parameter>\n</{DSML}"
    "invoke>\n</{DSML}tool_calls>{EOS}";

using ScriptUnit = protocol::parser_testing::Unit;

inline std::vector<ScriptUnit> ScriptUnits(std::string_view s) {
  return protocol::parser_testing::Units(s);
}

// Feeds the units with chunk boundaries at `cuts` (sorted unit indices); text of one chunk goes
// in one FeedText call. Ends with Finish(kEndOfSequence) (a no-op after {EOS}).
inline std::vector<protocol::OutputEvent> FeedScript(const std::vector<ScriptUnit>& units,
                                                     const std::vector<size_t>& cuts) {
  protocol::OutputParserOptions opt;
  opt.start = protocol::ParserStart::kReasoning;
  opt.make_tool_call_id = [](int i) { return "call_" + std::to_string(i); };
  return protocol::parser_testing::Feed(units, cuts, opt, protocol::StreamEnd::kEndOfSequence);
}

// All the splits a test runs: the whole output as one chunk, every two-way split, and one unit
// per chunk.
inline std::vector<std::vector<size_t>> AllSplits(size_t n_units) {
  std::vector<std::vector<size_t>> splits;
  splits.push_back({});
  for (size_t k = 1; k < n_units; ++k) splits.push_back({k});
  std::vector<size_t> every;
  for (size_t k = 1; k < n_units; ++k) every.push_back(k);
  splits.push_back(every);
  return splits;
}

}  // namespace deepinfer::api::scripted

#endif  // DEEPINFER_API_SCRIPTED_OUTPUT_TESTING_H_
