// `deepinfer version`: version, CPU features, kernel ISA, threads, batch invariance.
#include <cstdio>
#include <optional>

#include "common/config.h"
#include "common/cpu_features.h"
#include "common/thread_pool.h"
#include "common/version.h"
#include "kernels/ops.h"
#include "tools/cli_flags.h"
#include "tools/commands.h"

namespace deepinfer::cli {

int RunVersion(int argc, char** argv) {
  // `deepinfer --version` passes no arguments; `deepinfer version --help` prints the usage.
  FlagSet flags("version");
  if (argc > 0) {
    if (std::optional<int> exit_code = flags.ParseCommandLine(argc, argv)) return *exit_code;
  }
  std::printf("deepinfer %s\n", kVersion);
  std::printf("cpu features: %s\n", CpuFeaturesString().c_str());
  std::printf("kernel isa:   %s\n", IsaName(kernels::KernelIsa()));
  std::printf("threads:      %d\n", ThreadPool::Default()->num_threads());
  std::printf("batch invariant: %s\n", Env().batch_invariant ? "on" : "off");
  return 0;
}

}  // namespace deepinfer::cli
