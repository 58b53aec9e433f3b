#include "cluster/autoscaler.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"

namespace deepinfer::cluster {

AutoscalerConfig AutoscalerConfig::Prefill() {
  AutoscalerConfig c;
  c.min_instances = 4;
  c.max_out_step = 2;
  c.out_period_ns = 60'000'000'000;
  return c;
}

AutoscalerConfig AutoscalerConfig::Decode() {
  AutoscalerConfig c;
  c.min_instances = 1;
  c.max_out_step = 1;
  c.out_period_ns = 120'000'000'000;
  return c;
}

int DesiredInstances(double demand, double capacity_per_instance, const AutoscalerConfig& config) {
  CHECK_GT(capacity_per_instance, 0.0);
  // A tiny epsilon keeps exact multiples (e.g. 2.1 / 0.7 = 3.0000000000000004) from rounding up.
  const double need = demand / (capacity_per_instance * config.u_target);
  const int n = static_cast<int>(std::ceil(need - 1e-9));
  return std::clamp(n, config.min_instances, config.max_instances);
}

int SparePoolSize(double failures_per_hour, double restart_s, int max_out_step) {
  const int s = static_cast<int>(std::ceil(failures_per_hour * restart_s / 3600.0 - 1e-12)) +
                max_out_step;
  return std::max(1, s);
}

ScaleDecision Autoscaler::Decide(int64_t now_ns, const AutoscalerInput& in) {
  CHECK_GT(in.capacity_per_instance, 0.0);
  ScaleDecision d;
  d.desired = DesiredInstances(in.demand, in.capacity_per_instance, config_);
  d.u = in.serving > 0 ? in.demand / (in.capacity_per_instance * in.serving)
                       : (in.demand > 0 ? INFINITY : 0.0);
  d.n_minus_one_violated =
      in.serving > 0 && in.demand > in.capacity_per_instance * (in.serving - 1);
  int want = d.desired;
  if (config_.n_minus_one_scale_out && d.n_minus_one_violated) {
    want = std::max(want, std::min(config_.max_instances, in.serving + 1));
  }
  // Below the minimum: restore at once (no sustain window), still rate-limited.
  const bool below_min = in.serving < config_.min_instances;

  if (want > in.serving) {
    want_in_since_ = -1;
    if (want_out_since_ < 0) want_out_since_ = now_ns;
    if (in.action_in_progress) return d.reason = "action_in_progress", d;
    if (!below_min && now_ns - want_out_since_ < config_.out_sustain_ns) {
      return d.reason = "sustain_out", d;
    }
    if (last_out_ns_ >= 0 && now_ns - last_out_ns_ < config_.out_period_ns) {
      return d.reason = "rate_limit", d;
    }
    d.delta = std::min(want - in.serving, config_.max_out_step);
    d.from_spares = std::min(d.delta, in.spares);
    d.reason = "scale_out";
    last_out_ns_ = now_ns;
    want_out_since_ = -1;
    return d;
  }
  want_out_since_ = -1;
  if (want < in.serving) {
    // AS-5: forbidden while u > 0.8, or when removing one instance would push u above 0.8.
    const double projected =
        in.serving > 1 ? in.demand / (in.capacity_per_instance * (in.serving - 1)) : INFINITY;
    if (d.u > config_.u_no_scale_in || projected > config_.u_no_scale_in) {
      want_in_since_ = -1;
      return d.reason = "hold_u_above_0.8", d;
    }
    if (want_in_since_ < 0) want_in_since_ = now_ns;
    if (in.action_in_progress) return d.reason = "action_in_progress", d;
    if (now_ns - want_in_since_ < config_.in_sustain_ns) return d.reason = "sustain_in", d;
    if (last_in_ns_ >= 0 && now_ns - last_in_ns_ < config_.in_period_ns) {
      return d.reason = "rate_limit", d;
    }
    d.delta = -1;
    d.reason = "scale_in";
    last_in_ns_ = now_ns;
    want_in_since_ = -1;
    return d;
  }
  want_in_since_ = -1;
  return d;
}

DrainPhase DrainPhaseAt(int64_t start_ns, int64_t now_ns, int64_t remaining,
                        const DrainConfig& config) {
  if (remaining == 0) return DrainPhase::kDone;
  return now_ns - start_ns < config.grace_ns ? DrainPhase::kGrace : DrainPhase::kMigrate;
}

std::vector<DrainMove> PlanDrainMoves(const std::vector<DrainRequest>& requests,
                                      std::vector<RankLoad> targets, const DecodeLbConfig& config,
                                      std::vector<RankLoad>* after) {
  std::vector<DrainMove> moves;
  for (const DrainRequest& r : requests) {
    const int t = PickDecodeRank(targets, r.size, config);
    moves.push_back({r.id, t});
    if (t >= 0) {
      targets[t].running += 1;
      targets[t].kv_tokens += r.kv_tokens;
    }
  }
  if (after) *after = std::move(targets);
  return moves;
}

}  // namespace deepinfer::cluster
