#include "sim/capacity_plan.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace deepinfer::sim {

absl::StatusOr<CapacityPlan> ComputeCapacityPlan(const CapacityInputs& in) {
  auto pos = [](double v, const char* name) -> absl::Status {
    if (!(v > 0) || !std::isfinite(v)) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be > 0"));
    }
    return absl::OkStatus();
  };
  for (auto [v, n] : {std::pair<double, const char*>{double(in.gpus), "gpus"},
                      {in.tb_per_gpu, "tb_per_gpu"},
                      {double(in.ec_data), "ec_data"},
                      {double(in.drives_per_server), "drives_per_server"},
                      {in.drive_tb, "drive_tb"},
                      {in.write_gb_per_s, "write_gb_per_s"},
                      {in.bytes_per_token, "bytes_per_token"},
                      {in.ttl_days, "ttl_days"},
                      {in.watermark, "watermark"}}) {
    if (absl::Status s = pos(v, n); !s.ok()) return s;
  }
  if (in.ec_parity < 0) return absl::InvalidArgumentError("ec_parity must be >= 0");
  if (in.watermark > 1) return absl::InvalidArgumentError("watermark must be <= 1");
  CapacityPlan p;
  p.logical_tb = in.gpus * in.tb_per_gpu;
  p.raw_tb = p.logical_tb * (in.ec_data + in.ec_parity) / in.ec_data;
  p.server_raw_tb = in.drives_per_server * in.drive_tb;
  p.servers_exact = p.raw_tb / p.server_raw_tb;
  p.servers_min = static_cast<int>(std::ceil(p.servers_exact - 1e-12));
  p.fault_domain_servers = in.ec_data + in.ec_parity;
  p.read_fanout = in.ec_data + (in.ec_parity > 0 ? 1 : 0);
  p.chunks_per_server_at_min =
      (p.fault_domain_servers + p.servers_min - 1) / p.servers_min;
  p.survives_server_loss_at_min = p.chunks_per_server_at_min <= in.ec_parity;
  p.fill_hours = p.server_raw_tb * 1e12 / (in.write_gb_per_s * 1e9) / 3600.0;
  p.snapshot_mib = in.snapshot_bytes / (1024.0 * 1024.0);
  p.snapshots_gib = in.snapshot_bytes * in.snapshots / (1024.0 * 1024.0 * 1024.0);
  if (in.unique_tokens_per_day > 0) {
    p.bytes_per_day_tb = in.unique_tokens_per_day * in.bytes_per_token / 1e12;
    const double usable = p.logical_tb * in.watermark;
    p.retention_days = usable / p.bytes_per_day_tb;
    p.ttl_fits = p.bytes_per_day_tb * in.ttl_days <= usable;
  }
  return p;
}

std::string FormatCapacityPlan(const CapacityInputs& in, const CapacityPlan& p) {
  std::string s;
  absl::StrAppendFormat(&s, "logical capacity     %d GPUs x %.2f TB = %.1f TB\n", in.gpus,
                        in.tb_per_gpu, p.logical_tb);
  absl::StrAppendFormat(&s, "raw capacity         x %d/%d EC = %.2f TB\n",
                        in.ec_data + in.ec_parity, in.ec_data, p.raw_tb);
  absl::StrAppendFormat(&s, "server raw           %d x %.2f TB = %.1f TB\n", in.drives_per_server,
                        in.drive_tb, p.server_raw_tb);
  absl::StrAppendFormat(&s, "servers (capacity)   %.2f -> at least %d\n", p.servers_exact,
                        p.servers_min);
  absl::StrAppendFormat(&s, "snapshot             %.0f B = %.2f MiB; %.0f snapshots = %.1f GiB\n",
                        in.snapshot_bytes, p.snapshot_mib, in.snapshots, p.snapshots_gib);
  absl::StrAppendFormat(
      &s, "(a) fault domain     %d+%d with one chunk per server needs >= %d servers (read "
          "fan-out %d); at %d servers %d chunks share a server: %s\n",
      in.ec_data, in.ec_parity, p.fault_domain_servers, p.read_fanout, p.servers_min,
      p.chunks_per_server_at_min,
      p.survives_server_loss_at_min ? "OK, one server loss is tolerated"
                                    : "FAIL, one server loss exceeds the parity");
  absl::StrAppendFormat(&s, "(b) write budget     %.1f TB at %.1f GB/s fills in %.1f h\n",
                        p.server_raw_tb, in.write_gb_per_s, p.fill_hours);
  if (in.unique_tokens_per_day > 0) {
    absl::StrAppendFormat(
        &s, "(c) retention        %.1f TB/day x TTL %.1f d vs usable %.1f TB (watermark %.2f): "
            "retention %.1f d, %s\n",
        p.bytes_per_day_tb, in.ttl_days, p.logical_tb * in.watermark, in.watermark,
        p.retention_days,
        p.ttl_fits ? "OK, TTL sets retention" : "FAIL, LRU (capacity) sets retention, not TTL");
  } else {
    absl::StrAppendFormat(&s, "(c) retention        skipped (give --unique-tokens-per-day)\n");
  }
  return s;
}

}  // namespace deepinfer::sim
