// `deepinfer plan`: the KV store capacity arithmetic of cluster.md §6.6 EXP-3 with the
// fault-domain, write-budget and retention checks (src/sim/capacity_plan.h). Defaults are the
// seed's deployment (128 GPUs x 14.4 TB, 10+2 EC, 20 x 30.73 TB per server, 5 GB/s writes).
// Exit code 0 when every check passes, 1 when one fails (the report says which), 2 on bad flags.
#include <cstdio>
#include <string>

#include "sim/capacity_plan.h"
#include "tools/cli_flags.h"
#include "tools/commands.h"

namespace deepinfer::cli {

int RunPlan(int argc, char** argv) {
  FlagSet flags("plan");
  flags.AddString("gpus", "128", "GPUs whose KV the store holds");
  flags.AddString("tb-per-gpu", "14.4", "KV per GPU, decimal TB");
  flags.AddString("ec-data", "10", "erasure code data chunks k");
  flags.AddString("ec-parity", "2", "erasure code parity chunks m");
  flags.AddString("drives-per-server", "20", "drives per storage server");
  flags.AddString("drive-tb", "30.73", "drive size, decimal TB");
  flags.AddString("write-gb-per-s", "5", "write bandwidth per server, GB/s");
  flags.AddString("snapshots", "1000000", "SWA snapshots to size host memory for");
  flags.AddString("unique-tokens-per-day", "0", "uncached tokens stored per day (0: skip (c))");
  flags.AddString("bytes-per-token", "890", "stored KV bytes per token");
  flags.AddString("ttl-days", "7", "longest TTL, days");
  flags.AddString("watermark", "0.9", "usable fraction of capacity (GC low watermark)");
  if (auto rc = flags.ParseCommandLine(argc, argv)) return *rc;
  sim::CapacityInputs in;
  auto num = [&](const char* name, double& out) -> bool {
    auto v = flags.GetDouble(name);
    if (!v.ok()) {
      std::fprintf(stderr, "deepinfer plan: %s\n", std::string(v.status().message()).c_str());
      return false;
    }
    out = *v;
    return true;
  };
  double gpus, k, m, drives;
  if (!num("gpus", gpus) || !num("tb-per-gpu", in.tb_per_gpu) || !num("ec-data", k) ||
      !num("ec-parity", m) || !num("drives-per-server", drives) ||
      !num("drive-tb", in.drive_tb) || !num("write-gb-per-s", in.write_gb_per_s) ||
      !num("snapshots", in.snapshots) ||
      !num("unique-tokens-per-day", in.unique_tokens_per_day) ||
      !num("bytes-per-token", in.bytes_per_token) || !num("ttl-days", in.ttl_days) ||
      !num("watermark", in.watermark)) {
    return 2;
  }
  in.gpus = static_cast<int>(gpus);
  in.ec_data = static_cast<int>(k);
  in.ec_parity = static_cast<int>(m);
  in.drives_per_server = static_cast<int>(drives);
  auto plan = sim::ComputeCapacityPlan(in);
  if (!plan.ok()) {
    std::fprintf(stderr, "deepinfer plan: %s\n", std::string(plan.status().message()).c_str());
    return 2;
  }
  std::fputs(sim::FormatCapacityPlan(in, *plan).c_str(), stdout);
  return plan->survives_server_loss_at_min && plan->ttl_fits ? 0 : 1;
}

}  // namespace deepinfer::cli
