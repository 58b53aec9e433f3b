// Bridges between std::string_view and absl::string_view.
//
// Debian 12's Abseil is built with ABSL_OPTION_USE_STD_STRING_VIEW=0, so absl::string_view is a
// distinct type that does not convert from std::string_view. deepinfer's own APIs take
// std::string_view; wrap arguments with AbslView() when calling absl string functions and use
// StdView() on absl results (e.g. absl::Status::message()).
#ifndef DEEPINFER_COMMON_STRINGS_H_
#define DEEPINFER_COMMON_STRINGS_H_

#include <string_view>

#include "absl/strings/string_view.h"

namespace deepinfer {

inline absl::string_view AbslView(std::string_view s) { return absl::string_view(s.data(), s.size()); }
inline std::string_view StdView(absl::string_view s) { return std::string_view(s.data(), s.size()); }

}  // namespace deepinfer

#endif  // DEEPINFER_COMMON_STRINGS_H_
