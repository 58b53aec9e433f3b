// Random-weight Llama checkpoints in the Hugging Face layout (LlamaForCausalLM: config.json,
// model.safetensors, generation_config.json) for benchmarks that must be rerunnable on any
// machine without downloading weights (issue #30: the "1b" preset is the 1.1B-class model of the
// CPU figures). Weights are deterministic functions of (seed, tensor name, row chunk), so the
// file does not depend on the thread count, and are scaled so residual streams stay O(1) through
// all layers (linears ~ 1/sqrt(fan_in), output projections further by 1/sqrt(2 layers)).
#ifndef DEEPINFER_MODEL_LLAMA_MAKE_TEST_MODEL_H_
#define DEEPINFER_MODEL_LLAMA_MAKE_TEST_MODEL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace deepinfer::model::llama_test_model {

// The shape of a generated Llama. Every weight is written in BF16.
struct LlamaTestConfig {
  int64_t vocab_size = 512;
  int64_t hidden_size = 2048;
  int64_t intermediate_size = 5632;
  int64_t num_hidden_layers = 22;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 4;
  int64_t max_position_embeddings = 2048;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  int32_t bos_token_id = 1;
  int32_t eos_token_id = 2;

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  // Parameters of every tensor written (embedding and untied lm_head included).
  int64_t NumParameters() const;
  // config.json text (Hugging Face LlamaConfig field names, torch_dtype bfloat16).
  std::string ToJson() const;
};

// Named presets (the vocabulary is stories260K's 512 ids; its tokenizer is copied alongside):
//   "1b"   - dim 2048, 22 layers, 32 query / 4 KV heads, FFN 5632 (TinyLlama-1.1B's body)
//   "tiny" - dim 64, 2 layers, 4 query / 2 KV heads, FFN 160 (tests of the same code path)
// NotFound for an unknown name (the message lists the presets).
absl::StatusOr<LlamaTestConfig> LlamaTestPreset(const std::string& name);

// Writes config.json, generation_config.json and model.safetensors into `dir` (created), the
// tensors generated one at a time while the file is written (peak memory ~ the largest tensor,
// not the checkpoint), on up to `threads` threads. When `tokenizer_dir` is not empty its
// tokenizer files (tokenizer.json, tokenizer.model, tokenizer_config.json,
// special_tokens_map.json; those present) are copied into `dir`.
// Errors: InvalidArgument when `config` is inconsistent (heads not dividing) or a file cannot be
// written; NotFound when `tokenizer_dir` has no tokenizer.json.
absl::Status WriteLlamaTestModel(const LlamaTestConfig& config, uint64_t seed,
                                 const std::string& tokenizer_dir, const std::string& dir,
                                 int threads = 4);

}  // namespace deepinfer::model::llama_test_model

#endif  // DEEPINFER_MODEL_LLAMA_MAKE_TEST_MODEL_H_
