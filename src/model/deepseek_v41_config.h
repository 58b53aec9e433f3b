// DeepSeek-V4.1-Flash configuration (shared/spec/deepseek-v41.md §1): the text fields of the
// released nested config.json (`text_config`, §1.1; the flat inference/config.json spelling is
// accepted as a fallback) and the per-layer roles derived from them (§1.2).
#ifndef DEEPINFER_MODEL_DEEPSEEK_V41_CONFIG_H_
#define DEEPINFER_MODEL_DEEPSEEK_V41_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace deepinfer::model::dsv41 {

// Attention role of one block (§1.2).
enum class Role {
  kSwa,      // compress ratio 0: sliding window only
  kFull,     // KV source: compressor + index keys, scores its own keys
  kReindex,  // index source that is not a KV source: own indexer on the latest KV source's keys
  kReuse,    // selections of the latest index source, rows of the latest KV source
};

struct LayerRole {
  Role role = Role::kSwa;
  int64_t ratio = 0;         // compress ratio (0, 1, 2)
  int64_t kv_source = -1;    // layer whose compressed rows / index keys this layer reads
  int64_t index_source = -1; // layer whose top-k this layer uses (itself for Full / Reindex)
  bool candidate_source = false;  // publishes candidate blocks
  bool candidate_masked = false;  // index source after the candidate source
  bool engram = false;
};

struct Config {
  std::string source;  // path of the parsed file (error messages)
  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0;
  int64_t num_heads = 0, head_dim = 0, rope_dim = 0;
  int64_t q_lora_rank = 0, o_groups = 0, o_lora_rank = 0;
  int64_t moe_inter = 0, n_routed_experts = 0, n_active_experts = 0, n_shared_experts = 0;
  double route_scale = 1.0, swiglu_limit = 0.0, rms_eps = 1e-20, gate_temp = 1.0;
  int64_t window = 0;
  double rope_theta = 10000, compress_rope_theta = 160000;
  int64_t yarn_original_len = 0;
  double yarn_factor = 1, yarn_beta_fast = 32, yarn_beta_slow = 1;
  std::vector<int64_t> compress_ratios;  // num_layers + num_dspark_layers entries
  std::vector<int64_t> kv_source_layers, index_source_layers;
  int64_t index_n_heads = 0, index_head_dim = 0, index_topk = 0;
  int64_t candidate_source_layer = -1, candidate_topk_blocks = 0, candidate_block_size = 1;
  int64_t hc_mult = 4, hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  std::vector<int64_t> engram_layer_ids, engram_num_embeddings;
  int64_t engram_max_ngram = 0, engram_vocab_size = 0, engram_n_heads = 0, engram_head_dim = 0;
  int64_t engram_pad_token_id = 0, engram_compressed_vocab = 0;
  int64_t num_dspark_layers = 0, dspark_block_size = 0, dspark_noise_token_id = 0;
  std::vector<int64_t> dspark_target_layers;
  int64_t dspark_markov_rank = 0, dspark_n_routed_experts = 0, dspark_n_active_experts = 0;
  int64_t max_position_embeddings = 0;
  int64_t image_token_id = -1;
  int32_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids;
  bool expert_fp4 = true;
  int64_t fp8_block = 32;  // quantization_config.weight_block_size (square)
  bool has_vision = false;

  // Roles of blocks 0 .. num_layers + num_dspark_layers - 1 (DSpark stages are SWA).
  std::vector<LayerRole> roles;

  int64_t TotalBlocks() const { return num_layers + num_dspark_layers; }
  // The last KV source (the YOCO encoder/decoder boundary, §7); -1 when there is none.
  int64_t LastKvSource() const {
    return kv_source_layers.empty() ? -1 : kv_source_layers.back();
  }
  // Encoder layers whose windows form the stored state region (§7): [0, LastKvSource()).
  int64_t NumEncoderLayers() const { return LastKvSource() < 0 ? num_layers : LastKvSource(); }

  // Parses config.json text (nested with `text_config`, or the flat inference/config.json
  // names). InvalidArgument naming `source` and the field on a missing / inconsistent field.
  static absl::StatusOr<Config> Parse(const std::string& text, const std::string& source);
};

}  // namespace deepinfer::model::dsv41

#endif  // DEEPINFER_MODEL_DEEPSEEK_V41_CONFIG_H_
