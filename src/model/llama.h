// Llama (Hugging Face `LlamaForCausalLM`): typed config and the CausalLM implementation.
//
// Architecture (transformers models/llama/modeling_llama.py): token embedding; per layer
//   h = x + o_proj(Attn(RoPE(q_proj(RMSNorm(x))), RoPE(k_proj(·)), v_proj(·)))
//   x = h + down_proj(silu(gate_proj(RMSNorm(h))) * up_proj(RMSNorm(h)))
// final RMSNorm and lm_head (or the embedding matrix when tie_word_embeddings). RoPE is HF's
// rotate_half form (dims i and i + head_dim/2 pair up); grouped-query attention maps query head
// h to kv head h / (num_heads / num_kv_heads); scale 1/sqrt(head_dim). Activations are FP32.
//
// KV layout (ARCHITECTURE.md §4): per layer L two paged caches "layers.L.k" and "layers.L.v",
// rows_per_block = kBlockTokens, row = num_kv_heads * head_dim float32 (post-RoPE K, V). No
// per-sequence state.
#ifndef DEEPINFER_MODEL_LLAMA_H_
#define DEEPINFER_MODEL_LLAMA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoint.h"
#include "model/hf_config.h"
#include "model/model.h"

namespace deepinfer::model {

// config.json "rope_scaling" kinds supported for Llama.
enum class RopeScalingKind {
  kNone,    // null, or rope_type "default"
  kLinear,  // positions divided by `factor` (= frequencies divided by factor)
  kLlama3,  // Llama 3.1 wavelength-dependent scaling (low/high_freq_factor, original context)
};

struct LlamaRopeScaling {
  RopeScalingKind kind = RopeScalingKind::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;                  // llama3
  double high_freq_factor = 4.0;                 // llama3
  int64_t original_max_position_embeddings = 0;  // llama3
};

// The fields of a Llama config.json the forward needs (names as in transformers LlamaConfig).
struct LlamaConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // defaults to num_attention_heads
  int64_t head_dim = 0;             // defaults to hidden_size / num_attention_heads
  int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;
  LlamaRopeScaling rope_scaling;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  bool mlp_bias = false;
  int32_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids;
};

// Parses and validates a Llama config. InvalidArgument naming the key for missing / mistyped /
// inconsistent values (e.g. heads not divisible by kv heads, odd head_dim); Unimplemented for an
// unsupported hidden_act or rope_scaling type (the message lists the supported ones).
absl::StatusOr<LlamaConfig> ParseLlamaConfig(const HfConfig& config);

// RoPE inverse frequencies [head_dim / 2] for the config's rope_theta and rope_scaling
// (transformers modeling_rope_utils: _compute_default/linear/llama3_parameters), in double.
std::vector<double> LlamaRopeFrequencies(const LlamaConfig& config);

// Loads a Llama checkpoint directory (config.json + safetensors). Weights stay memory-mapped
// (F32 or BF16, used in place). Activations are always FP32, so options.fp32_activations has
// no effect; options.show_progress logs mapping progress, parameter count and memory.
// Errors: NotFound (missing file or tensor, naming it), InvalidArgument (wrong dtype/shape,
// naming the tensor and file), Unimplemented (unsupported weight dtype), plus
// ParseLlamaConfig's.
absl::StatusOr<std::unique_ptr<CausalLM>> LoadLlama(const std::string& dir,
                                                    const LoadOptions& options);

}  // namespace deepinfer::model

#endif  // DEEPINFER_MODEL_LLAMA_H_
