#include "common/status.h"

#include "common/strings.h"

namespace deepinfer {

absl::Status Annotate(const absl::Status& status, std::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(AbslView(context), ": ", status.message()));
}

}  // namespace deepinfer
