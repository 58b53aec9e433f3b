// Conversation model helpers and typed errors.
#include "protocol/conversation.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deepinfer::protocol {
namespace {

using ::deepinfer::testing::StatusIs;

TEST(ConversationTest, RolesRoundTrip) {
  for (Role r : {Role::kSystem, Role::kDeveloper, Role::kUser, Role::kAssistant, Role::kTool,
                 Role::kLatestReminder}) {
    absl::StatusOr<Role> back = ParseRole(RoleName(r));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, r);
  }
  absl::Status st = ParseRole("function").status();
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("function")));
  ASSERT_TRUE(GetProtocolError(st).has_value());
  EXPECT_EQ(GetProtocolError(st)->kind, ProtocolError::kInvalidRole);
}

TEST(ConversationTest, ErrorTagsSurviveCopies) {
  absl::Status st = MakeProtocolError(ProtocolError::kMissingReasoningContent,
                                      "messages[1].reasoning_content",
                                      kMsgMissingReasoningContent);
  absl::Status copy = st;
  ASSERT_TRUE(GetProtocolError(copy).has_value());
  EXPECT_EQ(GetProtocolError(copy)->kind, ProtocolError::kMissingReasoningContent);
  EXPECT_EQ(GetProtocolError(copy)->param, "messages[1].reasoning_content");
  EXPECT_EQ(std::string(copy.message()), kMsgMissingReasoningContent);
  EXPECT_FALSE(GetProtocolError(absl::InvalidArgumentError("x")).has_value());
}

TEST(ConversationTest, JoinedTextSkipsNonText) {
  Message m = Message::User("a");
  m.content.push_back(ContentPart::Image("http://x/y.png"));
  m.content.push_back(ContentPart::Text("b"));
  EXPECT_EQ(m.JoinedText(), "a\n\nb");
}

}  // namespace
}  // namespace deepinfer::protocol
