#include "api/stop_matcher.h"

#include <string>

#include "gtest/gtest.h"

namespace deepinfer::api {
namespace {

// Feeds `text` in pieces of `chunk` bytes; returns the emitted text.
std::string Feed(const std::vector<std::string>& stops, const std::string& text, size_t chunk,
                 bool* stopped) {
  StopMatcher m(stops);
  std::string out;
  for (size_t i = 0; i < text.size(); i += chunk) out += m.Push(text.substr(i, chunk));
  out += m.Flush();
  *stopped = m.stopped();
  return out;
}

// Expected outputs follow OpenAI's rule (text cut before the first stop string), written by hand;
// spec shared/spec/protocol.md §5 case 19.
TEST(StopMatcherTest, CutsBeforeTheStopStringForEveryChunking) {
  for (size_t chunk = 1; chunk <= 12; ++chunk) {
    bool stopped = false;
    EXPECT_EQ(Feed({"END", "\n\nUser:"}, "The END more", chunk, &stopped), "The ") << chunk;
    EXPECT_TRUE(stopped);
    EXPECT_EQ(Feed({"END"}, "The ENX more", chunk, &stopped), "The ENX more") << chunk;
    EXPECT_FALSE(stopped);
    EXPECT_EQ(Feed({"END"}, "ends with EN", chunk, &stopped), "ends with EN") << chunk;
    EXPECT_FALSE(stopped);
  }
}

TEST(StopMatcherTest, EarliestMatchWinsAndIsReported) {
  StopMatcher m({"bc", "ab"});
  EXPECT_EQ(m.Push("xabc"), "x");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "ab");
  EXPECT_EQ(m.Push("more"), "");
}

TEST(StopMatcherTest, NoStopsPassesEverythingThrough) {
  StopMatcher m({"", ""});
  EXPECT_EQ(m.Push("abc"), "abc");
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcherTest, HoldsBackOnlyLivePrefixes) {
  StopMatcher m({"你好"});
  EXPECT_EQ(m.Push("a你"), "a");
  EXPECT_EQ(m.Push("们"), "你们");
}

// Issue 22 §6: stops "a little girl" and "ttle" over stories260K-like text. Expected values by
// hand: the output ends before the earliest occurrence of any stop string.
TEST(StopMatcherTest, EarlierPartialMatchIsHeldUntilItCompletesOrDies) {
  const std::vector<std::string> stops = {"a little girl", "ttle"};
  for (size_t chunk = 1; chunk <= 16; ++chunk) {
    bool stopped = false;
    // The earlier, longer stop string completes: cut there.
    EXPECT_EQ(Feed(stops, "Once a little girl ran.", chunk, &stopped), "Once ") << chunk;
    EXPECT_TRUE(stopped);
    // It dies ("a little boy"): cut at the complete "ttle".
    EXPECT_EQ(Feed(stops, "Once a little boy ran.", chunk, &stopped), "Once a li") << chunk;
    EXPECT_TRUE(stopped);
    // The stream ends while the partial match is live: cut at the complete one.
    EXPECT_EQ(Feed(stops, "Once a little gi", chunk, &stopped), "Once a li") << chunk;
    EXPECT_TRUE(stopped);
  }
}

TEST(StopMatcherTest, HeldTextIsBoundedByTheLongestStopString) {
  StopMatcher m({"a little girl", "ttle"});
  std::string out = m.Push("Once a little");  // "ttle" complete, "a little" live since 5
  EXPECT_EQ(out, "Once ");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.Push(" b"), "a li");  // the partial died: cut at "ttle"
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "ttle");
}

TEST(StopMatcherTest, EqualPositionsShorterWinsLikeTheChatParser) {
  StopMatcher m({"abcd", "ab"});
  EXPECT_EQ(m.Push("xab"), "x");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "ab");
}

TEST(StopMatcherTest, DisarmedUntilMinTokensThenStraddlingMatchStops) {
  StopMatcher m({"END"});
  m.set_armed(false);
  EXPECT_EQ(m.Push("The END and E"), "The END and ");  // no stop before min_tokens
  EXPECT_FALSE(m.stopped());
  m.set_armed(true);
  EXPECT_EQ(m.Push("ND more"), "");
  EXPECT_TRUE(m.stopped());
}

}  // namespace
}  // namespace deepinfer::api
