// ScriptDrafter (the testing drafter behind --speculative-method scripted): parsing, matching
// the committed tokens against a line, corrupted positions, the draft cap, errors.
#include "engine/speculative/script_drafter.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deepinfer::engine {
namespace {

using ::deepinfer::testing::StatusIs;
using ::testing::HasSubstr;

std::vector<int32_t> ProposeAfter(ScriptDrafter& d, std::vector<int32_t> committed, int k) {
  DraftContext ctx;
  ctx.tokens = committed;
  return d.Propose(ctx, k);
}

TEST(ScriptDrafterTest, ProposesTheContinuationOfTheFirstMatchingLine) {
  ASSERT_OK_AND_ASSIGN(
      std::vector<ScriptDrafter::Line> lines,
      ScriptDrafter::Parse("# comment\n\n  1 2 3 4 5 6 \n1 7 8\n9 10/11 12\n", "test"));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[2].match, (std::vector<int32_t>{9, 10, 12}));
  EXPECT_EQ(lines[2].draft, (std::vector<int32_t>{9, 11, 12}));
  ScriptDrafter d(lines);
  EXPECT_EQ(ProposeAfter(d, {1, 2}, 3), (std::vector<int32_t>{3, 4, 5}));
  EXPECT_EQ(ProposeAfter(d, {1, 2}, 10), (std::vector<int32_t>{3, 4, 5, 6}));
  EXPECT_EQ(ProposeAfter(d, {1, 7}, 5), (std::vector<int32_t>{8}));
  EXPECT_EQ(ProposeAfter(d, {1}, 2), (std::vector<int32_t>{2, 3}));    // first line wins
  EXPECT_EQ(ProposeAfter(d, {9}, 2), (std::vector<int32_t>{11, 12}));  // corrupted position
  EXPECT_EQ(ProposeAfter(d, {9, 10}, 2), (std::vector<int32_t>{12}));
  EXPECT_TRUE(ProposeAfter(d, {9, 11}, 2).empty());             // diverged from every line
  EXPECT_TRUE(ProposeAfter(d, {1, 2, 3, 4, 5, 6}, 2).empty());  // the line is used up
  EXPECT_TRUE(ProposeAfter(d, {5}, 2).empty());
}

TEST(ScriptDrafterTest, BadTokensAndMissingFilesAreErrors) {
  EXPECT_THAT(ScriptDrafter::Parse("1 2\n3 x\n", "f.txt").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("f.txt:2: 'x'")));
  EXPECT_THAT(ScriptDrafter::Parse("1 -2\n", "f").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ScriptDrafter::Parse("1/2/3\n", "f").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ScriptDrafter::Parse("1/\n", "f").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ScriptDrafter::Load("/nonexistent/script.txt").status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/script.txt")));
}

}  // namespace
}  // namespace deepinfer::engine
