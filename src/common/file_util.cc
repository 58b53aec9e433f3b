#include "common/file_util.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace deepinfer {

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::error_code ec;
  // An ifstream opens a directory successfully on Linux and then fails to read: say what it is.
  if (std::filesystem::is_directory(path, ec)) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": is a directory"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading ", path));
  return ss.str();
}

}  // namespace deepinfer
