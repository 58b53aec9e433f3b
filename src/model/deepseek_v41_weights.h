// DeepSeek-V4.1 weights bound from the released checkpoint layout (shared/spec/deepseek-v41.md
// §2): names without a `model.` prefix, FP8 dense weights in 32x32 blocks (E8M0 or F32 scales),
// MXFP4 routed experts, FP8 Engram tables with per-32 E8M0 scales. Vision tensors (`vision.*`,
// `aligner.*`, `image_*`) are ignored with one log line.
//
// FP8 32x32-block matrices are dequantised once at load into FP32 (exact: e4m3 x 2^k), because
// the kernels' FP8 path only knows 128x128 blocks; MXFP4 experts and BF16 matrices are used in
// place from the mapping. Every matrix is [out, in] (rows = outputs).
#ifndef DEEPINFER_MODEL_DEEPSEEK_V41_WEIGHTS_H_
#define DEEPINFER_MODEL_DEEPSEEK_V41_WEIGHTS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoint.h"
#include "model/deepseek_v41_config.h"
#include "model/deepseek_v4_numerics.h"
#include "model/deepseek_v4_weights.h"

namespace deepinfer::model::dsv41 {

using dsv4::HcWeights;
using dsv4::WeightMatrix;

struct AttentionWeights41 {
  std::vector<float> sink;     // [H] F32
  WeightMatrix wq_a;           // [q_lora, D]
  std::vector<float> q_norm;   // [q_lora]
  WeightMatrix wq_b;           // [H*d, q_lora]
  WeightMatrix wkv;            // [d, D]
  std::vector<float> kv_norm;  // [d]
  WeightMatrix wo_a;           // [G*o_lora, H*d/G] (BF16 einsum, no act quant)
  WeightMatrix wo_b;           // [D, G*o_lora]
  // KV sources (§2.3): compressor and index-key projection.
  WeightMatrix comp_wkv;        // [d, D] BF16
  WeightMatrix comp_wgate;      // [d, D] BF16 (ratio 2 only)
  std::vector<float> comp_norm; // [d]
  WeightMatrix idx_wk;          // [ID, d] BF16
  std::vector<float> idx_k_norm;  // [ID]
  // Index sources: own indexer query and head weights.
  WeightMatrix idx_wq_b;          // [IH*ID, q_lora]
  WeightMatrix idx_weights_proj;  // [IH, D] BF16
};

struct ExpertWeights41 {
  WeightMatrix w1, w2, w3;  // gate [I, D], down [D, I], up [I, D]
};

struct MoeWeights41 {
  WeightMatrix gate;            // [E, D]
  std::vector<float> bias;      // [E]
  std::vector<float> bias_vl;   // [E] (image tokens); = bias when absent
  int64_t top_k = 0;
  std::vector<ExpertWeights41> experts;
  ExpertWeights41 shared;
};

struct EngramWeights {
  const uint8_t* table = nullptr;        // [rows, head_dim] e4m3
  const uint8_t* table_scale = nullptr;  // [rows, head_dim/32] E8M0
  int64_t rows = 0;
  WeightMatrix wkv;                      // [(hc+1)*D, columns*head_dim]
  std::vector<float> w;                  // [hc, D]: q_weight[s] * k_weight[s] (FP32 product)
};

struct BlockWeights41 {
  HcWeights hc_attn, hc_ffn;
  std::vector<float> attn_norm, ffn_norm;
  AttentionWeights41 attn;
  MoeWeights41 ffn;
  bool has_engram = false;
  EngramWeights engram;
};

struct DsparkWeights {
  WeightMatrix main_proj;            // [D, targets*D] (stage 0)
  std::vector<float> main_norm;      // [D]
  std::vector<float> norm;           // [D] (last stage)
  WeightMatrix markov_embed;         // [V, rank] BF16
  WeightMatrix markov_head;          // [V, rank] BF16
  WeightMatrix confidence;           // [1, D + rank] BF16
};

struct Weights41 {
  WeightMatrix embed;  // [V, D] BF16
  WeightMatrix head;   // [V, D] BF16
  std::vector<float> norm;
  std::vector<BlockWeights41> blocks;  // main layers, then DSpark stages
  bool has_dspark = false;
  DsparkWeights dspark;
  int64_t num_parameters = 0, weight_bytes = 0, active_bytes_per_token = 0;
  std::vector<std::unique_ptr<float[]>> owned;  // dequantised FP8 matrices
};

// Binds every tensor of `cfg` in `ckpt`. Errors: NotFound (missing tensor), InvalidArgument
// (wrong dtype or shape; names the tensor and file).
absl::StatusOr<std::unique_ptr<Weights41>> BindWeights41(const Config& cfg, const Checkpoint& ckpt);

}  // namespace deepinfer::model::dsv41

#endif  // DEEPINFER_MODEL_DEEPSEEK_V41_WEIGHTS_H_
