// DeepSeek-V4.1 weights bound from the released checkpoint layout (shared/spec/deepseek-v41.md
// §2): names without a `model.` prefix, FP8 dense weights in 32x32 blocks (E8M0 or F32 scales),
// MXFP4 routed experts, FP8 Engram tables with per-32 E8M0 scales. Vision tensors (`vision.*`,
// `aligner.*`, `image_*`) are ignored with one log line.
//
// Every matrix is used in place from the mapping: FP8 in its BxB tiles (kernels::LinearFp8Blocks,
// bitwise the product with the dequantised matrix), MXFP4 experts, BF16. Every matrix is
// [out, in] (rows = outputs).
#ifndef DEEPINFER_MODEL_DEEPSEEK_V41_WEIGHTS_H_
#define DEEPINFER_MODEL_DEEPSEEK_V41_WEIGHTS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/linear_fp8_blocks.h"
#include "model/checkpoint.h"
#include "model/deepseek_v41_config.h"
#include "model/deepseek_v4_numerics.h"
#include "model/deepseek_v4_weights.h"

namespace deepinfer::model::dsv41 {

using dsv4::HcWeights;

// dsv4's in-place weight view plus V4.1's FP8 tiles. fp8_block > 0: e4m3 bytes [rows, cols] in
// `data` with one scale per fp8_block x fp8_block tile (`scale` E8M0 or `scale_f32`, scale_cols
// per tile row); `format` is then kFp8Block but the 128-tile dsv4 helpers (Linear, At) must not
// be used on it: V4.1's Lin and Fp8View below are.
struct WeightMatrix : dsv4::WeightMatrix {
  int64_t fp8_block = 0;
};

// The kernels' view of an FP8 WeightMatrix (fp8_block > 0).
kernels::Fp8BlocksView Fp8View(const WeightMatrix& m);
// Rows [row_begin, row_begin + count) of an FP8 WeightMatrix; row_begin a multiple of fp8_block.
WeightMatrix Fp8SliceRows(const WeightMatrix& m, int64_t row_begin, int64_t count);

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
  WeightMatrix comp_wkv;          // [d, D] BF16
  WeightMatrix comp_wgate;        // [d, D] BF16 (ratio 2 only)
  std::vector<float> comp_norm;   // [d]
  WeightMatrix idx_wk;            // [ID, d] BF16
  std::vector<float> idx_k_norm;  // [ID]
  // Index sources: own indexer query and head weights.
  WeightMatrix idx_wq_b;          // [IH*ID, q_lora]
  WeightMatrix idx_weights_proj;  // [IH, D] BF16
};

struct ExpertWeights41 {
  WeightMatrix w1, w2, w3;  // gate [I, D], down [D, I], up [I, D]
};

struct MoeWeights41 {
  WeightMatrix gate;           // [E, D]
  std::vector<float> bias;     // [E]
  std::vector<float> bias_vl;  // [E] (image tokens); = bias when absent
  int64_t top_k = 0;
  std::vector<ExpertWeights41> experts;
  ExpertWeights41 shared;
};

struct EngramWeights {
  const uint8_t* table = nullptr;        // [rows, head_dim] e4m3
  const uint8_t* table_scale = nullptr;  // [rows, head_dim/32] E8M0
  int64_t rows = 0;
  WeightMatrix wkv;      // [(hc+1)*D, columns*head_dim]
  std::vector<float> w;  // [hc, D]: q_weight[s] * k_weight[s] (FP32 product)
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
  WeightMatrix main_proj;        // [D, targets*D] (stage 0)
  std::vector<float> main_norm;  // [D]
  std::vector<float> norm;       // [D] (last stage)
  WeightMatrix markov_embed;     // [V, rank] BF16
  WeightMatrix markov_head;      // [V, rank] BF16
  WeightMatrix confidence;       // [1, D + rank] BF16
};

struct Weights41 {
  WeightMatrix embed;  // [V, D] BF16
  WeightMatrix head;   // [V, D] BF16
  std::vector<float> norm;
  std::vector<BlockWeights41> blocks;  // main layers, then DSpark stages
  bool has_dspark = false;
  DsparkWeights dspark;
  int64_t num_parameters = 0, weight_bytes = 0, active_bytes_per_token = 0;
  std::vector<std::unique_ptr<uint8_t[]>> owned;  // copies of misaligned tensors
  // Routed experts repacked at load for the CPU kernels (as DeepSeek-V4's, see
  // dsv4::TensorBinder::PackExpertLanes): anonymous memory beside the mapped checkpoint.
  std::vector<std::unique_ptr<kernels::Mxfp4LanePack>> lane_packs;
  int64_t lane_pack_bytes = 0;
};

// Binds every tensor of `cfg` in `ckpt`. `repack_experts`: also copy the routed MXFP4 experts
// into the kernels' lane layout where the kernels use it (false for a model that only runs the
// FP64 path). Errors: NotFound (missing tensor), InvalidArgument (wrong dtype or shape; names the
// tensor and file).
absl::StatusOr<std::unique_ptr<Weights41>> BindWeights41(const Config& cfg, const Checkpoint& ckpt,
                                                         bool repack_experts = true);

}  // namespace deepinfer::model::dsv41

#endif  // DEEPINFER_MODEL_DEEPSEEK_V41_WEIGHTS_H_
