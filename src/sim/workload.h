// Workload models of the simulator (cluster.md §6.2 WL-1..WL-3, SIM-6) and Mooncake trace
// replay, producing prompts whose block keys come from the real key chain (kv/block_hash.h).
//
// Token content: a prompt is a prefix of a token *stream*. Block i of a stream holds 128 token
// ids derived from (stream seed, i) by Mix64, except blocks lying wholly inside the stream's
// shared template (system prompt / agent tools), which come from the template's seed, so
// streams with the same template share those blocks. Keys are then the real chain
// kv::ComputeBlockKey(parent, salt 0, layout id, tokens), memoized per stream.
//
// Thread-safety: single-threaded.
#ifndef DEEPINFER_SIM_WORKLOAD_H_
#define DEEPINFER_SIM_WORKLOAD_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cluster/rng.h"
#include "kv/block_hash.h"

namespace deepinfer::sim {

// Layout id used for simulated keys (any fixed value; only equality matters).
inline constexpr uint64_t kSimLayoutId = 0x53494D0000000001ull;

// A token stream: the growing context of one chat session or agent trajectory.
struct TokenStream {
  uint64_t seed = 0;
  uint64_t template_seed = 0;
  int64_t template_tokens = 0;      // shared prefix length (tokens)
  std::vector<kv::BlockKey> keys;   // memoized chain, keys[i] = key of block i
};

// Keys of blocks [0, num_blocks) of `stream` (extends the memo as needed).
std::span<const kv::BlockKey> StreamKeys(TokenStream& stream, int64_t num_blocks);

// Keys of a Mooncake-format request: each hash id stands for 512 tokens = 4 of our blocks, whose
// tokens are derived from (hash id, sub-block); the chain covers floor(input_length / 128)
// blocks (at most 4 x hash_ids.size()).
std::vector<kv::BlockKey> MooncakeKeys(std::span<const int64_t> hash_ids, int64_t input_length);

// WL-1/WL-2 chat sessions.
struct ChatWorkloadConfig {
  double sessions_per_s = 0.01;      // mean session arrival rate
  double diurnal_peak_to_mean = 1.25;
  double turns_mean = 4;
  int turns_cap = 50;
  double think_median_s = 60, think_sigma = 1.0;
  int templates = 5000;
  double template_zipf_s = 1.1;
  double template_median = 1500, template_sigma = 1.0;
  double user_median = 200, user_sigma = 1.2;
  double doc_prob = 0.1, doc_median = 20000, doc_sigma = 1.0;
  double output_median = 400, output_sigma = 0.9;
  int64_t output_cap = 8192;
  double p_resume = 0.1;             // WL-2, calibrated by EXP-2
  double resume_alpha = 1.1, resume_xmin_s = 3600, resume_max_s = 30 * 86400.0;
};

// WL-3 agent trajectories (sub-agent fan-out not modelled).
struct AgentWorkloadConfig {
  double trajectories_per_s = 0.0;
  int templates = 200;
  double template_zipf_s = 1.1;
  int64_t initial_min = 8192, initial_max = 40960;
  double turns_mean = 30;
  double tool_result_median = 1500, tool_result_sigma = 1.0;
  double output_median = 300, output_sigma = 0.9;
  double tool_latency_median_s = 2, tool_latency_sigma = 1.0;
  int64_t context_cap = 1 << 20;
  double p_resume = 0.01;
  double resume_alpha = 1.1, resume_xmin_s = 86400, resume_max_s = 30 * 86400.0;
};

// Zipf(s) over [0, n) by inversion of a precomputed CDF.
class ZipfTable {
 public:
  ZipfTable(int n, double s);
  int Sample(cluster::Rng& rng) const;

 private:
  std::vector<double> cdf_;
};

// One Mooncake trace line.
struct TraceRequest {
  int64_t arrival_ns = 0;
  int64_t input_length = 0;
  int64_t output_length = 0;
  std::vector<int64_t> hash_ids;
  int cls = 0;  // 0 chat, 1 agent ("class" field if present)
};

// Reads a Mooncake JSONL trace (one object per line: timestamp in ms, input_length,
// output_length, hash_ids; optional "class": "chat" | "agent"). Errors: NotFound for a missing
// file; InvalidArgument naming the line and field for a bad line.
absl::StatusOr<std::vector<TraceRequest>> ReadMooncakeTrace(const std::string& path);

}  // namespace deepinfer::sim

#endif  // DEEPINFER_SIM_WORKLOAD_H_
