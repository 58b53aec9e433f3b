#include "sim/sim.h"

#include "common/status.h"

namespace deepinfer::sim {

absl::Status RunSimulation(const std::string& config_json, const std::string& out_dir) {
  ASSIGN_OR_RETURN(nlohmann::json j, ConfigReader::Parse(config_json));
  ConfigReader root(&j, "");
  ASSIGN_OR_RETURN(std::string mode, root.String("mode", ""));
  Results results;
  absl::Status run;
  if (mode == "cache") {
    run = RunCacheSim(root, results);
  } else if (mode == "eplb") {
    run = RunEplbSim(root, results);
  } else if (mode == "cluster") {
    run = RunClusterSim(root, results);
  } else {
    return absl::InvalidArgumentError("mode: expected \"cache\", \"eplb\" or \"cluster\"");
  }
  if (!run.ok() && run.code() != absl::StatusCode::kInternal) return run;
  RETURN_IF_ERROR(results.Write(out_dir));
  return run;
}

}  // namespace deepinfer::sim
