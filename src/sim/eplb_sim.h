// Per-rank MoE time model of the EPLB benchmark (expert-parallel.md §2.4 "token-based vs
// time-based"), used by RunEplbSim (sim.h) to report `moe_lb_time` next to token `moe_lb`.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cluster/eplb.h"

namespace deepinfer::sim {

// Decode default: time to stream one routed expert's weights from HBM, in µs. V4.1-Flash expert
// = gate + up + down = 3 x hidden 5120 x moe_inter 2304 = 35,389,440 params, MXFP4 (e2m1 + one
// ue8m0 scale per 32 = 4.25 bit) = 18,800,640 bytes (the figure expert-parallel.md gives before
// §1); ÷ 3.35 TB/s (H800/H100 SXM HBM3 peak, NVIDIA H100 datasheet; DeepSeek serves on H800,
// expert-parallel.md §5.3 [D6]) = 5.612 µs.
inline constexpr double kDefaultExpertReadUs = 5.612;
// Decode default: compute per (token, pick) row, in µs: 2 x 35,389,440 = 70.8 MFLOP ÷ 1,979
// TFLOP/s (H100 SXM dense FP8 tensor-core peak, same datasheet; Hopper has no FP4 MMA, so FP4
// weights run at the FP8 rate) = 0.0358 µs. The read/row ratio (~157 rows) is what the metric
// sees; both are peaks, so equal achieved fractions leave it unchanged.
inline constexpr double kDefaultRowComputeUs = 0.0358;

// MoE time per rank for one (step, layer), µs, into `out` [ep]: each slot p on rank p /
// slots_per_rank gets the integer even split of its expert's rows, floor(c/n) + (j < c mod n) for
// replica j = phy_replica[p] of n = logcnt[e] (the §2.5 rule spreads picks this way); a slot
// with >= 1 row costs `expert_read_us` (one weight read, memory-bound decode), and every row
// costs `row_compute_us`. Prefill is "time ∝ rows": pass expert_read_us = 0. counts: [E] rows
// per logical expert. Requires ep x slots_per_rank == phy2log.size().
void EplbRankTimes(const cluster::EplbPlacement& pl, std::span<const int64_t> counts, int ep,
                   double expert_read_us, double row_compute_us, std::vector<double>& out);

}  // namespace deepinfer::sim
