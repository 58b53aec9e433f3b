// `deepinfer sim --config FILE [--out DIR]`: runs the discrete-event simulator (src/sim/sim.h,
// docs/simulator.md) and writes one CSV per metric plus summary.json under --out. Wall-clock
// timing goes to stderr only, so stdout and the output files are byte-identical for the same
// config and seed (cluster.md SIM-3).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "sim/sim.h"
#include "tools/cli_flags.h"
#include "tools/commands.h"

namespace deepinfer::cli {

int RunSim(int argc, char** argv) {
  FlagSet flags("sim");
  flags.AddString("config", "", "simulation config (JSON; see docs/simulator.md)");
  flags.AddString("out", "sim-out", "output directory (CSV per metric + summary.json)");
  if (auto rc = flags.ParseCommandLine(argc, argv)) return *rc;
  const std::string path = flags.GetString("config");
  if (path.empty()) {
    std::fprintf(stderr, "deepinfer sim: --config is required\n%s", flags.Usage().c_str());
    return 2;
  }
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "deepinfer sim: cannot read --config %s\n", path.c_str());
    return 2;
  }
  std::stringstream text;
  text << in.rdbuf();
  const auto t0 = std::chrono::steady_clock::now();
  const absl::Status s = sim::RunSimulation(text.str(), flags.GetString("out"));
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "deepinfer sim: %s in %.1f s wall\n", s.ok() ? "done" : "failed", wall);
  if (!s.ok()) {
    std::fprintf(stderr, "deepinfer sim: %s: %s\n", path.c_str(), std::string(s.message()).c_str());
    return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::printf("%s/summary.json\n", flags.GetString("out").c_str());
  return 0;
}

}  // namespace deepinfer::cli
