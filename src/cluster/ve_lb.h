// Vision-encoder load balancer policy (cluster.md §3.3, VE-1..VE-2).
//
// Two levels: the PE picks a VE machine uniformly at random among healthy ones; that machine's
// agent picks the GPU with the fewest image patches in flight (ties: lowest index) [SEED].
// Pure functions; randomness is an input word. Thread-safety: values only.
#ifndef DEEPINFER_CLUSTER_VE_LB_H_
#define DEEPINFER_CLUSTER_VE_LB_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace deepinfer::cluster {

// VE-2: patches of an image already resized by the model's policy: (width/patch) x
// (height/patch). Errors: InvalidArgument if a dimension is not a positive multiple of `patch`
// or patch <= 0 (the resize policy must have made them multiples).
absl::StatusOr<int64_t> ImagePatches(int64_t width, int64_t height, int64_t patch);

// VE-1 first level: index of a machine chosen uniformly among those with healthy[i] true, using
// the uniform 64-bit word `random`. Returns -1 if none is healthy.
int PickVeMachine(const std::vector<bool>& healthy, uint64_t random);

// VE-1 second level: the device with the fewest patches in flight (ties: lowest index). Returns
// -1 for an empty list.
int PickVeDevice(const std::vector<int64_t>& patches_in_flight);

}  // namespace deepinfer::cluster

#endif  // DEEPINFER_CLUSTER_VE_LB_H_
