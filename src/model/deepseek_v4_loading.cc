#include "model/deepseek_v4_loading.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace deepinfer::model::dsv4 {

absl::StatusOr<std::string> ReadConfigJson(const std::string& dir) {
  std::ifstream in(dir + "/config.json", std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("no config.json in ", dir));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace deepinfer::model::dsv4
