// Cluster-fidelity simulation (EXP-1). See cluster_sim.h.
#include "sim/cluster_sim.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <queue>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cluster/rng.h"
#include "common/check.h"
#include "common/status.h"
#include "sim/event_queue.h"
#include "sim/sim.h"

namespace deepinfer::sim {
namespace {

using cluster::kNumBuckets;
constexpr int64_t kNsPerS = 1'000'000'000;
constexpr double kNsPerMs = 1e6;

enum Kind { kArrival = 1, kPeStepEnd, kCeStepEnd, kDecodeReady, kRound, kAutoscale, kDrain,
            kMigrate };
// Priorities at equal time: step ends first (free capacity), then arrivals, then control.
constexpr int kPrioStep = 0, kPrioArrival = 1, kPrioControl = 2;

int64_t Round128(int64_t x) { return x / 128 * 128; }
int64_t Tok(double x, int64_t lo, int64_t hi) {
  return std::clamp<int64_t>(static_cast<int64_t>(std::llround(x)), lo, hi);
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t k = static_cast<size_t>(std::ceil(p * v.size()));
  return v[std::clamp<size_t>(k, 1, v.size()) - 1];
}

struct Req {
  ClusterRequestShape s;
  int64_t arrival = 0;
  int bucket = 0;
  int64_t computed = 0;        // prefill progress (starts at hit)
  int64_t prefill_done = -1;   // first token (TTFT)
  int64_t decode_start = -1;
  int64_t finish = -1;
  int ce = -1, rank = -1;      // decode placement (current)
  int64_t start_step = 0;      // CE step count when it joined
  int64_t out_left = 0;        // tokens still to generate when it joined
  int gen = 0;                 // placement generation (lazy heap deletion)
  bool measured = false;
};

struct PeRank {
  std::vector<uint64_t> fifo;  // request ids, FIFO
  double debt_ns = 0;          // CHUNK-6 overrun debt of the last step
  int64_t requests = 0;        // for least_requests
};

struct Pe {
  std::vector<PeRank> ranks;
  int bucket = 0;
  int next_bucket = -1;   // PLB-9: moving; pulls from next_bucket once its FIFOs are empty
  bool busy = false;
  bool serving = true;    // in the fleet (not spare, not retired)
  bool draining = false;  // DRAIN-3
  std::vector<cluster::StepPlan> plans;
  std::vector<double> budget_used;
};

struct CeRank {
  int64_t n = 0, K = 0;          // running requests, KV tokens
  int64_t res_n = 0, res_k = 0;  // reservations (assigned, KV in flight)
  std::vector<uint64_t> joining;
  // (finish step, request id, gen): min-heap.
  std::priority_queue<std::tuple<int64_t, uint64_t, int>,
                      std::vector<std::tuple<int64_t, uint64_t, int>>, std::greater<>>
      heap;
};

struct Ce {
  std::vector<CeRank> ranks;
  int64_t steps = 0;
  bool busy = false;
  bool serving = true;
  bool draining = false;
  int64_t drain_start = -1;
};

class ClusterRun {
 public:
  ClusterRun(const ClusterConfig& c, std::string pp, std::string dp, double rate, uint64_t seed,
             double duration_s, double warmup_s, bool search)
      : c_(c), pp_(std::move(pp)), dp_(std::move(dp)), rate_(rate), search_(search),
        base_(seed), arr_rng_(base_.Fork(11)), shape_rng_(base_.Fork(12)),
        noise_rng_(base_.Fork(13)), route_rng_(base_.Fork(14)),
        end_ns_(static_cast<int64_t>(duration_s * kNsPerS)),
        warm_ns_(static_cast<int64_t>(warmup_s * kNsPerS)),
        tracker_(c.plb),
        as_pe_(Pe0Config(c)), as_ce_(Ce0Config(c)) {}

  ClusterRunResult Run(Results* results, const std::string& policy);

 private:
  static cluster::AutoscalerConfig Pe0Config(const ClusterConfig& c) {
    auto a = cluster::AutoscalerConfig::Prefill();
    a.max_instances = c.pe + c.pe_spares;
    return a;
  }
  static cluster::AutoscalerConfig Ce0Config(const ClusterConfig& c) {
    auto a = cluster::AutoscalerConfig::Decode();
    a.max_instances = c.ce + c.ce_spares;
    return a;
  }
  bool Pull() const { return pp_ == "deepinfer"; }
  double PredCost(const Req& r) const {
    return c_.prefill_model.PrefillCost(r.s.prompt - r.computed, r.computed,
                                        c_.plb.step_token_budget);
  }
  int64_t RankBacklog(const PeRank& k) const {
    double b = 0;
    for (uint64_t id : k.fifo) b += PredCost(reqs_[id]);
    return static_cast<int64_t>(b);
  }
  double Noise(double sigma) { return sigma > 0 ? std::exp(sigma * noise_rng_.Normal()) : 1.0; }
  // PLB-9: an item no chunk has been computed or planned for (the running step's plan counts).
  bool Unstarted(const Pe& p, uint64_t id) const {
    if (reqs_[id].computed != reqs_[id].s.hit) return false;
    if (!p.busy) return true;
    for (const cluster::StepPlan& plan : p.plans) {
      for (const cluster::PlannedChunk& ch : plan.chunks) {
        if (ch.id == id) return false;
      }
    }
    return true;
  }
  bool Serves(const Pe& p, int b) const {
    return alloc_.served_by[b] == p.bucket;
  }

  void Arrive();
  void WakePes(int bucket);
  void StartPeStep(int i);
  void EndPeStep(int i);
  void PrefillDone(uint64_t id);
  bool BindDecode(uint64_t id);
  void StartCeStep(int i);
  void EndCeStep(int i);
  void Join(uint64_t id);
  void RoundEnd();
  void Autoscale(Results* results, const std::string& policy);
  void BeginDrainCe(int i);
  void MigrateCe(int i);
  void DrainPe(int i);
  void RetryPending();
  void ApplyAllocation(const cluster::BucketAllocation& a);
  bool Overloaded() const;

