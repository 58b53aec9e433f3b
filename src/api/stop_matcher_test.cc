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

}  // namespace
}  // namespace deepinfer::api
