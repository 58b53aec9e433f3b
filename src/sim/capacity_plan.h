// Capacity arithmetic of the KV store (cluster.md §6.6 EXP-3), with the three checks the seed's
// script leaves out: (a) fault domains of the erasure code, (b) write budget, (c) retention
// (TTL vs capacity). Pure arithmetic; `deepinfer plan` prints it.
#ifndef DEEPINFER_SIM_CAPACITY_PLAN_H_
#define DEEPINFER_SIM_CAPACITY_PLAN_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace deepinfer::sim {

// Inputs with the seed's values as defaults (decimal TB = 1e12 B).
struct CapacityInputs {
  int gpus = 128;
  double tb_per_gpu = 14.4;          // KV kept per GPU [SEED]
  int ec_data = 10, ec_parity = 2;   // 10+2 EC [SEED]
  int drives_per_server = 20;
  double drive_tb = 30.73;
  double write_gb_per_s = 5.0;       // per node [SEED: >= 5 GB/s]
  double snapshot_bytes = 1415040;   // 20 layers x 134 tokens x 528 B [SEED]
  double snapshots = 1e6;
  // (c) retention: unique uncached tokens stored per day, bytes per token, TTL, watermark.
  double unique_tokens_per_day = 0;  // 0 = skip check (c)
  double bytes_per_token = 890;      // V4.1 (deepseek-v4.md §5.3)
  double ttl_days = 7;
  double watermark = 0.9;
};

// Results; sizes in decimal TB unless named otherwise.
struct CapacityPlan {
  double logical_tb = 0, raw_tb = 0, server_raw_tb = 0, servers_exact = 0;
  int servers_min = 0;              // capacity floor: ceil(raw / server raw)
  int fault_domain_servers = 0;     // (a) k + m servers for one chunk per server
  int read_fanout = 0;              // (a) nodes contacted per read: k + 1
  int chunks_per_server_at_min = 0; // (a) ceil((k + m) / servers_min)
  bool survives_server_loss_at_min = false;
  double fill_hours = 0;            // (b) hours to fill one server at the write rate
  double snapshot_mib = 0, snapshots_gib = 0;
  double bytes_per_day_tb = 0;      // (c)
  double retention_days = 0;        // (c) usable / bytes per day (0 if unchecked)
  bool ttl_fits = true;             // (c) bytes/day x TTL <= usable logical capacity
};

// Computes the plan. Errors: InvalidArgument naming the input that is not positive / in range.
absl::StatusOr<CapacityPlan> ComputeCapacityPlan(const CapacityInputs& in);

// Human-readable report (one fact per line, with the check verdicts).
std::string FormatCapacityPlan(const CapacityInputs& in, const CapacityPlan& plan);

}  // namespace deepinfer::sim

#endif  // DEEPINFER_SIM_CAPACITY_PLAN_H_
