// DeepSeek-V4 configuration read from a Hugging Face config.json (shared/spec/deepseek-v4.md §1).
// Every size comes from the file; nothing about V4-Flash is hard-coded.
#ifndef DEEPINFER_MODEL_DEEPSEEK_V4_CONFIG_H_
#define DEEPINFER_MODEL_DEEPSEEK_V4_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace deepinfer::model::dsv4 {

struct Config {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;     // D
  int64_t num_layers = 0;      // main layers (num_hidden_layers)
  // num_nextn_predict_layers: MTP modules in the checkpoint. All are loaded; drafting chains
  // mtp.0 on its own output (spec speculative.md §2.1: V4-Flash ships one module).
  int64_t num_mtp_layers = 0;
  int64_t num_heads = 0;       // H
  int64_t head_dim = 0;        // d (q, k, v, o per head)
  int64_t rope_dim = 0;        // qk_rope_head_dim: RoPE on the last rope_dim dims
  int64_t q_lora_rank = 0;
  int64_t o_groups = 0;
  int64_t o_lora_rank = 0;
  int64_t window = 0;  // sliding_window (includes the current token)
  // compress_ratios[i] for i < num_layers + num_mtp_layers (0 = SWA only, 4 = CSA with an
  // overlapping compressor and the indexer, other = HCA, non-overlapping).
  std::vector<int64_t> compress_ratios;
  double rope_theta = 10000;
  double compress_rope_theta = 160000;
  // YaRN (applied to ratio > 0 layers only). yarn_original_len <= 0: no YaRN.
  int64_t yarn_original_len = 0;
  double yarn_factor = 1;
  double yarn_beta_fast = 32;
  double yarn_beta_slow = 1;
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
  int64_t n_routed_experts = 0;
  int64_t n_active_experts = 0;  // num_experts_per_tok
  int64_t moe_inter = 0;         // moe_intermediate_size
  int64_t n_shared_experts = 0;
  int64_t num_hash_layers = 0;
  double route_scale = 1;   // routed_scaling_factor
  double swiglu_limit = 0;  // <= 0: no clamp
  int64_t hc_mult = 0;
  int64_t hc_sinkhorn_iters = 0;
  double hc_eps = 1e-6;
  double rms_eps = 1e-6;
  int64_t max_position_embeddings = 0;
  int32_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids;
  bool expert_fp4 = true;  // expert_dtype == "fp4"

  int64_t Ratio(int64_t layer) const { return compress_ratios[layer]; }
  // Layer ids 0..num_layers-1 are main layers; num_layers + j is MTP block j.
  int64_t TotalBlocks() const { return num_layers + num_mtp_layers; }

  // Parses config.json text. InvalidArgument naming `source` and the field for a missing or
  // ill-typed field, an unsupported value (scoring_func, hidden_act, n_shared_experts != 1,
  // num_key_value_heads != 1, hc_mult < 1) or inconsistent sizes (rope_dim > head_dim, a
  // compress ratio that does not divide 128, heads not divisible by o_groups, wrong number of
  // compress_ratios entries, dimensions that the FP8/FP4 block formats cannot tile).
  static absl::StatusOr<Config> Parse(std::string_view json_text, std::string_view source);
  // Serialises the official field names (inverse of Parse; used by make-test-model).
  std::string ToJson() const;
};

}  // namespace deepinfer::model::dsv4

#endif  // DEEPINFER_MODEL_DEEPSEEK_V4_CONFIG_H_
