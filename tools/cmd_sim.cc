// `deepinfer sim --config FILE [--out DIR]`: runs the discrete-event simulator (src/sim/sim.h,
// docs/simulator.md) and writes one CSV per metric plus summary.json under --out. Wall-clock
// timing goes to stderr only, so stdout and the output files are byte-identical for the same
// config and seed (cluster.md SIM-3).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "sim/exp2.h"
#include "sim/sim.h"
#include "tools/cli_flags.h"
#include "tools/commands.h"

namespace deepinfer::cli {

int RunSim(int argc, char** argv) {
  FlagSet flags("sim");
  flags.AddString("config", "", "simulation config (JSON; see docs/simulator.md)");
  flags.AddString("out", "sim-out", "output directory (CSV per metric + summary.json)");
  flags.AddBool("calibrate-p-resume", false,
                "EXP-2: bisect workload.chat.p_resume of --config (a cache-mode config) so that "
                "chat loses 0.75 points of hit rate at TTL 3 d vs 7 d; writes calibration.csv");
  flags.AddBool("exp2-checks", false,
                "EXP-2: run --config over 5 seeds and check (a)-(c) of cluster.md §6.6; writes "
                "exp2_checks.csv");
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
  const absl::Status s =
      flags.GetBool("calibrate-p-resume")
          ? sim::CalibratePResume(text.str(), flags.GetString("out"), 0.0, 0.4, 6, 0.75)
      : flags.GetBool("exp2-checks") ? sim::RunExp2Checks(text.str(), flags.GetString("out"))
                                     : sim::RunSimulation(text.str(), flags.GetString("out"));
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
