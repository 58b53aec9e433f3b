// Stop strings over streamed text for the Completions API (the chat path matches stop strings in
// protocol/output_parser.h, only in answer text). Text arrives in pieces; a trailing part that
// could still become a stop string is held back, so no byte of a stop string ever reaches the
// client and the output is identical however the text is chunked (OpenAI semantics: the output
// ends just before the first occurrence of any stop string, which is not included).
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
  // End of stream: returns the held-back text (no stop string matched it).
  std::string Flush();

  bool stopped() const { return stopped_; }
  // The stop string that matched ("" if none).
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  size_t max_len_ = 0;
  std::string held_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace deepinfer::api

#endif  // DEEPINFER_API_STOP_MATCHER_H_
