// Long stress runs (ctest label "soak"): 10,000 requests per mode and seed with random lengths,
// max_tokens and aborts, async and sync; the pools are checked empty at the end.
#include "engine/testing/engine_test_util.h"
#include "gtest/gtest.h"

namespace deepinfer::engine {
namespace {

using ::deepinfer::engine::testing::RunStress;

TEST(EngineSoakTest, Stress10000Requests) {
  for (uint32_t seed : {11u, 12u, 13u}) {
    RunStress(true, 10000, seed);
    RunStress(false, 10000, seed + 100);
  }
}

}  // namespace
}  // namespace deepinfer::engine
