#include "cluster/ve_lb.h"

#include "absl/strings/str_cat.h"

namespace deepinfer::cluster {

absl::StatusOr<int64_t> ImagePatches(int64_t width, int64_t height, int64_t patch) {
  if (patch <= 0) return absl::InvalidArgumentError(absl::StrCat("patch size ", patch, " <= 0"));
  if (width <= 0 || width % patch != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("image width ", width, " is not a positive multiple of patch ", patch));
  }
  if (height <= 0 || height % patch != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("image height ", height, " is not a positive multiple of patch ", patch));
  }
  return (width / patch) * (height / patch);
}

int PickVeMachine(const std::vector<bool>& healthy, uint64_t random) {
  std::vector<int> idx;
  for (int i = 0; i < static_cast<int>(healthy.size()); ++i) {
    if (healthy[i]) idx.push_back(i);
  }
  if (idx.empty()) return -1;
  return idx[random % idx.size()];
}

int PickVeDevice(const std::vector<int64_t>& patches_in_flight) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(patches_in_flight.size()); ++i) {
    if (best < 0 || patches_in_flight[i] < patches_in_flight[best]) best = i;
  }
  return best;
}

}  // namespace deepinfer::cluster
