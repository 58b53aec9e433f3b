// Stop strings over streamed text for the Completions API (the chat path matches stop strings in
// protocol/output_parser.h, only in answer text, by the same rule). Text arrives in pieces; a
// trailing part that could still become a stop string is held back, so no byte of a stop string
// ever reaches the client and the output is identical however the text is chunked (OpenAI
// semantics: the output ends just before the earliest occurrence of any stop string, which is not
// included).
//
// Overlapping stop strings: when one stop string is complete but a partial match of another
// starts earlier (stops "a little girl" and "ttle" over "a little"), the text from the partial
// match on is held and generation continues (at most the longest stop string's length): if the
// partial match completes the output is cut there; if it dies, or the stream ends first (EOS,
// max_tokens: Flush()), it is cut at the complete one. At equal positions the shorter stop string
// wins (it completes first).
//
// min_tokens (vLLM's semantics): while disarmed (set_armed(false)) no stop string ends the
// stream; text that could still become one stays held so a stop string that straddles the
// min_tokens boundary still matches.
// Thread-safety: one matcher per output stream, used from one thread.
#ifndef DEEPINFER_API_STOP_MATCHER_H_
#define DEEPINFER_API_STOP_MATCHER_H_

#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::api {

class StopMatcher {
 public:
  // Empty strings in `stops` are ignored.
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends `text`; returns the text that is now safe to emit. After a match, returns the text
  // before the match and stopped() becomes true; later calls return "".
  std::string Push(std::string_view text);
  // End of stream: returns the held-back text up to a complete match that was waiting on an
  // earlier partial one (then stopped() becomes true), or all of it.
  std::string Flush();
  // Whether stop strings may end the stream (false until min_tokens are generated).
  void set_armed(bool armed) { armed_ = armed; }

  bool stopped() const { return stopped_; }
  // The stop string that matched ("" if none).
  const std::string& matched() const { return matched_; }

 private:
  std::string Resolve(std::string_view text, bool final);

  std::vector<std::string> stops_;
  bool armed_ = true;
  size_t max_len_ = 0;
  std::string held_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace deepinfer::api

#endif  // DEEPINFER_API_STOP_MATCHER_H_
