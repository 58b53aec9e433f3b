#include "cluster/ve_lb.h"

#include <gtest/gtest.h>

namespace deepinfer::cluster {
namespace {

TEST(VeLbTest, PatchCounts) {  // VE-2
  EXPECT_EQ(*ImagePatches(1344, 896, 14), 96 * 64);
  EXPECT_EQ(*ImagePatches(14, 14, 14), 1);
  EXPECT_EQ(*ImagePatches(448, 28, 14), 32 * 2);
  EXPECT_EQ(ImagePatches(1000, 896, 14).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ImagePatches(1344, 0, 14).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ImagePatches(14, 14, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(VeLbTest, MachineUniformAmongHealthy) {  // VE-1 level 1
  const std::vector<bool> h = {true, false, true, true};
  EXPECT_EQ(PickVeMachine(h, 0), 0);
  EXPECT_EQ(PickVeMachine(h, 1), 2);
  EXPECT_EQ(PickVeMachine(h, 2), 3);
  EXPECT_EQ(PickVeMachine(h, 5), 3);
  EXPECT_EQ(PickVeMachine({false, false}, 7), -1);
}

TEST(VeLbTest, DeviceWithFewestPatchesTiesLowest) {  // VE-1 level 2
  EXPECT_EQ(PickVeDevice({6144, 1024, 1024, 4096}), 1);
  EXPECT_EQ(PickVeDevice({0, 0}), 0);
  EXPECT_EQ(PickVeDevice({}), -1);
}

}  // namespace
}  // namespace deepinfer::cluster
