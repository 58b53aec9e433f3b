// DeepSeek-V4 weights bound to a checkpoint in the official layout (shared/spec/deepseek-v4.md
// §2.3): reference tensor names without a "model." prefix, FP8 e4m3 + E8M0 128x128 block scales,
// packed MXFP4 routed experts, BF16/F32 side tensors, I64 tid2eid. Large matrices stay in the
// memory-mapped checkpoint (WeightMatrix views); small vectors (norms, HC params, sinks, ape,
// biases, tid2eid) are copied to FP32/int32.
#ifndef DEEPINFER_MODEL_DEEPSEEK_V4_WEIGHTS_H_
#define DEEPINFER_MODEL_DEEPSEEK_V4_WEIGHTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/ops.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4_config.h"
#include "model/deepseek_v4_numerics.h"

namespace deepinfer::model::dsv4 {

// mHC parameters of one site (spec §3.2): fn [(2+n)*n, n*D], base [(2+n)*n], scale [3]; for an
// HC head (spec §3.8): fn [n, n*D], base [n], scale [1].
struct HcWeights {
  std::vector<float> fn;
  std::vector<float> base;
  std::vector<float> scale;
};

// Compressor of one compressed layer or of an indexer (spec §3.6.1).
struct CompressorWeights {
  int64_t ratio = 0;        // m
  int64_t width = 0;        // c (output row width)
  int64_t coff = 1;         // 2 when overlapping (m == 4)
  std::vector<float> ape;   // [m, coff*c]
  WeightMatrix wkv;         // [coff*c, D] BF16
  WeightMatrix wgate;       // [coff*c, D] BF16
  std::vector<float> norm;  // [c]
};

struct AttentionWeights {
  std::vector<float> sink;     // [H]
  WeightMatrix wq_a;           // [q_lora, D] FP8
  std::vector<float> q_norm;   // [q_lora]
  WeightMatrix wq_b;           // [H*d, q_lora] FP8
  WeightMatrix wkv;            // [d, D] FP8
  std::vector<float> kv_norm;  // [d]
  WeightMatrix wo_a;           // [groups*o_lora, H*d/groups] FP8 (used without act quant)
  WeightMatrix wo_b;           // [D, groups*o_lora] FP8
  bool has_compressor = false;
  CompressorWeights compressor;  // c = d
  bool has_indexer = false;
  WeightMatrix idx_wq_b;             // [IH*ID, q_lora] FP8
  WeightMatrix idx_weights_proj;     // [IH, D] BF16
  CompressorWeights idx_compressor;  // c = ID
};

struct ExpertWeights {
  WeightMatrix w1, w2, w3;  // gate [I, D], down [D, I], up [I, D]
};

struct MoeWeights {
  bool hash = false;
  WeightMatrix gate;             // [E, D] BF16 or F32
  std::vector<float> bias;       // [E] (score-routed layers)
  std::vector<int32_t> tid2eid;  // [vocab, k] (hash layers)
  std::vector<ExpertWeights> experts;
  ExpertWeights shared;
};

// One transformer block (main layer or the MTP block).
struct BlockWeights {
  int64_t layer_id = 0;
  int64_t ratio = 0;
  HcWeights hc_attn, hc_ffn;
  std::vector<float> attn_norm, ffn_norm;
  AttentionWeights attn;
  MoeWeights ffn;
};

struct MtpWeights {
  BlockWeights block;
  WeightMatrix e_proj, h_proj;  // [D, D] FP8
  std::vector<float> enorm, hnorm, norm;
  HcWeights hc_head;
};

struct Weights {
  WeightMatrix embed;  // [vocab, D] BF16 / F32
  WeightMatrix head;   // [vocab, D]
  std::vector<float> norm;
  HcWeights hc_head;
  std::vector<BlockWeights> blocks;
  std::vector<MtpWeights> mtp;
  int64_t num_parameters = 0;
  int64_t weight_bytes = 0;
  // Bytes read per decoded token at batch 1 (dense weights + active experts + one embedding row
  // + the head).
  int64_t active_bytes_per_token = 0;
  // Copies of tensors whose mapped bytes were not aligned for their element type.
  std::vector<std::unique_ptr<uint8_t[]>> owned;
  // Routed experts repacked at load for the CPU kernels (kernels::UsesMxfp4Lanes; off with
  // DEEPINFER_REPACK_WEIGHTS=0), and their bytes (kept beside the mapped originals).
  std::vector<std::unique_ptr<kernels::Mxfp4LanePack>> lane_packs;
  int64_t lane_pack_bytes = 0;
};

// Binds every tensor of `config` in `ckpt`. Errors (naming the tensor and file): NotFound for a
// missing tensor, InvalidArgument for a wrong dtype or shape or an out-of-range tid2eid entry.
// Unexpected extra tensors are ignored (the official converter skips mtp.*emb*/mtp.*head.weight).
// repack_experts: repack the routed FP4 experts for the CPU kernels where they read that layout
// (and DEEPINFER_REPACK_WEIGHTS allows); false when only the FP64 debug path will read them.
absl::StatusOr<std::unique_ptr<Weights>> BindWeights(const Config& config, const Checkpoint& ckpt,
                                                     bool repack_experts = true);

}  // namespace deepinfer::model::dsv4

#endif  // DEEPINFER_MODEL_DEEPSEEK_V4_WEIGHTS_H_
