#include <cstdio>

#include "common/config.h"
#include "common/cpu_features.h"
#include "common/thread_pool.h"
#include "common/version.h"
#include "kernels/ops.h"
#include "tools/commands.h"

namespace deepinfer::cli {

int RunVersion(int argc, char** argv) {
  std::printf("deepinfer %s\n", kVersion);
  std::printf("cpu features: %s\n", CpuFeaturesString().c_str());
  std::printf("kernel isa:   %s\n", IsaName(kernels::KernelIsa()));
  std::printf("threads:      %d\n", ThreadPool::Default()->num_threads());
  std::printf("batch invariant: %s\n", Env().batch_invariant ? "on" : "off");
  return 0;
}

}  // namespace deepinfer::cli
