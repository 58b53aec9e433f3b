// EXP-2 (cluster.md §6.6): the p_resume calibration and the independent checks (a)-(c), run
// over the cache-only simulator (RunCacheSim).
//
//  * CalibratePResume: bisection of workload.chat.p_resume (assumed monotone) so that chat's
//    token-weighted hit rate with TTL 3 d vs 7 d differs by the target (default 0.75 points, the
//    middle of [0.5, 1.0]); writes calibration.csv (p, chat and agent differences) and the
//    chosen value in summary.json. Run once; the value is then recorded in exp2_ttl.json.
//  * RunExp2Checks: with the config as is, seeds seed..seed+n-1: (a) agent loses < 0.2 points
//    at 3 d vs 7 d, (b) the chat loss against the shortest TTL grows monotonically with the TTL
//    gap (variants sorted by chat TTL), (c) the 3 d vs 7 d chat loss stays within ±0.1 points
//    of its mean over the seeds; plus the calibration band [0.5, 1.0] per seed. Writes
//    exp2_checks.csv, exp2_seeds.csv and summary.json; Internal if a check fails.
// Both take the full config JSON; the TTL pair compared is the first and last variant.
#ifndef DEEPINFER_SIM_EXP2_H_
#define DEEPINFER_SIM_EXP2_H_

#include <string>

#include "absl/status/status.h"

namespace deepinfer::sim {

struct Exp2Tolerance {
  double band_lo_pp = 0.5, band_hi_pp = 1.0;  // calibration band (chat, 3 d vs 7 d)
  double agent_max_pp = 0.2;                  // (a)
  double seed_spread_pp = 0.1;                // (c) ± around the mean
  int seeds = 5;                              // (c)
};

absl::Status CalibratePResume(const std::string& config_json, const std::string& out_dir,
                              double lo, double hi, int iterations, double target_pp);

absl::Status RunExp2Checks(const std::string& config_json, const std::string& out_dir,
                           const Exp2Tolerance& tol = {});

}  // namespace deepinfer::sim

#endif  // DEEPINFER_SIM_EXP2_H_
