// Autoscaler decision function (cluster.md §5.1, AS-1..AS-7) and graceful-drain planning (§5.2,
// DRAIN-1..DRAIN-3).
//
// One Autoscaler per role. Each call to Decide() receives the current time (ns) and the
// role's signals and returns what to do now; the object only remembers timers (since when a
// change has been wanted, when the last action happened). No clock, no I/O.
//
// Rules implemented:
//  AS-3 u = demand / (capacity x serving); AS-4 desired = ceil(demand / (capacity x u_target))
//  clamped to [min, max]; AS-5 no scale-in while u > 0.8 nor when the projected u after removing
//  one instance is > 0.8; AS-6 rate limits (out: <= max_out_step per out_period, in: -1 per
//  in_period), sustain windows (out 30 s, in 10 min) and no action while one is in progress;
//  AS-7 scale-out takes spares first.
// FT-5 (N-1 redundancy) is reported (`n_minus_one_violated`) and, only when
// `n_minus_one_scale_out` is set, used as a scale-out reason. It is off by default because the
// spec's own AS-5 worked example (R = 8,000, three CEs of 3,840) scales in to a fleet that
// violates FT-5, and enforcing both would oscillate (see docs/simulator.md).
//
// Thread-safety: not thread-safe; one caller.
#ifndef DEEPINFER_CLUSTER_AUTOSCALER_H_
#define DEEPINFER_CLUSTER_AUTOSCALER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cluster/decode_lb.h"

namespace deepinfer::cluster {

// Parameters of one role's autoscaler; Prefill() and Decode() give the spec's defaults.
struct AutoscalerConfig {
  double u_target = 0.7;          // AS-4
  double u_no_scale_in = 0.8;     // AS-5 [SEED]
  int min_instances = 1;          // AS-4
  int max_instances = 1 << 20;
  int max_out_step = 1;           // AS-6: +2 PE / +1 CE per out_period
  int64_t out_period_ns = 120'000'000'000;
  int64_t in_period_ns = 300'000'000'000;    // -1 per 300 s
  int64_t out_sustain_ns = 30'000'000'000;   // wanted continuously 30 s
  int64_t in_sustain_ns = 600'000'000'000;   // 10 min
  bool n_minus_one_scale_out = false;        // FT-5 as a scale-out reason (see file comment)

  static AutoscalerConfig Prefill();  // min 4, +2 per 60 s
  static AutoscalerConfig Decode();   // min 1, +1 per 120 s
};

// Signals of one role at one instant.
struct AutoscalerInput {
  double demand = 0;                // AS-1 uncached tok/s (prefill) or AS-2 running requests
  double capacity_per_instance = 1; // same unit per serving instance (> 0)
  int serving = 0;                  // instances in routing (not draining, not spare)
  int spares = 0;                   // READY_SPARE instances (AS-7)
  bool action_in_progress = false;  // AS-6 pending guard
};

// What to do now. delta > 0: add `delta` instances (`from_spares` of them from the ready
// pool); delta < 0: drain one instance; 0: nothing.
struct ScaleDecision {
  int delta = 0;
  int from_spares = 0;
  int desired = 0;      // AS-4 target (clamped)
  double u = 0;         // AS-3 current utilization
  bool n_minus_one_violated = false;  // FT-5
  std::string reason;   // "", "scale_out", "scale_in", "hold_u_above_0.8", "rate_limit", ...
};

// AS-4 desired count for the given signals (clamped to [min, max]).
int DesiredInstances(double demand, double capacity_per_instance, const AutoscalerConfig& config);

// AS-7 spare pool size S = ceil(λ_fail x T_restart) + largest scale-out step, >= 1.
// `failures_per_hour` for the role's fleet, `restart_s` in seconds.
int SparePoolSize(double failures_per_hour, double restart_s, int max_out_step);

// The stateful decision function of one role (timers only).
class Autoscaler {
 public:
  explicit Autoscaler(AutoscalerConfig config) : config_(config) {}

  // Decides at time `now_ns` (non-decreasing across calls). An action it returns is assumed
  // to start now (the rate-limit clocks start).
  ScaleDecision Decide(int64_t now_ns, const AutoscalerInput& in);

  const AutoscalerConfig& config() const { return config_; }

 private:
  AutoscalerConfig config_;
  int64_t want_out_since_ = -1;
  int64_t want_in_since_ = -1;
  int64_t last_out_ns_ = -1;
  int64_t last_in_ns_ = -1;
};

// Graceful drain of a decode engine (DRAIN-1/2).
struct DrainConfig {
  int64_t grace_ns = 60'000'000'000;  // DRAIN-2: 1 minute [SEED]
};

// Phase of a draining CE at a given time.
enum class DrainPhase {
  kGrace,    // out of the LB candidate set, still decoding its own requests
  kMigrate,  // grace over: hand remaining requests with their KV to other CEs (MIG-1)
  kDone,     // nothing left
};

// DRAIN-1/2 phase at `now_ns` of a drain that started at `start_ns` with `remaining` requests.
DrainPhase DrainPhaseAt(int64_t start_ns, int64_t now_ns, int64_t remaining,
                        const DrainConfig& config = {});

// A request held by the draining CE.
struct DrainRequest {
  uint64_t id = 0;
  int64_t kv_tokens = 0;   // current KV length
  int64_t size = 0;        // DLB-2 ℓ (current KV + expected remaining output)
};

// One planned KV migration (MIG-1): request -> target rank index in `targets`, or -1 when no
// rank can take it (the caller falls back to recompute migration, MIG-2).
struct DrainMove {
  uint64_t id = 0;
  int target = -1;
};

// DRAIN-2: plans where each remaining request goes, in the given order (oldest first), with the
// decode LB (DLB-3/6) over `targets` (the ranks of the other CEs), updating the target loads as
// it assigns (n + 1, K + kv_tokens). `targets` is taken by value and returned updated in `after`
// when non-null.
std::vector<DrainMove> PlanDrainMoves(const std::vector<DrainRequest>& requests,
                                      std::vector<RankLoad> targets,
                                      const DecodeLbConfig& config = {},
                                      std::vector<RankLoad>* after = nullptr);

}  // namespace deepinfer::cluster

#endif  // DEEPINFER_CLUSTER_AUTOSCALER_H_