  const ClusterConfig& c_;
  const std::string pp_, dp_;
  const double rate_;
  const bool search_;
  cluster::Rng base_, arr_rng_, shape_rng_, noise_rng_, route_rng_;
  const int64_t end_ns_, warm_ns_;
  EventQueue q_;
  std::vector<Req> reqs_;
  std::vector<Pe> pes_;
  std::vector<Ce> ces_;
  std::array<cluster::BucketQueue, kNumBuckets> queues_;
  cluster::BucketAllocation alloc_;
  cluster::BucketDemandTracker tracker_;
  std::deque<uint64_t> pending_decode_;
  cluster::Autoscaler as_pe_, as_ce_;
  bool pe_action_ = false, ce_action_ = false;
  double uncached_ewma_ = 0;       // AS-1 tok/s
  int64_t uncached_since_tick_ = 0;
  uint64_t rr_pe_ = 0, rr_ce_ = 0;
  int64_t admitted_ = 0, completed_ = 0, migrations_ = 0, actions_ = 0, moves_ = 0;
  double eta_p_num_ = 0, eta_p_den_ = 0, eta_a_num_ = 0, eta_a_den_ = 0, eta_d_num_ = 0,
         eta_d_den_ = 0;
  double in_tok_ = 0, out_tok_ = 0;
  bool aborted_ = false;
  std::vector<std::vector<std::string>> series_, scaler_;
};

void ClusterRun::ApplyAllocation(const cluster::BucketAllocation& a) {
  // Map counts to instances: keep instances where they are; move surplus ones (least backlog
  // first, ties lower index) to buckets in deficit (PLB-9).
  std::array<int, kNumBuckets> have{};
  for (const Pe& p : pes_) {
    if (p.serving && !p.draining) ++have[p.next_bucket >= 0 ? p.next_bucket : p.bucket];
  }
  alloc_.served_by = a.served_by;
  for (int to = 0; to < kNumBuckets; ++to) {
    while (have[to] < a.instances[to]) {
      int best = -1;
      int64_t best_backlog = 0;
      for (int i = 0; i < static_cast<int>(pes_.size()); ++i) {
        const Pe& p = pes_[i];
        if (!p.serving || p.draining) continue;
        const int cur = p.next_bucket >= 0 ? p.next_bucket : p.bucket;
        if (have[cur] <= a.instances[cur]) continue;
        int64_t bl = 0;
        for (const PeRank& k : p.ranks) bl += RankBacklog(k);
        if (best < 0 || bl < best_backlog) best = i, best_backlog = bl;
      }
      if (best < 0) break;
      Pe& p = pes_[best];
      --have[p.next_bucket >= 0 ? p.next_bucket : p.bucket];
      ++have[to];
      ++moves_;
      // Unstarted local items return to their queue heads (last first keeps FIFO order).
      for (PeRank& k : p.ranks) {
        std::vector<uint64_t> keep;
        std::vector<uint64_t> back;
        for (uint64_t id : k.fifo) {
          (Unstarted(p, id) ? back : keep).push_back(id);
        }
        for (auto it = back.rbegin(); it != back.rend(); ++it) {
          const Req& r = reqs_[*it];
          queues_[r.bucket].PushFront({*it, r.arrival, static_cast<int64_t>(PredCost(r))});
        }
        k.fifo = std::move(keep);
      }
      if (to == p.bucket) {
        p.next_bucket = -1;
      } else {
        p.next_bucket = to;
      }
    }
  }
  for (int b = 0; b < kNumBuckets; ++b) WakePes(b);
}

void ClusterRun::WakePes(int bucket) {
  for (int i = 0; i < static_cast<int>(pes_.size()); ++i) {
    Pe& p = pes_[i];
    if (p.serving && !p.busy && (!Pull() || Serves(p, bucket) || p.next_bucket >= 0)) {
      StartPeStep(i);
    }
  }
}

void ClusterRun::Arrive() {
  const int64_t now = q_.now_ns();
  const uint64_t id = reqs_.size();
  Req r;
  r.s = DrawClusterRequest(c_.workload, shape_rng_);
  r.arrival = now;
  r.computed = r.s.hit;
  r.bucket = cluster::BucketOf(r.s.prompt, c_.plb);
  r.measured = now >= warm_ns_;
  reqs_.push_back(r);
  ++admitted_;
  const int64_t cost = static_cast<int64_t>(PredCost(reqs_[id]));
  uncached_since_tick_ += r.s.prompt - r.s.hit;
  if (Pull()) {
    queues_[r.bucket].Push({id, now, cost});
    tracker_.Admit(r.bucket, cost);
    WakePes(r.bucket);
  } else {
    // Push baselines: one PE rank chosen at arrival.
    std::vector<std::pair<int, int>> cand;
    for (int i = 0; i < static_cast<int>(pes_.size()); ++i) {
      if (!pes_[i].serving || pes_[i].draining) continue;
      for (int k = 0; k < c_.pe_ranks; ++k) cand.push_back({i, k});
    }
    CHECK(!cand.empty());
    size_t pick = 0;
    if (pp_ == "random") {
      pick = route_rng_.Below(cand.size());
    } else if (pp_ == "round_robin") {
      pick = rr_pe_++ % cand.size();
    } else {  // least_requests
      for (size_t j = 1; j < cand.size(); ++j) {
        if (pes_[cand[j].first].ranks[cand[j].second].fifo.size() <
            pes_[cand[pick].first].ranks[cand[pick].second].fifo.size()) {
          pick = j;
        }
      }
    }
    pes_[cand[pick].first].ranks[cand[pick].second].fifo.push_back(id);
    if (!pes_[cand[pick].first].busy) StartPeStep(cand[pick].first);
  }
  // Next arrival: Gamma inter-arrival with the configured CV.
  const double cv = c_.workload.arrival_cv;
  const double mean_s = 1.0 / rate_;
  const double gap_s = cv > 0 ? arr_rng_.Gamma(1.0 / (cv * cv), mean_s * cv * cv)
                              : mean_s;
  const int64_t next = now + std::max<int64_t>(1, static_cast<int64_t>(gap_s * kNsPerS));
  if (next < end_ns_) q_.Push({next, kPrioArrival, 0, kArrival});
}

void ClusterRun::StartPeStep(int i) {
  Pe& p = pes_[i];
  if (p.next_bucket >= 0) {
    bool empty = true;
    for (const PeRank& k : p.ranks) empty = empty && k.fifo.empty();
    if (empty) {
      p.bucket = p.next_bucket;
      p.next_bucket = -1;
    }
  }
  if (Pull() && !p.draining && p.next_bucket < 0) {
    // PLB-11/12: ranks with Q >= H/2 pull, larger Q first, from the served queue whose head is
    // oldest (merged buckets, PLB-3).
    const int64_t horizon = cluster::QuotaHorizonNs(p.bucket, c_.plb);
    std::vector<cluster::PullRequest> pulls;
    for (int k = 0; k < c_.pe_ranks; ++k) {
      const int64_t rem = cluster::RemainingQuota(horizon, RankBacklog(p.ranks[k]));
      if (cluster::ShouldPull(rem, horizon)) pulls.push_back({k, rem});
    }
    for (const cluster::PullRequest& pr : cluster::OrderPulls(std::move(pulls))) {
      std::vector<int64_t> heads(kNumBuckets, -1);
      for (int b = 0; b < kNumBuckets; ++b) {
        if (Serves(p, b) && !queues_[b].empty()) heads[b] = queues_[b].head().arrival_ns;
      }
      const int b = cluster::PickEntrypoint(heads);
      if (b < 0) break;
      for (const cluster::QueuedPrefill& item : queues_[b].Pull(pr.remaining_ns)) {
        p.ranks[pr.rank].fifo.push_back(item.id);
      }
    }
  }
  // CHUNK-6/7: each rank proposes its head's bucket cap minus its overrun debt; MIN.
  std::vector<double> proposals;
  bool any = false;
  for (const PeRank& k : p.ranks) {
    const int b = k.fifo.empty() ? p.bucket : reqs_[k.fifo.front()].bucket;
    const double cap = static_cast<double>(c_.plb.compute_quota_limit_ns[b]);
    proposals.push_back(cluster::ProposeBudget(cap, -1, k.debt_ns));
    any = any || !k.fifo.empty();
  }
  if (!any) {
    p.busy = false;
    if (p.draining) p.serving = false, pe_action_ = false;  // DRAIN-3 done
    return;
  }
  const double budget = cluster::GroupBudget(proposals);
  p.plans.assign(c_.pe_ranks, {});
  p.budget_used.assign(c_.pe_ranks, 0);
  double mx = 0, sum = 0;
  for (int k = 0; k < c_.pe_ranks; ++k) {
    std::vector<cluster::PrefillSeq> seqs;
    for (uint64_t id : p.ranks[k].fifo) {
      const Req& r = reqs_[id];
      seqs.push_back({id, r.computed, r.s.prompt - r.computed});
    }
    double t = c_.prefill_model.step_ns;
    if (!seqs.empty()) {
      p.plans[k] = cluster::PackStep(c_.prefill_model, seqs, budget, c_.plb.step_token_budget);
      t = p.plans[k].predicted_ns * Noise(c_.prefill_noise_sigma);
    }
    p.budget_used[k] = t;
    p.ranks[k].debt_ns = std::max(0.0, t - budget);
    mx = std::max(mx, t);
    sum += t;
  }
  eta_p_num_ += sum / c_.pe_ranks;
  eta_p_den_ += mx;
  p.busy = true;
  q_.Push({q_.now_ns() + std::max<int64_t>(1, static_cast<int64_t>(mx)), kPrioStep, 0,
           kPeStepEnd, static_cast<uint64_t>(i)});
}

void ClusterRun::EndPeStep(int i) {
  Pe& p = pes_[i];
  for (int k = 0; k < c_.pe_ranks; ++k) {
    for (const cluster::PlannedChunk& ch : p.plans[k].chunks) {
      Req& r = reqs_[ch.id];
      r.computed += ch.q;
      in_tok_ += r.measured ? ch.q : 0;
      if (r.computed >= r.s.prompt) {
        auto& f = p.ranks[k].fifo;
        auto it = std::find(f.begin(), f.end(), ch.id);
        CHECK(it != f.end()) << "planned chunk of a request not in the rank's FIFO";
        f.erase(it);
        PrefillDone(ch.id);
      }
    }
  }
  p.busy = false;
  StartPeStep(i);
}

void ClusterRun::PrefillDone(uint64_t id) {
  reqs_[id].prefill_done = q_.now_ns();
  reqs_[id].out_left = reqs_[id].s.output;
  if (!BindDecode(id)) pending_decode_.push_back(id);
}

// DLB-8 late binding: the CE rank is chosen when the final chunk finishes; the reservation
// counts at once (DLB-5) and the request joins after the KV transfer.
bool ClusterRun::BindDecode(uint64_t id) {
  Req& r = reqs_[id];
  const int64_t kv = r.computed;
  const int64_t size = cluster::DecodeRequestSize(kv, -1, c_.dlb.default_output_tokens);
  auto load = [&](int ci, int ri) {
    const CeRank& k = ces_[ci].ranks[ri];
    return cluster::RankLoad{k.n + k.res_n, k.K + k.res_k, c_.decode_kv_capacity_tokens,
                             ces_[ci].draining};
  };
  int ce = -1, rank = -1;
  if (dp_ == "deepinfer") {
    std::vector<cluster::InstanceLoad> inst;
    for (int ci = 0; ci < static_cast<int>(ces_.size()); ++ci) {
      cluster::InstanceLoad il;
      il.draining = !ces_[ci].serving || ces_[ci].draining;
      il.running_capacity = c_.ce_ranks * c_.dlb.max_running_per_rank;
      il.kv_capacity = c_.ce_ranks * c_.decode_kv_capacity_tokens;
      for (int ri = 0; ri < c_.ce_ranks; ++ri) {
        il.running += load(ci, ri).running;
        il.kv_tokens += load(ci, ri).kv_tokens;
      }
      inst.push_back(il);
    }
    const uint64_t ra = route_rng_.Next(), rb = route_rng_.Next();
    ce = cluster::PickDecodeInstance(inst, ra, rb);
    if (ce < 0) return false;
    std::vector<cluster::RankLoad> ranks;
    for (int ri = 0; ri < c_.ce_ranks; ++ri) ranks.push_back(load(ce, ri));
    rank = cluster::PickDecodeRank(ranks, size, c_.dlb);
    if (rank < 0) return false;
  } else {
    std::vector<std::pair<int, int>> cand;
    for (int ci = 0; ci < static_cast<int>(ces_.size()); ++ci) {
      if (!ces_[ci].serving || ces_[ci].draining) continue;
      for (int ri = 0; ri < c_.ce_ranks; ++ri) {
        if (cluster::RankEligible(load(ci, ri), size, c_.dlb)) cand.push_back({ci, ri});
      }
    }
    if (cand.empty()) return false;
    size_t pick = 0;
    if (dp_ == "random") {
      pick = route_rng_.Below(cand.size());
    } else if (dp_ == "round_robin") {
      pick = rr_ce_++ % cand.size();
    } else {
      auto score = [&](size_t j) -> double {
        const cluster::RankLoad l = load(cand[j].first, cand[j].second);
        if (dp_ == "least_requests") return static_cast<double>(l.running);
        if (dp_ == "least_kv") return static_cast<double>(l.kv_tokens);
        // min_step_time: the rank's predicted step after insertion.
        return c_.decode_a_ms * (l.running + 1) + c_.decode_b_ms * (l.kv_tokens + size);
      };
      for (size_t j = 1; j < cand.size(); ++j) {
        if (score(j) < score(pick)) pick = j;
      }
    }
    ce = cand[pick].first;
    rank = cand[pick].second;
  }
  CeRank& k = ces_[ce].ranks[rank];
  ++k.res_n;
  k.res_k += kv;
  r.ce = ce;
  r.rank = rank;
  ++r.gen;
  const double xfer_s = kv * c_.kv_bytes_per_token / (c_.link_gbps_per_rank * 1e9 / 8) + 50e-6;
  q_.Push({q_.now_ns() + static_cast<int64_t>(xfer_s * kNsPerS), kPrioStep, 0, kDecodeReady, id,
           static_cast<uint64_t>(r.gen)});
  return true;
}

void ClusterRun::Join(uint64_t id) {
  Req& r = reqs_[id];
  Ce& ce = ces_[r.ce];
  if (!ce.serving) {
    // Bound before the CE finished draining: release the reservation and bind again.
    ce.ranks[r.rank].res_n -= 1;
    ce.ranks[r.rank].res_k -= r.computed;
    ++r.gen;
    r.ce = -1;
    if (!BindDecode(id)) pending_decode_.push_back(id);
    return;
  }
  ce.ranks[r.rank].joining.push_back(id);
  if (r.decode_start < 0) r.decode_start = q_.now_ns();
  if (!ce.busy) StartCeStep(r.ce);
}

void ClusterRun::StartCeStep(int i) {
  Ce& ce = ces_[i];
  double max_att = 0, max_dis = 0, sum_att = 0, sum_dis = 0;
  bool any = false;
  for (CeRank& k : ce.ranks) {
    for (uint64_t id : k.joining) {
      Req& r = reqs_[id];
      const int64_t kv = r.computed;
      k.res_n -= 1;
      k.res_k -= kv;
      k.n += 1;
      k.K += kv;
      r.start_step = ce.steps;
      k.heap.push({ce.steps + r.out_left, id, r.gen});
    }
    k.joining.clear();
    // Per-rank jitter of each phase (stragglers): the lockstep phase lasts its slowest rank.
    const double att = k.n > 0 ? c_.decode_b_ms * k.K * Noise(c_.decode_noise_sigma) : 0;
    const double dis = k.n > 0 ? c_.decode_a_ms * k.n * Noise(c_.decode_noise_sigma) : 0;
    max_att = std::max(max_att, att);
    max_dis = std::max(max_dis, dis);
    sum_att += att;
    sum_dis += dis;
    any = any || k.n > 0;
  }
  if (!any) {
    ce.busy = false;
    return;
  }
  eta_a_num_ += sum_att / ce.ranks.size();
  eta_a_den_ += max_att;
  eta_d_num_ += sum_dis / ce.ranks.size();
  eta_d_den_ += max_dis;
  const double ms = c_.decode_t0_ms * Noise(c_.decode_noise_sigma) + max_att + max_dis;
  ce.busy = true;
  q_.Push({q_.now_ns() + static_cast<int64_t>(ms * kNsPerMs), kPrioStep, 0, kCeStepEnd,
           static_cast<uint64_t>(i)});
}

void ClusterRun::EndCeStep(int i) {
  Ce& ce = ces_[i];
  ++ce.steps;
  const int64_t now = q_.now_ns();
  for (int ri = 0; ri < static_cast<int>(ce.ranks.size()); ++ri) {
    CeRank& k = ce.ranks[ri];
    k.K += k.n;
    while (!k.heap.empty() && std::get<0>(k.heap.top()) <= ce.steps) {
      const auto [step, id, gen] = k.heap.top();
      k.heap.pop();
      Req& r = reqs_[id];
      if (gen != r.gen) continue;  // migrated away
      r.finish = now;
      r.computed += r.out_left;  // final KV length
      r.out_left = 0;
      out_tok_ += r.measured ? r.s.output : 0;
      --k.n;
      k.K -= r.computed;
      ++completed_;
    }
  }
  RetryPending();
  ce.busy = false;
  StartCeStep(i);
}

void ClusterRun::RetryPending() {
  size_t n = pending_decode_.size();
  while (n-- > 0) {
    const uint64_t id = pending_decode_.front();
    pending_decode_.pop_front();
    if (!BindDecode(id)) {
      pending_decode_.push_front(id);
      break;  // FIFO: the head waits
    }
  }
}

void ClusterRun::RoundEnd() {
  std::array<int64_t, kNumBuckets> queued{};
  for (int b = 0; b < kNumBuckets; ++b) queued[b] = queues_[b].queued_cost_ns();
  for (const Pe& p : pes_) {
    for (const PeRank& k : p.ranks) {
      for (uint64_t id : k.fifo) queued[reqs_[id].bucket] += static_cast<int64_t>(PredCost(reqs_[id]));
    }
  }
  const auto r = tracker_.EndRound(queued, c_.pe_ranks);
  int serving = 0;
  cluster::BucketAllocation cur;
  cur.served_by = alloc_.served_by;
  for (const Pe& p : pes_) {
    if (p.serving && !p.draining) {
      ++serving;
      ++cur.instances[p.next_bucket >= 0 ? p.next_bucket : p.bucket];
    }
  }
  if (serving > 0) {
    const auto target = cluster::AllocateInstances(r, serving, c_.plb);
    ApplyAllocation(cluster::ApplyHysteresis(r, cur, target, c_.plb));
  }
  const int64_t next = q_.now_ns() + c_.plb.round_ns;
  if (next < end_ns_ || !search_) q_.Push({next, kPrioControl, 0, kRound});
}

void ClusterRun::DrainPe(int i) {
  Pe& p = pes_[i];
  p.draining = true;
  for (PeRank& k : p.ranks) {
    std::vector<uint64_t> keep, back;
    for (uint64_t id : k.fifo) (Unstarted(p, id) ? back : keep).push_back(id);
    for (auto it = back.rbegin(); it != back.rend(); ++it) {
      const Req& r = reqs_[*it];
      queues_[r.bucket].PushFront({*it, r.arrival, static_cast<int64_t>(PredCost(r))});
    }
    k.fifo = std::move(keep);
  }
  for (int b = 0; b < kNumBuckets; ++b) WakePes(b);
  if (!p.busy) StartPeStep(i);
}

void ClusterRun::BeginDrainCe(int i) {
  Ce& ce = ces_[i];
  if (!ce.serving || ce.draining) return;
  ce.draining = true;  // DRAIN-1: out of the candidate set at once
  ce.drain_start = q_.now_ns();
  q_.Push({q_.now_ns() + static_cast<int64_t>(c_.drain_grace_s * kNsPerS), kPrioControl, 0,
           kMigrate, static_cast<uint64_t>(i)});
}

// DRAIN-2: after the grace period, remaining requests move with their KV (PlanDrainMoves).
void ClusterRun::MigrateCe(int i) {
  Ce& ce = ces_[i];
  std::vector<cluster::DrainRequest> moving;
  std::vector<uint64_t> ids;
  for (CeRank& k : ce.ranks) {
    // Requests still joining are handled like running ones.
    std::vector<std::tuple<int64_t, uint64_t, int>> all;
    while (!k.heap.empty()) {
      all.push_back(k.heap.top());
      k.heap.pop();
    }
    for (const auto& [step, id, gen] : all) {
      Req& r = reqs_[id];
      if (gen != r.gen) continue;
      const int64_t done = ce.steps - r.start_step;
      r.computed += done;
      r.out_left -= done;
      k.n -= 1;
      k.K -= r.computed;
      ids.push_back(id);
    }
    for (uint64_t id : k.joining) {
      k.res_n -= 1;
      k.res_k -= reqs_[id].computed;
      ids.push_back(id);
    }
    k.joining.clear();
  }
  std::sort(ids.begin(), ids.end());  // oldest first
  std::vector<cluster::RankLoad> targets;
  std::vector<std::pair<int, int>> where;
  for (int ci = 0; ci < static_cast<int>(ces_.size()); ++ci) {
    if (ci == i || !ces_[ci].serving || ces_[ci].draining) continue;
    for (int ri = 0; ri < c_.ce_ranks; ++ri) {
      const CeRank& k = ces_[ci].ranks[ri];
      targets.push_back({k.n + k.res_n, k.K + k.res_k, c_.decode_kv_capacity_tokens, false});
      where.push_back({ci, ri});
    }
  }
  for (uint64_t id : ids) {
    const Req& r = reqs_[id];
    moving.push_back({id, r.computed, r.computed + c_.dlb.default_output_tokens});
  }
  for (const cluster::DrainMove& m : cluster::PlanDrainMoves(moving, targets, c_.dlb)) {
    Req& r = reqs_[m.id];
    ++migrations_;
    ++r.gen;
    if (m.target < 0) {
      r.ce = -1;
      pending_decode_.push_back(m.id);  // waits for capacity (MIG-2 stand-in)
      continue;
    }
    r.ce = where[m.target].first;
    r.rank = where[m.target].second;
    CeRank& k = ces_[r.ce].ranks[r.rank];
    ++k.res_n;
    k.res_k += r.computed;
    const double xfer_s =
        r.computed * c_.kv_bytes_per_token / (c_.link_gbps_per_rank * 1e9 / 8) + 50e-6;
    q_.Push({q_.now_ns() + static_cast<int64_t>(xfer_s * kNsPerS), kPrioStep, 0, kDecodeReady,
             m.id, static_cast<uint64_t>(r.gen)});
  }
  ce.serving = false;
  ce_action_ = false;
}

void ClusterRun::Autoscale(Results* results, const std::string& policy) {
  const int64_t now = q_.now_ns();
  const double dt = c_.autoscaler_interval_s;
  const double inst_rate = uncached_since_tick_ / dt;
  uncached_since_tick_ = 0;
  const double alpha = std::min(1.0, dt / 60.0);  // AS-1: EWMA over 60 s
  uncached_ewma_ = alpha * inst_rate + (1 - alpha) * uncached_ewma_;
  int pe_serving = 0, pe_spare = 0, ce_serving = 0, ce_spare = 0;
  for (const Pe& p : pes_) pe_serving += p.serving && !p.draining;
  for (const Ce& c : ces_) ce_serving += c.serving && !c.draining;
  pe_spare = static_cast<int>(pes_.size()) - pe_serving;
  ce_spare = static_cast<int>(ces_.size()) - ce_serving;
  for (const Pe& p : pes_) pe_spare -= p.draining;
  for (const Ce& c : ces_) ce_spare -= c.draining;
  // Capacities: profiled (the workload's mean uncached tokens per rank-second; 60 per rank).
  const double pe_cap = c_.pe_ranks * 1e9 / c_.prefill_model.Cost(1, 8192) * 0.85;
  int64_t running = static_cast<int64_t>(pending_decode_.size());
  for (const Ce& c : ces_) {
    for (const CeRank& k : c.ranks) running += k.n + k.res_n;
  }
  const double ce_cap = c_.ce_ranks * 60.0;
  const cluster::ScaleDecision dp =
      as_pe_.Decide(now, {uncached_ewma_, pe_cap, pe_serving, pe_spare, pe_action_});
  const cluster::ScaleDecision dd = as_ce_.Decide(
      now, {static_cast<double>(running), ce_cap, ce_serving, ce_spare, ce_action_});
  if (results) {
    for (const auto& [role, d] : {std::pair{"prefill", dp}, std::pair{"decode", dd}}) {
      scaler_.push_back({policy, Fmt(now / 1e9), role, Fmt(d.u), absl::StrCat(d.desired),
                         absl::StrCat(d.delta), d.reason.empty() ? "-" : d.reason});
    }
    int64_t queued = 0;
    for (const auto& qb : queues_) queued += qb.size();
    std::array<int, kNumBuckets> per{};
    for (const Pe& p : pes_) per[p.bucket] += p.serving && !p.draining;
    series_.push_back({policy, Fmt(now / 1e9), absl::StrCat(per[0]), absl::StrCat(per[1]),
                       absl::StrCat(per[2]), absl::StrCat(per[3]), absl::StrCat(queued),
                       absl::StrCat(running), absl::StrCat(ce_serving)});
  }
  if (c_.autoscaler_apply) {
    if (dp.delta > 0) {
      int add = dp.delta;
      for (Pe& p : pes_) {
        if (add > 0 && !p.serving && !p.draining && p.plans.empty()) {
          p.serving = true;
          --add;
          ++actions_;
        }
      }
    } else if (dp.delta < 0) {
      int best = -1;
      for (int i = 0; i < static_cast<int>(pes_.size()); ++i) {
        if (pes_[i].serving && !pes_[i].draining) best = i;  // the last serving one
      }
      if (best >= 0) {
        pe_action_ = true;
        ++actions_;
        DrainPe(best);
      }
    }
    if (dd.delta > 0) {
      for (Ce& c : ces_) {
        if (!c.serving && !c.draining && c.drain_start < 0) {
          c.serving = true;
          ++actions_;
          break;
        }
      }
    } else if (dd.delta < 0) {
      int best = -1;
      int64_t fewest = 0;
      for (int i = 0; i < static_cast<int>(ces_.size()); ++i) {
        if (!ces_[i].serving || ces_[i].draining) continue;
        int64_t n = 0;
        for (const CeRank& k : ces_[i].ranks) n += k.n + k.res_n;
        if (best < 0 || n < fewest) best = i, fewest = n;
      }
      if (best >= 0) {
        ce_action_ = true;
        ++actions_;
        BeginDrainCe(best);
      }
    }
  }
  if (search_ && now > warm_ns_ && Overloaded()) {
    aborted_ = true;
    return;
  }
  const int64_t next = now + static_cast<int64_t>(dt * kNsPerS);
  if (next < end_ns_) q_.Push({next, kPrioControl, 0, kAutoscale});
}

// Clear overload during a search run: in some bucket more than 10% of the measured requests
// (at least 20) already violate its TTFT target (finished late, or still waiting past it), so
// its p90 cannot pass any more.
bool ClusterRun::Overloaded() const {
  const int64_t now = q_.now_ns();
  std::array<int64_t, kNumBuckets> measured{}, late{};
  for (const Req& r : reqs_) {
    if (!r.measured) continue;
    ++measured[r.bucket];
    const int64_t limit = static_cast<int64_t>(c_.ttft_p90_s[r.bucket] * kNsPerS);
    const int64_t t = r.decode_start >= 0 ? r.decode_start : now;
    late[r.bucket] += t - r.arrival > limit;
  }
  for (int b = 0; b < kNumBuckets; ++b) {
    if (late[b] >= 20 && late[b] * 10 > measured[b]) return true;
  }
  return false;
}

ClusterRunResult ClusterRun::Run(Results* results, const std::string& policy) {
  pes_.resize(c_.pe + c_.pe_spares);
  for (int i = 0; i < static_cast<int>(pes_.size()); ++i) {
    pes_[i].ranks.resize(c_.pe_ranks);
    pes_[i].serving = i < c_.pe;
  }
  ces_.resize(c_.ce + c_.ce_spares);
  for (int i = 0; i < static_cast<int>(ces_.size()); ++i) {
    ces_[i].ranks.resize(c_.ce_ranks);
    ces_[i].serving = i < c_.ce;
  }
  // Initial allocation from a pilot sample of the workload (its own stream), so the first
  // rounds do not start from an even split.
  {
    cluster::Rng pilot = base_.Fork(21);
    std::array<double, kNumBuckets> demand{};
    for (int n = 0; n < 4000; ++n) {
      const ClusterRequestShape s = DrawClusterRequest(c_.workload, pilot);
      demand[cluster::BucketOf(s.prompt, c_.plb)] +=
          c_.prefill_model.PrefillCost(s.prompt - s.hit, s.hit, c_.plb.step_token_budget);
    }
    alloc_ = cluster::AllocateInstances(demand, c_.pe, c_.plb);
    int i = 0;
    for (int b = 0; b < kNumBuckets; ++b) {
      for (int n = 0; n < alloc_.instances[b] && i < c_.pe; ++n) pes_[i++].bucket = b;
    }
  }
  q_.Push({0, kPrioArrival, 0, kArrival});
  q_.Push({c_.plb.round_ns, kPrioControl, 0, kRound});
  q_.Push({static_cast<int64_t>(c_.autoscaler_interval_s * kNsPerS), kPrioControl, 0,
           kAutoscale});
  if (c_.drain_ce >= 0 && c_.drain_ce < static_cast<int>(ces_.size())) {
    q_.Push({static_cast<int64_t>(c_.drain_at_s * kNsPerS), kPrioControl, 0, kDrain,
             static_cast<uint64_t>(c_.drain_ce)});
  }
  while (!q_.empty() && !aborted_) {
    const Event e = q_.Pop();
    if (search_ && e.time_ns >= end_ns_) break;
    switch (e.kind) {
      case kArrival: Arrive(); break;
      case kPeStepEnd: EndPeStep(static_cast<int>(e.a)); break;
      case kCeStepEnd: EndCeStep(static_cast<int>(e.a)); break;
      case kDecodeReady:
        if (static_cast<int>(e.b) == reqs_[e.a].gen) Join(e.a);
        break;
      case kRound:
        if (!Pull()) break;  // push baselines have no buckets to re-allocate
        if (!search_ && e.time_ns >= end_ns_) {
          // After arrivals stop, keep rounds only while work remains.
          bool work = false;
          for (const auto& qb : queues_) work = work || !qb.empty();
          if (!work) break;
        }
        RoundEnd();
        break;
      case kAutoscale: Autoscale(results, policy); break;
      case kDrain: BeginDrainCe(static_cast<int>(e.a)); break;
      case kMigrate: MigrateCe(static_cast<int>(e.a)); break;
      default: CHECK(false) << "unknown event";
    }
  }

  ClusterRunResult out;
  out.rate = rate_;
  out.aborted = aborted_;
  const int64_t now = q_.now_ns();
  const double window_s = (std::min(now, end_ns_) - warm_ns_) / 1e9;
  std::array<std::vector<double>, kNumBuckets> ttft;
  std::vector<double> tpot;
  std::array<int64_t, kNumBuckets> late{};
  for (const Req& r : reqs_) {
    if (!r.measured) continue;
    ++out.measured;
    ++out.bucket_requests[r.bucket];
    const double limit = c_.ttft_p90_s[r.bucket];
    // TTFT: the first token reaches the user when the request joins its CE (hand-off done).
    if (r.decode_start >= 0) {
      ttft[r.bucket].push_back((r.decode_start - r.arrival) / 1e9);
    } else if ((now - r.arrival) / 1e9 > limit) {
      ++late[r.bucket];  // unfinished and already over the target: a violation
      ttft[r.bucket].push_back(std::numeric_limits<double>::infinity());
    }
    if (r.finish >= 0) {
      ++out.completed_measured;
      tpot.push_back((r.finish - r.decode_start) / 1e6 / std::max<int64_t>(1, r.s.output));
    }
  }
  out.slo_pass = !aborted_;
  for (int b = 0; b < kNumBuckets; ++b) {
    out.ttft_p90_s[b] = Percentile(ttft[b], 0.9);
    if (!ttft[b].empty() && out.ttft_p90_s[b] > c_.ttft_p90_s[b]) out.slo_pass = false;
  }
  out.tpot_p90_ms = Percentile(tpot, 0.9);
  if (out.tpot_p90_ms > c_.tpot_p90_ms) out.slo_pass = false;
  if (out.measured == 0) out.slo_pass = false;
  out.eta_prefill = eta_p_den_ > 0 ? eta_p_num_ / eta_p_den_ : 1;
  out.eta_attention = eta_a_den_ > 0 ? eta_a_num_ / eta_a_den_ : 1;
  out.eta_dispatch = eta_d_den_ > 0 ? eta_d_num_ / eta_d_den_ : 1;
  out.input_tok_s = window_s > 0 ? in_tok_ / window_s : 0;
  out.output_tok_s = window_s > 0 ? out_tok_ / window_s : 0;
  out.migrations = migrations_;
  out.autoscaler_actions = actions_;
  out.bucket_moves = moves_;
  if (!search_) {
    // §6.5 invariants of a drained report run.
    bool empty = pending_decode_.empty();
    for (const auto& qb : queues_) empty = empty && qb.empty();
    int64_t blocks_n = 0, blocks_k = 0, res = 0;
    for (const Ce& ce : ces_) {
      for (const CeRank& k : ce.ranks) {
        blocks_n += k.n;
        blocks_k += k.K;
        res += k.res_n + k.res_k + static_cast<int64_t>(k.joining.size());
      }
    }
    for (const Pe& p : pes_) {
      for (const PeRank& k : p.ranks) empty = empty && k.fifo.empty();
    }
    bool causal = true;
    for (const Req& r : reqs_) {
      causal = causal && r.arrival <= r.prefill_done && r.prefill_done <= r.decode_start &&
               r.decode_start <= r.finish;
    }
    auto row = [&](const std::string& name, bool pass, const std::string& detail) {
      out.invariant_rows.push_back(absl::StrCat(name, ",", pass ? 1 : 0, ",", detail));
      out.invariants_pass = out.invariants_pass && pass;
    };
    row("requests_conserved", admitted_ == completed_,
        absl::StrCat("admitted=", admitted_, " completed=", completed_));
    row("causality", causal, "arrival<=prefill_done<=decode_start<=finish (INV-2)");
    row("kv_accounted", blocks_n == 0 && blocks_k == 0 && res == 0,
        absl::StrCat("running=", blocks_n, " kv=", blocks_k, " reserved=", res,
                     " after drain (INV-4)"));
    row("drained", empty && q_.empty(), "queues, FIFOs, pending decode, events empty (INV-8)");
    row("clock_monotonic", true, "CHECKed on every pop (INV-3)");
    if (results) {
      for (auto& r : series_) results->Row("cluster_timeseries", r);
      for (auto& r : scaler_) results->Row("autoscaler", r);
    }
  }
  return out;
}

}  // namespace

ClusterRequestShape DrawClusterRequest(const ClusterWorkloadConfig& w, cluster::Rng& rng) {
  ClusterRequestShape s;
  if (rng.Uniform() < w.agent_fraction) {
    s.cls = 1;
    const int64_t initial =
        w.agent_initial_min + static_cast<int64_t>(rng.Below(w.agent_initial_max -
                                                             w.agent_initial_min + 1));
    const int64_t turn = rng.Geometric(w.agent_turn_mean);
    const int64_t fresh = Tok(rng.LogNormal(w.tool_result_median, w.tool_result_sigma), 1, 1 << 20);
    const int64_t grown = static_cast<int64_t>((turn - 1) * w.agent_turn_tokens *
                                               rng.LogNormal(1.0, 0.3));
    s.prompt = std::min<int64_t>(initial + grown + fresh, w.context_cap);
    s.hit = turn == 1 ? Round128(initial) : Round128(std::max<int64_t>(0, s.prompt - fresh));
    s.output = Tok(rng.LogNormal(w.agent_output_median, w.agent_output_sigma), 1, 1 << 16);
  } else {
    const int64_t tpl = Tok(rng.LogNormal(w.template_median, w.template_sigma), 16, 200000);
    const bool first = rng.Uniform() < w.chat_first_turn_prob;
    const int64_t history =
        first ? 0 : Tok(rng.LogNormal(w.history_median, w.history_sigma), 1, 1 << 20);
    int64_t fresh = Tok(rng.LogNormal(w.user_median, w.user_sigma), 1, 200000);
    if (rng.Uniform() < w.doc_prob) {
      fresh += Tok(rng.LogNormal(w.doc_median, w.doc_sigma), 1, 1 << 20);
    }
    s.prompt = std::min<int64_t>(tpl + history + fresh, w.context_cap);
    const bool hist_hit = !first && rng.Uniform() < w.chat_hit_prob;
    s.hit = Round128(std::min(s.prompt - 1, hist_hit ? tpl + history : tpl));
    s.output = Tok(rng.LogNormal(w.chat_output_median, w.chat_output_sigma), 1,
                   w.chat_output_cap);
  }
  s.hit = std::clamp<int64_t>(s.hit, 0, Round128(s.prompt - 1));
  return s;
}

std::array<double, 2> IdealRates(const ClusterConfig& c, uint64_t seed, int samples) {
  cluster::Rng rng = cluster::Rng(seed).Fork(31);
  double cost = 0, out = 0, kv_weighted = 0;
  for (int i = 0; i < samples; ++i) {
    const ClusterRequestShape s = DrawClusterRequest(c.workload, rng);
    const int b = cluster::BucketOf(s.prompt, c.plb);
    const double cap = static_cast<double>(c.plb.compute_quota_limit_ns[b]);
    // Full steps of the bucket's cap: D amortized as cap / (cap - D).
    cost += c.prefill_model.PrefillCost(s.prompt - s.hit, s.hit, c.plb.step_token_budget) *
            cap / (cap - c.prefill_model.step_ns);
    out += s.output;
    kv_weighted += s.output * (s.prompt + s.output / 2.0);
  }
  cost /= samples;
  const double mean_out = out / samples;
  const double kbar = kv_weighted / out;  // time-weighted KV of a running request
  const double prefill_rate = c.pe * c.pe_ranks * 1e9 / cost;
  double n_star = (c.tpot_p90_ms - c.decode_t0_ms) / (c.decode_a_ms + c.decode_b_ms * kbar);
  n_star = std::min<double>(n_star, static_cast<double>(c.dlb.max_running_per_rank));
  const double step_ms = c.decode_t0_ms + (c.decode_a_ms + c.decode_b_ms * kbar) * n_star;
  const double decode_rate = c.ce * c.ce_ranks * n_star / (step_ms / 1e3 * mean_out);
  return {prefill_rate, decode_rate};
}

ClusterRunResult RunClusterOnce(const ClusterConfig& c, const std::string& prefill_policy,
                                const std::string& decode_policy, double rate, uint64_t seed,
                                double duration_s, double warmup_s, bool search,
                                Results* results, const std::string& policy) {
  ClusterRun run(c, prefill_policy, decode_policy, rate, seed, duration_s, warmup_s, search);
  return run.Run(results, policy);
}

namespace {

struct PolicySpec {
  std::string name, prefill, decode;
};

absl::Status ReadClusterConfig(const ConfigReader& root, ClusterConfig& c) {
  ASSIGN_OR_RETURN(ConfigReader fleet, root.Object("fleet"));
  RETURN_IF_ERROR(
      fleet.RejectUnknown({"pe", "pe_ranks", "ce", "ce_ranks", "pe_spares", "ce_spares"}));
  ASSIGN_OR_RETURN(int64_t pe, fleet.Int("pe", c.pe, 1, 4096));
  ASSIGN_OR_RETURN(int64_t pe_ranks, fleet.Int("pe_ranks", c.pe_ranks, 1, 128));
  ASSIGN_OR_RETURN(int64_t ce, fleet.Int("ce", c.ce, 1, 1024));
  ASSIGN_OR_RETURN(int64_t ce_ranks, fleet.Int("ce_ranks", c.ce_ranks, 1, 1024));
  ASSIGN_OR_RETURN(int64_t pe_spares, fleet.Int("pe_spares", c.pe_spares, 0, 1024));
  ASSIGN_OR_RETURN(int64_t ce_spares, fleet.Int("ce_spares", c.ce_spares, 0, 1024));
  c.pe = static_cast<int>(pe), c.pe_ranks = static_cast<int>(pe_ranks);
  c.ce = static_cast<int>(ce), c.ce_ranks = static_cast<int>(ce_ranks);
  c.pe_spares = static_cast<int>(pe_spares), c.ce_spares = static_cast<int>(ce_spares);

  ASSIGN_OR_RETURN(ConfigReader pm, root.Object("prefill_model"));
  RETURN_IF_ERROR(pm.RejectUnknown({"k2_ns", "k1_ns", "k0_ns", "d_ns", "step_ns", "noise_sigma"}));
  ASSIGN_OR_RETURN(c.prefill_model.k2, pm.Number("k2_ns", c.prefill_model.k2, 0, 1e6));
  ASSIGN_OR_RETURN(c.prefill_model.k1, pm.Number("k1_ns", c.prefill_model.k1, 0, 1e6));
  ASSIGN_OR_RETURN(c.prefill_model.k0, pm.Number("k0_ns", c.prefill_model.k0, 1, 1e9));
  ASSIGN_OR_RETURN(c.prefill_model.d, pm.Number("d_ns", c.prefill_model.d, 0, 1e10));
  ASSIGN_OR_RETURN(c.prefill_model.step_ns, pm.Number("step_ns", c.prefill_model.step_ns, 0, 1e10));
  ASSIGN_OR_RETURN(c.prefill_noise_sigma, pm.Number("noise_sigma", c.prefill_noise_sigma, 0, 2));

  ASSIGN_OR_RETURN(ConfigReader dm, root.Object("decode_model"));
  RETURN_IF_ERROR(dm.RejectUnknown({"t0_ms", "a_ms", "b_ms", "noise_sigma", "kv_capacity_tokens",
                                    "max_running_per_rank"}));
  ASSIGN_OR_RETURN(c.decode_t0_ms, dm.Number("t0_ms", c.decode_t0_ms, 0, 1e4));
  ASSIGN_OR_RETURN(c.decode_a_ms, dm.Number("a_ms", c.decode_a_ms, 0, 1e3));
  ASSIGN_OR_RETURN(c.decode_b_ms, dm.Number("b_ms", c.decode_b_ms, 0, 1e3));
  ASSIGN_OR_RETURN(c.decode_noise_sigma, dm.Number("noise_sigma", c.decode_noise_sigma, 0, 2));
  ASSIGN_OR_RETURN(c.decode_kv_capacity_tokens,
                   dm.Int("kv_capacity_tokens", c.decode_kv_capacity_tokens, 1, INT64_MAX / 4));
  ASSIGN_OR_RETURN(c.dlb.max_running_per_rank,
                   dm.Int("max_running_per_rank", c.dlb.max_running_per_rank, 1, 1 << 20));
  c.dlb.step_ms_per_request = c.decode_a_ms;  // DLB-4 weights from the same step model
  c.dlb.step_ms_per_kv_token = c.decode_b_ms;

  ASSIGN_OR_RETURN(ConfigReader slo, root.Object("slo"));
  RETURN_IF_ERROR(slo.RejectUnknown({"tpot_p90_ms", "ttft_p90_s"}));
  ASSIGN_OR_RETURN(c.tpot_p90_ms, slo.Number("tpot_p90_ms", c.tpot_p90_ms, 1, 1e5));
  if (slo.Has("ttft_p90_s")) {
    const auto& a = (*slo.raw())["ttft_p90_s"];
    if (!a.is_array() || a.size() != kNumBuckets) {
      return absl::InvalidArgumentError("slo.ttft_p90_s: expected 4 numbers (one per bucket)");
    }
    for (int b = 0; b < kNumBuckets; ++b) {
      if (!a[b].is_number() || a[b].get<double>() <= 0) {
        return absl::InvalidArgumentError("slo.ttft_p90_s: expected 4 positive numbers");
      }
      c.ttft_p90_s[b] = a[b].get<double>();
    }
  }

  ASSIGN_OR_RETURN(ConfigReader wl, root.Object("workload"));
  RETURN_IF_ERROR(wl.RejectUnknown({"agent_fraction", "arrival_cv", "chat_first_turn_prob",
                                    "history_median", "doc_prob", "chat_output_median",
                                    "agent_turn_mean", "agent_output_median"}));
  ClusterWorkloadConfig& w = c.workload;
  ASSIGN_OR_RETURN(w.agent_fraction, wl.Number("agent_fraction", w.agent_fraction, 0, 1));
  ASSIGN_OR_RETURN(w.arrival_cv, wl.Number("arrival_cv", w.arrival_cv, 0, 10));
  ASSIGN_OR_RETURN(w.chat_first_turn_prob,
                   wl.Number("chat_first_turn_prob", w.chat_first_turn_prob, 0, 1));
  ASSIGN_OR_RETURN(w.history_median, wl.Number("history_median", w.history_median, 1, 1e6));
  ASSIGN_OR_RETURN(w.doc_prob, wl.Number("doc_prob", w.doc_prob, 0, 1));
  ASSIGN_OR_RETURN(w.chat_output_median,
                   wl.Number("chat_output_median", w.chat_output_median, 1, 1e5));
  ASSIGN_OR_RETURN(w.agent_turn_mean, wl.Number("agent_turn_mean", w.agent_turn_mean, 1, 1e4));
  ASSIGN_OR_RETURN(w.agent_output_median,
                   wl.Number("agent_output_median", w.agent_output_median, 1, 1e5));

  ASSIGN_OR_RETURN(ConfigReader as, root.Object("autoscaler"));
  RETURN_IF_ERROR(as.RejectUnknown({"interval_s", "apply"}));
  ASSIGN_OR_RETURN(c.autoscaler_interval_s, as.Number("interval_s", c.autoscaler_interval_s, 1, 3600));
  ASSIGN_OR_RETURN(c.autoscaler_apply, as.Bool("apply", c.autoscaler_apply));
  ASSIGN_OR_RETURN(ConfigReader dr, root.Object("drain"));
  RETURN_IF_ERROR(dr.RejectUnknown({"ce", "at_s", "grace_s"}));
  ASSIGN_OR_RETURN(int64_t dce, dr.Int("ce", -1, -1, 1024));
  c.drain_ce = static_cast<int>(dce);
  ASSIGN_OR_RETURN(c.drain_at_s, dr.Number("at_s", c.drain_at_s, 0, 1e7));
  ASSIGN_OR_RETURN(c.drain_grace_s, dr.Number("grace_s", c.drain_grace_s, 0, 1e5));
  return absl::OkStatus();
}

std::string Row(const ClusterRunResult& r) {
  return absl::StrCat(Fmt(r.rate), ",", r.slo_pass ? 1 : 0, ",", r.aborted ? 1 : 0, ",",
                      Fmt(r.tpot_p90_ms), ",", Fmt(r.ttft_p90_s[0]), ",", Fmt(r.ttft_p90_s[1]),
                      ",", Fmt(r.ttft_p90_s[2]), ",", Fmt(r.ttft_p90_s[3]));
}

}  // namespace

absl::Status RunClusterSim(const ConfigReader& root, Results& results) {
  RETURN_IF_ERROR(root.RejectUnknown({"mode", "seed", "duration_s", "warmup_s", "search",
                                      "policies", "fleet", "prefill_model", "decode_model",
                                      "slo", "workload", "autoscaler", "drain", "acceptance",
                                      "rate_per_s"}));
  ClusterConfig c;
  RETURN_IF_ERROR(ReadClusterConfig(root, c));
  ASSIGN_OR_RETURN(int64_t seed, root.Int("seed", 1, 0, INT64_MAX));
  ASSIGN_OR_RETURN(double duration_s, root.Number("duration_s", 300, 1, 1e7));
  ASSIGN_OR_RETURN(double warmup_s, root.Number("warmup_s", 60, 0, duration_s));
  ASSIGN_OR_RETURN(ConfigReader search, root.Object("search"));
  RETURN_IF_ERROR(search.RejectUnknown({"lo", "hi", "iterations"}));
  ASSIGN_OR_RETURN(double lo_f, search.Number("lo", 0.3, 0.001, 10));
  ASSIGN_OR_RETURN(double hi_f, search.Number("hi", 1.05, lo_f, 10));
  ASSIGN_OR_RETURN(int64_t iterations, search.Int("iterations", 7, 0, 30));
  ASSIGN_OR_RETURN(double fixed_rate, root.Number("rate_per_s", 0, 0, 1e7));
  ASSIGN_OR_RETURN(ConfigReader acc, root.Object("acceptance"));
  RETURN_IF_ERROR(acc.RejectUnknown({"f_lo", "f_hi"}));
  ASSIGN_OR_RETURN(double f_lo, acc.Number("f_lo", 0.75, 0, 1));
  ASSIGN_OR_RETURN(double f_hi, acc.Number("f_hi", 0.85, f_lo, 10));

  std::vector<PolicySpec> policies = {
      {"deepinfer", "deepinfer", "deepinfer"}, {"random", "random", "random"},
      {"round_robin", "round_robin", "round_robin"},
      {"least_requests", "least_requests", "least_requests"},
      {"least_kv", "deepinfer", "least_kv"}, {"min_step_time", "deepinfer", "min_step_time"}};
  if (root.Has("policies")) {
    const auto& a = (*root.raw())["policies"];
    if (!a.is_array() || a.empty()) {
      return absl::InvalidArgumentError("policies: expected a non-empty array of names");
    }
    std::vector<PolicySpec> chosen;
    for (size_t i = 0; i < a.size(); ++i) {
      auto it = std::find_if(policies.begin(), policies.end(), [&](const PolicySpec& p) {
        return a[i].is_string() && p.name == a[i].get<std::string>();
      });
      if (it == policies.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "policies[", i, "]: expected one of deepinfer, random, round_robin, least_requests, "
            "least_kv, min_step_time"));
      }
      chosen.push_back(*it);
    }
    policies = chosen;
  }

  const std::array<double, 2> ideal = IdealRates(c, static_cast<uint64_t>(seed), 200000);
  const double ideal_rate = std::min(ideal[0], ideal[1]);
  const int gpus = c.pe * c.pe_ranks + c.ce * c.ce_ranks;
  // Mean tokens per request (input + output) of the same sample, for X per GPU.
  double tokens = 0;
  {
    cluster::Rng rng = cluster::Rng(static_cast<uint64_t>(seed)).Fork(31);
    for (int i = 0; i < 200000; ++i) {
      const ClusterRequestShape s = DrawClusterRequest(c.workload, rng);
      tokens += s.prompt + s.output;
    }
    tokens /= 200000;
  }

  results.Table("exp1", {"policy", "prefill_policy", "decode_policy", "max_rate_per_s",
                         "x_per_gpu_tok_s", "F", "tpot_p90_ms", "ttft_p90_b1_s", "ttft_p90_b2_s",
                         "ttft_p90_b3_s", "ttft_p90_b4_s", "eta_prefill", "eta_attention",
                         "eta_dispatch", "bucket_moves", "migrations", "autoscaler_actions"});
  results.Table("search", {"policy", "iteration", "rate_per_s", "slo_pass", "aborted",
                           "tpot_p90_ms", "ttft_p90_b1_s", "ttft_p90_b2_s", "ttft_p90_b3_s",
                           "ttft_p90_b4_s"});
  results.Table("autoscaler", {"policy", "t_s", "role", "u", "desired", "delta", "reason"});
  results.Table("cluster_timeseries", {"policy", "t_s", "pe_b1", "pe_b2", "pe_b3", "pe_b4",
                                       "queued", "decode_running", "ce_serving"});
  results.Table("invariants", {"name", "pass", "detail"});
  nlohmann::json& sum = results.summary();
  sum["mode"] = "cluster";
  sum["seed"] = seed;
  sum["cost_model"] = "illustrative coefficients (cluster.md §2.5, CM-4 (c))";
  sum["ideal"] = {{"prefill_rate_per_s", ideal[0]}, {"decode_rate_per_s", ideal[1]},
                  {"rate_per_s", ideal_rate},
                  {"x_per_gpu_tok_s", ideal_rate * tokens / gpus}};
  bool inv_ok = true;
  double f_deepinfer = -1, best_baseline = -1;
  for (const PolicySpec& p : policies) {
    double rate = fixed_rate;
    if (rate <= 0) {
      double lo = lo_f * ideal_rate, hi = hi_f * ideal_rate;
      const ClusterRunResult first =
          RunClusterOnce(c, p.prefill, p.decode, lo, seed, duration_s, warmup_s, true, nullptr, p.name);
      results.Row("search", {p.name, "0", Row(first)});
      if (!first.slo_pass) {
        lo = 0;
      } else {
        for (int64_t it = 1; it <= iterations; ++it) {
          const double mid = 0.5 * (lo + hi);
          const ClusterRunResult r = RunClusterOnce(c, p.prefill, p.decode, mid, seed,
                                                    duration_s, warmup_s, true, nullptr, p.name);
          results.Row("search", {p.name, absl::StrCat(it), Row(r)});
          (r.slo_pass ? lo : hi) = mid;
        }
      }
      rate = lo;
    }
    ClusterRunResult rep;
    if (rate > 0) {
      rep = RunClusterOnce(c, p.prefill, p.decode, rate, seed, duration_s, warmup_s, false,
                           &results, p.name);
      for (const std::string& row : rep.invariant_rows) {
        const size_t a = row.find(','), b = row.find(',', a + 1);
        results.Row("invariants", {absl::StrCat(p.name, ":", row.substr(0, a)),
                                   row.substr(a + 1, b - a - 1), row.substr(b + 1)});
      }
      inv_ok = inv_ok && rep.invariants_pass;
    }
    const double f = rate / ideal_rate;
    results.Row("exp1", {p.name, p.prefill, p.decode, Fmt(rate), Fmt(rate * tokens / gpus), Fmt(f),
                         Fmt(rep.tpot_p90_ms), Fmt(rep.ttft_p90_s[0]), Fmt(rep.ttft_p90_s[1]),
                         Fmt(rep.ttft_p90_s[2]), Fmt(rep.ttft_p90_s[3]), Fmt(rep.eta_prefill),
                         Fmt(rep.eta_attention), Fmt(rep.eta_dispatch),
                         absl::StrCat(rep.bucket_moves), absl::StrCat(rep.migrations),
                         absl::StrCat(rep.autoscaler_actions)});
    sum["policies"][p.name] = {{"F", f}, {"max_rate_per_s", rate},
                               {"report_slo_pass", rep.slo_pass},
                               {"eta", {rep.eta_prefill, rep.eta_attention, rep.eta_dispatch}},
                               {"migrations", rep.migrations}};
    if (p.name == "deepinfer") {
      f_deepinfer = f;
    } else {
      best_baseline = std::max(best_baseline, f);
    }
  }
  if (f_deepinfer >= 0) {
    sum["exp1"] = {{"F_deepinfer", f_deepinfer}, {"F_best_baseline", best_baseline},
                   {"band", {f_lo, f_hi}},
                   {"in_band", f_deepinfer >= f_lo && f_deepinfer <= f_hi},
                   {"above_every_baseline", f_deepinfer > best_baseline}};
  }
  sum["invariants_pass"] = inv_ok;
  if (!inv_ok) return absl::InternalError("sim: an invariant failed (see invariants.csv)");
  return absl::OkStatus();
}

}  // namespace deepinfer::sim
