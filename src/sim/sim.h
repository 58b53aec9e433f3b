// `deepinfer sim`: the discrete-event cluster simulator (cluster.md §6), linking the real
// policies (src/cluster), the real block-key chain (src/kv) and a store model.
//
// Modes (config field "mode"):
//  * "cache"  SIM-5 cache-only fidelity: arrivals -> keys -> store (capacity, watermark LRU,
//             TTL per class) with several TTL variants fed the identical request stream; the
//             workload is synthetic (WL-1..WL-3) or a Mooncake trace. EXP-2.
//  * "eplb"   expert-parallel.md §4.4 moe_lb benchmark on a skewed synthetic routing trace:
//             no EPLB / EPLB with the role's r, W, M / oracle, through cluster::EplbController.
//  * "cluster" SIM-5 cluster fidelity (sim/cluster_sim.h): PE step loops pulling from the
//             prefill LB's bucket queues, CE batches chosen by the decode LB, KV transfers,
//             autoscaler and drain; EXP-1 (F per policy vs the ideal offline benchmark).
// The config format is documented in docs/simulator.md. Outputs: one CSV per metric and
// summary.json under the output directory; the same config and seed give byte-identical files
// (SIM-3); nothing time-of-day or wall-clock is written.
//
// Errors: InvalidArgument naming the config field; NotFound for a missing trace; Internal when
// an invariant (§6.5) fails (the outputs are still written, with the failure in summary.json).
#ifndef DEEPINFER_SIM_SIM_H_
#define DEEPINFER_SIM_SIM_H_

#include <string>

#include "absl/status/status.h"
#include "sim/sim_io.h"

namespace deepinfer::sim {

// Runs the simulation described by `config_json` and writes its results under `out_dir`.
absl::Status RunSimulation(const std::string& config_json, const std::string& out_dir);

// The modes, filling `results` (called by RunSimulation; exposed for tests).
absl::Status RunCacheSim(const ConfigReader& root, Results& results);
absl::Status RunEplbSim(const ConfigReader& root, Results& results);
absl::Status RunClusterSim(const ConfigReader& root, Results& results);

}  // namespace deepinfer::sim

#endif  // DEEPINFER_SIM_SIM_H_
