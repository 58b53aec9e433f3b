#include "sim/sim.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"

namespace deepinfer::sim {
namespace {

std::string TmpDir(const std::string& name) {
  const std::string d = std::string(::testing::TempDir()) + "/deepinfer_sim_" + name;
  std::filesystem::remove_all(d);
  return d;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json Summary(const std::string& dir) {
  return nlohmann::json::parse(Slurp(dir + "/summary.json"));
}

// Reduced EXP-2: 2 days, TTL 6 h vs 1 day on the same request stream. With unlimited capacity
// a longer TTL (from last access) keeps a superset of blocks, so hit rates are monotone.
const char* kCacheSmoke = R"({
  "mode": "cache", "seed": 3, "duration_days": 2, "warmup_days": 0.5, "gc_interval_s": 1800,
  "ttl_variants_days": [[0.25, 0.25], [1, 1]],
  "workload": {
    "chat": {"sessions_per_s": 0.01, "templates": 50, "p_resume": 0.5, "resume_xmin_s": 600},
    "agent": {"trajectories_per_s": 0.0005, "turns_mean": 5, "initial_max": 16384}
  }
})";

TEST(SimTest, CacheSmokeInvariantsAndMonotoneTtl) {
  const std::string dir = TmpDir("cache");
  ASSERT_TRUE(RunSimulation(kCacheSmoke, dir).ok());
  const nlohmann::json s = Summary(dir);
  EXPECT_TRUE(s["invariants_pass"].get<bool>());
  const double chat_short = s["variants"][0]["hit_rate"]["chat"];
  const double chat_long = s["variants"][1]["hit_rate"]["chat"];
  EXPECT_GT(chat_short, 0.05);
  EXPECT_LT(chat_long, 1.0);
  EXPECT_GE(chat_long, chat_short);
  EXPECT_GE(s["variants"][1]["hit_rate"]["agent"].get<double>(),
            s["variants"][0]["hit_rate"]["agent"].get<double>());
  for (const char* f : {"hit_rate.csv", "hit_rate_daily.csv", "store.csv", "invariants.csv"}) {
    EXPECT_TRUE(std::filesystem::exists(dir + "/" + f)) << f;
  }
}

TEST(SimTest, SameConfigAndSeedGiveByteIdenticalOutput) {  // SIM-3 / INV-6
  const std::string a = TmpDir("det_a"), b = TmpDir("det_b");
  std::string cfg = kCacheSmoke;  // one day instead of two: the same code paths, less time
  cfg.replace(cfg.find("\"duration_days\": 2"), 18, "\"duration_days\": 1");
  ASSERT_TRUE(RunSimulation(cfg, a).ok());
  ASSERT_TRUE(RunSimulation(cfg, b).ok());
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(a)) {
    const std::string name = e.path().filename().string();
    EXPECT_EQ(Slurp(a + "/" + name), Slurp(b + "/" + name)) << name;
    ++files;
  }
  EXPECT_GE(files, 5);
  // A different seed changes the output.
  std::string other = cfg;
  other.replace(other.find("\"seed\": 3"), 9, "\"seed\": 4");
  const std::string c = TmpDir("det_c");
  ASSERT_TRUE(RunSimulation(other, c).ok());
  EXPECT_NE(Slurp(a + "/hit_rate.csv"), Slurp(c + "/hit_rate.csv"));
}

TEST(SimTest, MooncakeTraceReplay) {
  const std::string dir = TmpDir("trace");
  std::filesystem::create_directories(dir);
  const std::string trace = dir + "/trace.jsonl";
  {
    std::ofstream t(trace);
    // Request 2 shares hash ids [1, 2] (= 8 of our blocks, 1,024 tokens) with request 1.
    t << R"({"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2]})"
      << "\n";
    t << R"({"timestamp": 1000, "input_length": 1536, "output_length": 10, "hash_ids": [1, 2, 3]})"
      << "\n";
  }
  const std::string cfg = R"({"mode": "cache", "duration_days": 1, "warmup_days": 0,
    "workload": {"trace": ")" + trace + R"("}})";
  ASSERT_TRUE(RunSimulation(cfg, dir + "/out").ok());
  const nlohmann::json s = Summary(dir + "/out");
  // Hit 1,024 of 1,024 + 1,536 prompt tokens.
  EXPECT_DOUBLE_EQ(s["variants"][0]["hit_rate"]["chat"].get<double>(), 1024.0 / 2560.0);
  {
    std::ofstream t(trace);
    t << R"({"timestamp": 0, "input_length": "x", "output_length": 1, "hash_ids": []})" << "\n";
  }
  const absl::Status bad = RunSimulation(cfg, dir + "/out2");
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("input_length"), std::string::npos) << bad.message();
}

TEST(SimTest, BadConfigNamesTheField) {
  const std::string dir = TmpDir("bad");
  auto msg = [&](const std::string& cfg) {
    absl::Status s = RunSimulation(cfg, dir);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << cfg;
    return std::string(s.message());
  };
  EXPECT_NE(msg("{}").find("mode"), std::string::npos);
  EXPECT_NE(msg("[1]").find("object"), std::string::npos);
  EXPECT_NE(msg(R"({"mode": "cache", "workload": {"chat": {"p_resume": 2}}})")
                .find("workload.chat.p_resume"),
            std::string::npos);
  EXPECT_NE(msg(R"({"mode": "cache", "store": {"capacity": 1}})").find("store.capacity"),
            std::string::npos);
  EXPECT_NE(msg(R"({"mode": "cache", "ttl_variants_days": [[3]]})").find("ttl_variants_days[0]"),
            std::string::npos);
  EXPECT_NE(msg(R"({"mode": "eplb", "steps": 10, "period": 100})").find("steps"),
            std::string::npos);
  EXPECT_EQ(RunSimulation(R"({"mode": "cache", "workload": {"trace": "/nonexistent.jsonl"}})", dir)
                .code(),
            absl::StatusCode::kNotFound);
}

// Reduced EPLB benchmark (expert-parallel.md §4.4 CI criteria on prefill EP4): EPLB moe_lb <=
// 1.10 and >= 50% lower excess than no EPLB; the oracle <= 1.02.
TEST(SimTest, EplbSmokePrefillEp4) {
  const std::string dir = TmpDir("eplb");
  const char* cfg = R"({"mode": "eplb", "role": "prefill", "ep": 4, "layers": 2, "steps": 400,
                        "window": 50, "period": 100, "tokens_per_rank": 1024, "seed": 5})";
  ASSERT_TRUE(RunSimulation(cfg, dir).ok());
  const nlohmann::json s = Summary(dir);
  const double none = s["moe_lb"]["no_eplb"], eplb = s["moe_lb"]["eplb"];
  const double oracle = s["moe_lb"]["oracle"];
  EXPECT_EQ(s["slots_per_rank"].get<int>(), 100);
  EXPECT_LE(eplb, 1.10);
  EXPECT_LE(eplb - 1.0, 0.5 * (none - 1.0));
  EXPECT_LE(oracle, 1.02);
  EXPECT_LE(oracle, eplb);
}

}  // namespace
}  // namespace deepinfer::sim
