// EPLB moe_lb benchmark (expert-parallel.md §4.4) through cluster::EplbController. See sim.h.
//
// Generator (fast mode of §4.4): per layer base log-popularity θ_e = -s_zipf ln(rank_e) over a
// seeded permutation; per step drift θ += σ_d N(0,1), batch composition z = θ + σ_b N(0,1);
// expected picks N·p_e with p = softmax(z) capped at 1/K (water-filling), N = EP x tokens per
// rank x K; the multinomial is approximated per expert by a normal with variance N p (1 - p),
// rounded and clamped at 0 [OURS: cheaper than drawing N picks]. Rank load = Σ over its slots of
// count_e / cnt_e (the even split that the §2.5 replica rule approximates). Rank time (§2.4):
// decode = active slots x expert weight read + rows x per-row compute (EplbRankTimes in
// eplb_sim.h); prefill = rows x per-row compute, so its moe_lb_time equals moe_lb.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cluster/eplb.h"
#include "cluster/rng.h"
#include "common/check.h"
#include "common/status.h"
#include "sim/eplb_sim.h"
#include "sim/sim.h"

namespace deepinfer::sim {
namespace {

std::vector<double> CappedSoftmax(const std::vector<double>& z, int k) {
  const double mx = *std::max_element(z.begin(), z.end());
  std::vector<double> p(z.size());
  double s = 0;
  for (size_t i = 0; i < z.size(); ++i) s += (p[i] = std::exp(z[i] - mx));
  for (double& x : p) x /= s;
  const double cap = 1.0 / k;
  for (int iter = 0; iter < 64; ++iter) {
    double excess = 0, free_mass = 0;
    for (double x : p) {
      if (x > cap) excess += x - cap;
      else free_mass += x;
    }
    if (excess <= 1e-15 || free_mass <= 0) break;
    for (double& x : p) x = x >= cap ? cap : x * (1.0 + excess / free_mass);
  }
  return p;
}

void RankLoads(const cluster::EplbPlacement& pl, const std::vector<int64_t>& counts, int ep,
               std::vector<double>& out) {
  out.assign(ep, 0.0);
  for (size_t p = 0; p < pl.phy2log.size(); ++p) {
    const int e = pl.phy2log[p];
    out[p / pl.slots_per_rank] += static_cast<double>(counts[e]) / pl.logcnt[e];
  }
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

}  // namespace

void EplbRankTimes(const cluster::EplbPlacement& pl, std::span<const int64_t> counts, int ep,
                   double expert_read_us, double row_compute_us, std::vector<double>& out) {
  CHECK_EQ(pl.phy2log.size(), static_cast<size_t>(ep) * pl.slots_per_rank);
  out.assign(ep, 0.0);
  for (size_t p = 0; p < pl.phy2log.size(); ++p) {
    const int e = pl.phy2log[p];
    const int64_t n = pl.logcnt[e], j = pl.phy_replica[p];
    const int64_t rows = counts[e] / n + (j < counts[e] % n ? 1 : 0);
    if (rows > 0) out[p / pl.slots_per_rank] += expert_read_us + rows * row_compute_us;
  }
}

absl::Status RunEplbSim(const ConfigReader& root, Results& results) {
  RETURN_IF_ERROR(root.RejectUnknown({"mode", "seed", "role", "experts", "top_k", "layers", "ep",
                                      "steps", "tokens_per_rank", "s_zipf", "sigma_b", "sigma_d",
                                      "redundant_per_rank", "window", "period", "oracle",
                                      "expert_read_us", "row_compute_us"}));
  ASSIGN_OR_RETURN(int64_t seed, root.Int("seed", 1, 0, INT64_MAX));
  ASSIGN_OR_RETURN(std::string role, root.String("role", "prefill"));
  if (role != "prefill" && role != "decode") {
    return absl::InvalidArgumentError("role: expected \"prefill\" or \"decode\"");
  }
  cluster::EplbConfig ec =
      role == "prefill" ? cluster::EplbConfig::Prefill() : cluster::EplbConfig::Decode();
  ASSIGN_OR_RETURN(int64_t experts, root.Int("experts", 384, 2, 4096));
  ASSIGN_OR_RETURN(int64_t k, root.Int("top_k", 6, 1, experts));
  ASSIGN_OR_RETURN(int64_t layers, root.Int("layers", 4, 1, 128));
  ASSIGN_OR_RETURN(int64_t ep, root.Int("ep", role == "prefill" ? 4 : 64, 1, 1024));
  ASSIGN_OR_RETURN(int64_t steps, root.Int("steps", 3000, 1, 10'000'000));
  ASSIGN_OR_RETURN(int64_t tpr, root.Int("tokens_per_rank", role == "prefill" ? 4096 : 60, 1,
                                         1 << 20));
  ASSIGN_OR_RETURN(double s_zipf, root.Number("s_zipf", 0.55, 0, 10));
  ASSIGN_OR_RETURN(double sigma_b, root.Number("sigma_b", 0.2, 0, 10));
  ASSIGN_OR_RETURN(double sigma_d, root.Number("sigma_d", 0.005, 0, 10));
  ASSIGN_OR_RETURN(int64_t r, root.Int("redundant_per_rank", ec.redundant_per_rank, 0, 1024));
  ASSIGN_OR_RETURN(int64_t w, root.Int("window", ec.window_steps, 1, 10'000'000));
  ASSIGN_OR_RETURN(int64_t m, root.Int("period", ec.period_steps, 1, 10'000'000));
  ASSIGN_OR_RETURN(bool oracle, root.Bool("oracle", true));
  // Time model (§2.4); defaults from V4.1-Flash shapes on H800 (eplb_sim.h). Prefill is compute
  // bound: a read of each expert is amortised over thousands of rows, so time ∝ rows.
  ASSIGN_OR_RETURN(double t_read, root.Number("expert_read_us",
                                              role == "decode" ? kDefaultExpertReadUs : 0, 0, 1e6));
  ASSIGN_OR_RETURN(double t_row, root.Number("row_compute_us", kDefaultRowComputeUs, 1e-9, 1e6));
  if (steps <= m) {
    return absl::InvalidArgumentError(
        absl::StrCat("steps: must exceed period (", m, ") so that EPLB is measured"));
  }
  ec.redundant_per_rank = static_cast<int>(r);
  ec.window_steps = static_cast<int>(w);
  ec.period_steps = static_cast<int>(m);

  cluster::Rng rng = cluster::Rng(static_cast<uint64_t>(seed)).Fork(0xE9);
  std::vector<std::vector<double>> theta(layers, std::vector<double>(experts));
  for (auto& th : theta) {
    std::vector<int> perm(experts);
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t i = experts - 1; i > 0; --i) std::swap(perm[i], perm[rng.Below(i + 1)]);
    for (int64_t e = 0; e < experts; ++e) th[perm[e]] = -s_zipf * std::log(e + 1.0);
  }
  cluster::EplbController ctl(ec, static_cast<int>(layers), static_cast<int>(experts),
                              static_cast<int>(ep));
  const int flat_spr = static_cast<int>((experts + ep - 1) / ep);
  const cluster::EplbPlacement flat =
      cluster::ContiguousPlacement(static_cast<int>(experts), static_cast<int>(ep), flat_spr);
  const double n_picks = static_cast<double>(ep * tpr * k);
  cluster::MoeLbAccumulator acc_flat, acc_eplb, acc_oracle;
  cluster::MoeLbAccumulator time_flat, time_eplb, time_oracle;
  std::vector<double> ratios_eplb, loads, times;
  std::vector<int64_t> all_counts(layers * experts);
  std::vector<double> worst_layer(layers, 0.0);
  results.Table("eplb_steps", {"step", "moe_lb_no_eplb", "moe_lb_eplb"});
  for (int64_t s = 0; s < steps; ++s) {
    const bool measured = s >= m;  // after the first re-placement
    double step_max_flat = 0, step_mean_flat = 0, step_max_e = 0, step_mean_e = 0;
    for (int64_t l = 0; l < layers; ++l) {
      std::vector<double> z(experts);
      for (int64_t e = 0; e < experts; ++e) {
        theta[l][e] += sigma_d * rng.Normal();
        z[e] = theta[l][e] + sigma_b * rng.Normal();
      }
      const std::vector<double> p = CappedSoftmax(z, static_cast<int>(k));
      std::vector<int64_t> counts(experts);
      for (int64_t e = 0; e < experts; ++e) {
        const double mean = n_picks * p[e];
        const double sd = std::sqrt(std::max(0.0, mean * (1.0 - p[e])));
        counts[e] = std::max<int64_t>(0, std::llround(mean + sd * rng.Normal()));
        all_counts[l * experts + e] = counts[e];
      }
      if (!measured) continue;
      RankLoads(flat, counts, static_cast<int>(ep), loads);
      acc_flat.Add(loads);
      EplbRankTimes(flat, counts, static_cast<int>(ep), t_read, t_row, times);
      time_flat.Add(times);
      step_max_flat += *std::max_element(loads.begin(), loads.end());
      step_mean_flat += std::accumulate(loads.begin(), loads.end(), 0.0) / ep;
      const cluster::EplbPlacement& cur = ctl.placement(static_cast<int>(l));
      RankLoads(cur, counts, static_cast<int>(ep), loads);
      acc_eplb.Add(loads);
      EplbRankTimes(cur, counts, static_cast<int>(ep), t_read, t_row, times);
      time_eplb.Add(times);
      const double mx = *std::max_element(loads.begin(), loads.end());
      const double mean = std::accumulate(loads.begin(), loads.end(), 0.0) / ep;
      step_max_e += mx;
      step_mean_e += mean;
      ratios_eplb.push_back(mean > 0 ? mx / mean : 1.0);
      worst_layer[l] = std::max(worst_layer[l], mean > 0 ? mx / mean : 1.0);
      if (oracle) {
        auto op = cluster::RebalanceExperts(counts, ctl.slots_per_rank() * static_cast<int>(ep),
                                            1, 1, static_cast<int>(ep));
        RETURN_IF_ERROR(op.status());
        RankLoads(*op, counts, static_cast<int>(ep), loads);
        acc_oracle.Add(loads);
        EplbRankTimes(*op, counts, static_cast<int>(ep), t_read, t_row, times);
        time_oracle.Add(times);
      }
    }
    ctl.RecordStep(all_counts);
    if (measured && (s % 100 == 0)) {
      results.Row("eplb_steps", {absl::StrCat(s), Fmt(step_max_flat / step_mean_flat),
                                 Fmt(step_max_e / step_mean_e)});
    }
  }
  results.Table("eplb", {"variant", "moe_lb", "moe_lb_time", "p99_step_layer_ratio"});
  results.Row("eplb", {"no_eplb", Fmt(acc_flat.Value()), Fmt(time_flat.Value()), ""});
  results.Row("eplb", {"eplb", Fmt(acc_eplb.Value()), Fmt(time_eplb.Value()),
                       Fmt(Quantile(ratios_eplb, 0.99))});
  if (oracle) {
    results.Row("eplb", {"oracle", Fmt(acc_oracle.Value()), Fmt(time_oracle.Value()), ""});
  }
  nlohmann::json& sum = results.summary();
  sum["mode"] = "eplb";
  sum["role"] = role;
  sum["seed"] = seed;
  sum["ep"] = ep;
  sum["slots_per_rank"] = ctl.slots_per_rank();
  sum["replacements"] = ctl.replacements();
  sum["moe_lb"] = {{"no_eplb", acc_flat.Value()}, {"eplb", acc_eplb.Value()}};
  if (oracle) sum["moe_lb"]["oracle"] = acc_oracle.Value();
  sum["moe_lb_time"] = {{"no_eplb", time_flat.Value()}, {"eplb", time_eplb.Value()}};
  if (oracle) sum["moe_lb_time"]["oracle"] = time_oracle.Value();
  sum["time_model"] = {{"expert_read_us", t_read}, {"row_compute_us", t_row}};
  sum["measured_steps"] = std::max<int64_t>(0, steps - m);
  sum["invariants_pass"] = true;
  return absl::OkStatus();
}

}  // namespace deepinfer::sim
