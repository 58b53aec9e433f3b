#include "common/file_util.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deepinfer {
namespace {

using ::deepinfer::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ReadFileToStringTest, ReadsBinaryBytesExactly) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "deepinfer_file_util_test.bin").string();
  const std::string bytes("a\0b\r\n\xff", 6);
  {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  ASSERT_OK_AND_ASSIGN(std::string got, ReadFileToString(path));
  EXPECT_EQ(got, bytes);
  std::remove(path.c_str());
}

TEST(ReadFileToStringTest, MissingFileAndDirectoryAreNotFound) {
  EXPECT_THAT(ReadFileToString("/nonexistent/deepinfer/x.json"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/deepinfer/x.json")));
  EXPECT_THAT(ReadFileToString(std::filesystem::temp_directory_path().string()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("is a directory")));
}

}  // namespace
}  // namespace deepinfer
