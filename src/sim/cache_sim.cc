// Cache-only simulation (cluster.md SIM-5, EXP-2). See sim.h.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cluster/rng.h"
#include "common/status.h"
#include "sim/event_queue.h"
#include "sim/sim.h"
#include "sim/store_model.h"
#include "sim/workload.h"

namespace deepinfer::sim {
namespace {

constexpr int64_t kNsPerS = 1'000'000'000;
constexpr int64_t kNsPerDay = 86400 * kNsPerS;

enum EventKind { kChatArrival = 1, kAgentArrival, kTurn, kTrace, kGc };

struct Stream {
  TokenStream tokens;
  TrafficClass cls = kChat;
  int64_t len = 0;         // tokens in the context so far (prompt of the next turn)
  int64_t turns_left = 0;
};

struct Variant {
  std::unique_ptr<StoreModel> store;
  double chat_ttl_d = 0, agent_ttl_d = 0;
  // [class] measured totals; [day][class] daily.
  std::array<double, kNumClasses> prompt{}, hit{};
  std::vector<std::array<double, 2 * kNumClasses>> daily;
};

absl::Status ReadChat(const ConfigReader& r, ChatWorkloadConfig& c) {
  RETURN_IF_ERROR(r.RejectUnknown({"sessions_per_s", "turns_mean", "think_median_s",
                                   "templates", "template_median", "user_median", "doc_prob",
                                   "doc_median", "output_median", "p_resume", "resume_alpha",
                                   "resume_xmin_s", "resume_max_s"}));
  ASSIGN_OR_RETURN(c.sessions_per_s, r.Number("sessions_per_s", c.sessions_per_s, 0, 1e4));
  ASSIGN_OR_RETURN(c.turns_mean, r.Number("turns_mean", c.turns_mean, 1, 1000));
  ASSIGN_OR_RETURN(c.think_median_s, r.Number("think_median_s", c.think_median_s, 0, 1e7));
  ASSIGN_OR_RETURN(int64_t templates, r.Int("templates", c.templates, 1, 10'000'000));
  c.templates = static_cast<int>(templates);
  ASSIGN_OR_RETURN(c.template_median, r.Number("template_median", c.template_median, 1, 1e7));
  ASSIGN_OR_RETURN(c.user_median, r.Number("user_median", c.user_median, 1, 1e7));
  ASSIGN_OR_RETURN(c.doc_prob, r.Number("doc_prob", c.doc_prob, 0, 1));
  ASSIGN_OR_RETURN(c.doc_median, r.Number("doc_median", c.doc_median, 1, 1e7));
  ASSIGN_OR_RETURN(c.output_median, r.Number("output_median", c.output_median, 1, 1e6));
  ASSIGN_OR_RETURN(c.p_resume, r.Number("p_resume", c.p_resume, 0, 1));
  ASSIGN_OR_RETURN(c.resume_alpha, r.Number("resume_alpha", c.resume_alpha, 0.01, 100));
  ASSIGN_OR_RETURN(c.resume_xmin_s, r.Number("resume_xmin_s", c.resume_xmin_s, 1, 1e9));
  ASSIGN_OR_RETURN(c.resume_max_s, r.Number("resume_max_s", c.resume_max_s, 1, 1e9));
  return absl::OkStatus();
}

absl::Status ReadAgent(const ConfigReader& r, AgentWorkloadConfig& c) {
  RETURN_IF_ERROR(r.RejectUnknown({"trajectories_per_s", "templates", "initial_min",
                                   "initial_max", "turns_mean", "tool_result_median",
                                   "output_median", "tool_latency_median_s", "context_cap",
                                   "p_resume"}));
  ASSIGN_OR_RETURN(c.trajectories_per_s,
                   r.Number("trajectories_per_s", c.trajectories_per_s, 0, 1e4));
  ASSIGN_OR_RETURN(int64_t templates, r.Int("templates", c.templates, 1, 10'000'000));
  c.templates = static_cast<int>(templates);
  ASSIGN_OR_RETURN(c.initial_min, r.Int("initial_min", c.initial_min, 0, 1 << 24));
  ASSIGN_OR_RETURN(c.initial_max, r.Int("initial_max", c.initial_max, c.initial_min, 1 << 24));
  ASSIGN_OR_RETURN(c.turns_mean, r.Number("turns_mean", c.turns_mean, 1, 1e4));
  ASSIGN_OR_RETURN(c.tool_result_median,
                   r.Number("tool_result_median", c.tool_result_median, 1, 1e7));
  ASSIGN_OR_RETURN(c.output_median, r.Number("output_median", c.output_median, 1, 1e6));
  ASSIGN_OR_RETURN(c.tool_latency_median_s,
                   r.Number("tool_latency_median_s", c.tool_latency_median_s, 0, 1e6));
  ASSIGN_OR_RETURN(c.context_cap, r.Int("context_cap", c.context_cap, 1024, 1 << 26));
  ASSIGN_OR_RETURN(c.p_resume, r.Number("p_resume", c.p_resume, 0, 1));
  return absl::OkStatus();
}

int64_t Tokens(double x, int64_t lo, int64_t hi) {
  return std::clamp<int64_t>(static_cast<int64_t>(std::llround(x)), lo, hi);
}

// HIT-1: candidate blocks of a prompt of L tokens.
int64_t CandidateBlocks(int64_t L) { return L >= 262 ? (L - 134) / 128 : 0; }

}  // namespace

absl::Status RunCacheSim(const ConfigReader& root, Results& results) {
  RETURN_IF_ERROR(root.RejectUnknown({"mode", "seed", "duration_days", "warmup_days",
                                      "gc_interval_s", "store", "ttl_variants_days", "workload"}));
  ASSIGN_OR_RETURN(int64_t seed, root.Int("seed", 1, 0, INT64_MAX));
  ASSIGN_OR_RETURN(double duration_d, root.Number("duration_days", 28, 0.001, 3650));
  ASSIGN_OR_RETURN(double warmup_d, root.Number("warmup_days", 7, 0, duration_d));
  ASSIGN_OR_RETURN(double gc_s, root.Number("gc_interval_s", 3600, 1, 1e7));
  ASSIGN_OR_RETURN(ConfigReader store_r, root.Object("store"));
  RETURN_IF_ERROR(
      store_r.RejectUnknown({"capacity_tb", "block_bytes", "high_watermark", "low_watermark"}));
  StoreConfig sc;
  ASSIGN_OR_RETURN(double cap_tb, store_r.Number("capacity_tb", 1e6, 1e-9, 1e9));
  sc.capacity_bytes = static_cast<int64_t>(std::min(cap_tb * 1e12, 9e18));
  ASSIGN_OR_RETURN(sc.block_bytes, store_r.Int("block_bytes", sc.block_bytes, 1, 1 << 30));
  ASSIGN_OR_RETURN(sc.high_watermark, store_r.Number("high_watermark", 0.95, 0.01, 1));
  ASSIGN_OR_RETURN(sc.low_watermark, store_r.Number("low_watermark", 0.90, 0.0, sc.high_watermark));

  std::vector<Variant> variants;
  if (!root.Has("ttl_variants_days")) {
    variants.push_back({nullptr, 7, 3});
  } else {
    const auto& tv = (*root.raw())["ttl_variants_days"];
    if (!tv.is_array() || tv.empty()) {
      return absl::InvalidArgumentError("ttl_variants_days: expected a non-empty array of "
                                        "[chat_days, agent_days] pairs");
    }
    for (size_t i = 0; i < tv.size(); ++i) {
      if (!tv[i].is_array() || tv[i].size() != 2 || !tv[i][0].is_number() ||
          !tv[i][1].is_number() || tv[i][0].get<double>() <= 0 || tv[i][1].get<double>() <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ttl_variants_days[", i, "]: expected [chat_days, agent_days], both > 0"));
      }
      variants.push_back({nullptr, tv[i][0].get<double>(), tv[i][1].get<double>()});
    }
  }
  const int64_t days = static_cast<int64_t>(std::ceil(duration_d));
  for (Variant& v : variants) {
    StoreConfig c = sc;
    c.ttl_ns = {static_cast<int64_t>(v.chat_ttl_d * kNsPerDay),
                static_cast<int64_t>(v.agent_ttl_d * kNsPerDay)};
    v.store = std::make_unique<StoreModel>(c);
    v.daily.assign(days, {});
  }

  ASSIGN_OR_RETURN(ConfigReader wl, root.Object("workload"));
  RETURN_IF_ERROR(wl.RejectUnknown({"chat", "agent", "trace"}));
  ChatWorkloadConfig chat;
  AgentWorkloadConfig agent;
  ASSIGN_OR_RETURN(ConfigReader chat_r, wl.Object("chat"));
  ASSIGN_OR_RETURN(ConfigReader agent_r, wl.Object("agent"));
  if (wl.Has("trace")) chat.sessions_per_s = 0;  // a trace replaces the default chat load
  RETURN_IF_ERROR(ReadChat(chat_r, chat));
  RETURN_IF_ERROR(ReadAgent(agent_r, agent));
  ASSIGN_OR_RETURN(std::string trace_path, wl.String("trace", ""));
  std::vector<TraceRequest> trace;
  if (!trace_path.empty()) {
    ASSIGN_OR_RETURN(trace, ReadMooncakeTrace(trace_path));
  }

  const int64_t end_ns = static_cast<int64_t>(duration_d * kNsPerDay);
  const int64_t warm_ns = static_cast<int64_t>(warmup_d * kNsPerDay);
  cluster::Rng base(static_cast<uint64_t>(seed));
  cluster::Rng arrivals = base.Fork(1), turns = base.Fork(2);
  const ZipfTable chat_tpl(chat.templates, chat.template_zipf_s);
  const ZipfTable agent_tpl(agent.templates, agent.template_zipf_s);
  std::vector<Stream> streams;
  int64_t admitted = 0, completed = 0, dropped_after_end = 0, resumes = 0;
  std::array<int64_t, kNumClasses> requests{};

  EventQueue q;
  // Non-homogeneous Poisson by thinning: rate(t) = mean (1 + (p - 1) sin(2πt / day)).
  auto next_arrival = [&](double mean_rate, double peak) -> int64_t {
    const double max_rate = mean_rate * peak;
    int64_t t = q.now_ns();
    for (;;) {
      t += static_cast<int64_t>(arrivals.Exponential(1.0 / max_rate) * kNsPerS);
      const double rate = mean_rate * (1.0 + (peak - 1.0) * std::sin(6.283185307179586 *
                                                                     (t % kNsPerDay) / kNsPerDay));
      if (arrivals.Uniform() * max_rate <= rate) return t;
    }
  };
  if (chat.sessions_per_s > 0) {
    q.Push({next_arrival(chat.sessions_per_s, chat.diurnal_peak_to_mean), 0, 0, kChatArrival});
  }
  if (agent.trajectories_per_s > 0) {
    q.Push({next_arrival(agent.trajectories_per_s, 1.0), 0, 0, kAgentArrival});
  }
  if (!trace.empty()) q.Push({trace[0].arrival_ns, 0, 0, kTrace, 0});
  q.Push({static_cast<int64_t>(gc_s * kNsPerS), 1, 0, kGc});

  // `candidates` (HIT-1) is a prefix of `produced` (the prompt and output blocks persisted).
  auto serve = [&](TrafficClass cls, int64_t candidates, int64_t L,
                   std::span<const kv::BlockKey> produced) {
    const int64_t now = q.now_ns();
    ++admitted;
    ++requests[cls];
    const int64_t day = std::min<int64_t>(now / kNsPerDay, days - 1);
    for (Variant& v : variants) {
      // Cache-only fidelity: the request completes at arrival; prompt and output blocks are
      // persisted (decode engines write produced KV too [SEED]): the lookup, then the write.
      const int64_t m = v.store->LookupThenInsert(produced, candidates, cls, now);
      const double hit = 128.0 * m;
      if (now >= warm_ns) {
        v.prompt[cls] += L;
        v.hit[cls] += hit;
      }
      v.daily[day][cls] += L;
      v.daily[day][kNumClasses + cls] += hit;
    }
    ++completed;
  };

  auto new_turn = [&](size_t sid, int64_t at) {
    if (at >= end_ns) {
      ++dropped_after_end;
      return;
    }
    q.Push({at, 0, 0, kTurn, sid});
  };

  while (!q.empty()) {
    const Event e = q.Pop();
    const int64_t now = e.time_ns;
    if (e.kind == kGc) {
      for (Variant& v : variants) v.store->Gc(now);
      if (now + static_cast<int64_t>(gc_s * kNsPerS) < end_ns) {
        q.Push({now + static_cast<int64_t>(gc_s * kNsPerS), 1, 0, kGc});
      }
      continue;
    }
    if (e.kind == kChatArrival || e.kind == kAgentArrival) {
      const bool is_chat = e.kind == kChatArrival;
      Stream s;
      s.cls = is_chat ? kChat : kAgent;
      const int tpl = is_chat ? chat_tpl.Sample(turns) : agent_tpl.Sample(turns);
      const uint64_t tpl_seed = cluster::Mix64((is_chat ? 0x1000000ull : 0x2000000ull) + tpl);
      cluster::Rng tpl_rng(tpl_seed);  // a template's length depends only on its id
      s.tokens.seed = turns.Next();
      s.tokens.template_seed = tpl_seed;
      if (is_chat) {
        s.tokens.template_tokens = Tokens(tpl_rng.LogNormal(chat.template_median,
                                                            chat.template_sigma), 16, 200000);
        s.len = s.tokens.template_tokens +
                Tokens(turns.LogNormal(chat.user_median, chat.user_sigma), 1, 200000);
        if (turns.Uniform() < chat.doc_prob) {
          s.len += Tokens(turns.LogNormal(chat.doc_median, chat.doc_sigma), 1, 1 << 20);
        }
        s.turns_left = std::min<int64_t>(turns.Geometric(chat.turns_mean), chat.turns_cap);
      } else {
        s.tokens.template_tokens =
            agent.initial_min +
            static_cast<int64_t>(tpl_rng.Below(agent.initial_max - agent.initial_min + 1));
        s.len = s.tokens.template_tokens + 64;  // + the task statement
        s.turns_left = turns.Geometric(agent.turns_mean);
      }
      streams.push_back(std::move(s));
      new_turn(streams.size() - 1, now);
      const int64_t next = is_chat ? next_arrival(chat.sessions_per_s, chat.diurnal_peak_to_mean)
                                   : next_arrival(agent.trajectories_per_s, 1.0);
      if (next < end_ns) q.Push({next, 0, 0, e.kind});
      continue;
    }
    if (e.kind == kTrace) {
      const TraceRequest& r = trace[e.a];
      if (now < end_ns) {
        std::vector<kv::BlockKey> keys = MooncakeKeys(r.hash_ids, r.input_length);
        const int64_t cand = std::min<int64_t>(CandidateBlocks(r.input_length), keys.size());
        serve(static_cast<TrafficClass>(r.cls), cand, r.input_length, keys);
        if (e.a + 1 < trace.size()) q.Push({trace[e.a + 1].arrival_ns, 0, 0, kTrace, e.a + 1});
      } else {
        dropped_after_end += trace.size() - e.a;
      }
      continue;
    }
    // kTurn.
    Stream& s = streams[e.a];
    const bool is_chat = s.cls == kChat;
    const int64_t L = s.len;
    const int64_t out = is_chat
        ? Tokens(turns.LogNormal(chat.output_median, chat.output_sigma), 1, chat.output_cap)
        : Tokens(turns.LogNormal(agent.output_median, agent.output_sigma), 1, 1 << 16);
    const int64_t produced_blocks = (L + out) / 128;
    std::span<const kv::BlockKey> keys = StreamKeys(s.tokens, produced_blocks);
    serve(s.cls, std::min<int64_t>(CandidateBlocks(L), produced_blocks), L, keys);
    s.len = L + out;
    --s.turns_left;
    int64_t next_at = -1;
    if (s.turns_left > 0) {
      if (is_chat) {
        s.len += Tokens(turns.LogNormal(chat.user_median, chat.user_sigma), 1, 200000);
        if (turns.Uniform() < chat.doc_prob) {
          s.len += Tokens(turns.LogNormal(chat.doc_median, chat.doc_sigma), 1, 1 << 20);
        }
        next_at = now + static_cast<int64_t>(
                            turns.LogNormal(chat.think_median_s, chat.think_sigma) * kNsPerS);
      } else {
        s.len += Tokens(turns.LogNormal(agent.tool_result_median, agent.tool_result_sigma), 1,
                        1 << 20);
        next_at = now + static_cast<int64_t>(turns.LogNormal(agent.tool_latency_median_s,
                                                             agent.tool_latency_sigma) *
                                             kNsPerS);
        if (s.len >= agent.context_cap) next_at = -1;
      }
    } else {
      // WL-2 / WL-3 resume: the user comes back after a Pareto gap and resends the history.
      const double p = is_chat ? chat.p_resume : agent.p_resume;
      if (turns.Uniform() < p) {
        const double gap = is_chat ? turns.Pareto(chat.resume_alpha, chat.resume_xmin_s)
                                   : turns.Pareto(agent.resume_alpha, agent.resume_xmin_s);
        const double max_gap = is_chat ? chat.resume_max_s : agent.resume_max_s;
        if (gap <= max_gap) {
          ++resumes;
          s.turns_left = is_chat ? std::min<int64_t>(turns.Geometric(chat.turns_mean),
                                                     chat.turns_cap)
                                 : turns.Geometric(agent.turns_mean);
          s.len += is_chat ? Tokens(turns.LogNormal(chat.user_median, chat.user_sigma), 1, 200000)
                           : 64;
          next_at = now + static_cast<int64_t>(gap * kNsPerS);
        }
      }
    }
    if (next_at >= 0) {
      new_turn(e.a, next_at);
    } else {
      s.tokens.keys = {};  // the stream ends: free its memo
      s.tokens.keys.shrink_to_fit();
    }
  }

  // Outputs.
  const char* kClass[kNumClasses] = {"chat", "agent"};
  results.Table("hit_rate", {"variant", "chat_ttl_days", "agent_ttl_days", "class",
                             "prompt_tokens", "hit_tokens", "hit_rate"});
  results.Table("hit_rate_daily", {"day", "variant", "class", "hit_rate"});
  results.Table("store", {"variant", "inserted_blocks", "evicted_lru", "expired_ttl",
                          "resident_blocks", "used_bytes", "oldest_age_hours",
                          "youngest_lru_victim_age_hours", "capacity_limited"});
  results.Table("invariants", {"name", "pass", "detail"});
  nlohmann::json& sum = results.summary();
  sum["mode"] = "cache";
  sum["seed"] = seed;
  sum["requests"] = {{"chat", requests[kChat]}, {"agent", requests[kAgent]}};
  sum["resumes"] = resumes;
  sum["cost_model"] = "none (cache-only fidelity: requests complete at arrival)";
  bool ok = true;
  for (size_t i = 0; i < variants.size(); ++i) {
    Variant& v = variants[i];
    for (int c = 0; c < kNumClasses; ++c) {
      const double rate = v.prompt[c] > 0 ? v.hit[c] / v.prompt[c] : 0.0;
      results.Row("hit_rate", {absl::StrCat(i), Fmt(v.chat_ttl_d), Fmt(v.agent_ttl_d), kClass[c],
                               absl::StrCat(static_cast<int64_t>(v.prompt[c])),
                               absl::StrCat(static_cast<int64_t>(v.hit[c])), Fmt(rate)});
      sum["variants"][i]["hit_rate"][kClass[c]] = rate;
    }
    sum["variants"][i]["ttl_days"] = {v.chat_ttl_d, v.agent_ttl_d};
    for (int64_t d = 0; d < days; ++d) {
      for (int c = 0; c < kNumClasses; ++c) {
        const double p = v.daily[d][c];
        results.Row("hit_rate_daily", {absl::StrCat(d), absl::StrCat(i), kClass[c],
                                       Fmt(p > 0 ? v.daily[d][kNumClasses + c] / p : 0.0)});
      }
    }
    const StoreStats& st = v.store->stats();
    const int64_t oldest = v.store->OldestAgeNs(end_ns);
    // OUT-4: retention limited by capacity when LRU evicted blocks younger than the TTL.
    const bool cap_limited =
        st.evicted_lru > 0 &&
        st.min_lru_victim_age_ns < std::min(v.store->config().ttl_ns[0], v.store->config().ttl_ns[1]);
    results.Row("store", {absl::StrCat(i), absl::StrCat(st.inserted), absl::StrCat(st.evicted_lru),
                          absl::StrCat(st.expired_ttl), absl::StrCat(v.store->resident_blocks()),
                          absl::StrCat(v.store->used_bytes()), Fmt(oldest / 3.6e12),
                          Fmt(st.min_lru_victim_age_ns < 0 ? 0 : st.min_lru_victim_age_ns / 3.6e12),
                          cap_limited ? "1" : "0"});
    sum["variants"][i]["capacity_limited"] = cap_limited;
    const absl::Status inv = v.store->CheckInvariants();
    results.Row("invariants", {absl::StrCat("blocks_accounted_variant_", i), inv.ok() ? "1" : "0",
                               inv.ok() ? "inserted=resident+evicted_lru+expired_ttl"
                                        : std::string(inv.message())});
    ok = ok && inv.ok();
  }
  // INV-1 conservation (admitted = completed + in flight; nothing is in flight at the end).
  const bool conserved = admitted == completed;
  results.Row("invariants", {"requests_conserved", conserved ? "1" : "0",
                             absl::StrCat("admitted=", admitted, " completed=", completed,
                                          " not_admitted_after_end=", dropped_after_end)});
  // INV-8: the event queue drained.
  results.Row("invariants", {"drained", q.empty() ? "1" : "0", "event queue empty at end"});
  results.Row("invariants", {"clock_monotonic", "1", "CHECKed on every pop (INV-3)"});
  ok = ok && conserved && q.empty();
  sum["invariants_pass"] = ok;
  if (!ok) return absl::InternalError("sim: an invariant failed (see invariants.csv)");
  return absl::OkStatus();
}

}  // namespace deepinfer::sim
