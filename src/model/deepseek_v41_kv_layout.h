// KvLayout of DeepSeek-V4.1 (shared/spec/deepseek-v41.md §6-7).
//
// Per-sequence state slot = [stored region | dropped region]:
//   state[0] "encoder.windows" (stored: what a prefix-cache snapshot keeps): the window rings of
//       the encoder layers 0 .. last_kv_source-1, layer-major, each (window + 6) slots of one
//       MXFP8 row (head_dim e4m3 + head_dim/32 E8M0 = 528 B for head_dim 512); slot = pos mod
//       (window + 6). For the released config: 20 x 134 x 528 B = 1,415,040 B.
//   dropped: "layers.L.window" for the decoder layers (last KV source onwards), "mtp.J.window" for
//       the DSpark stages (same ring format), "layers.L.compressor" for KV sources with ratio
//       r > 1: the (a, g) FP32 inputs of the r - 1 pending tokens of an incomplete group (slot
//       = pos mod r), 2 x head_dim floats each.
// Paged, per 128-token block:
//   KV source L: "layers.L.compressed_kv" 128/r NVFP4 rows (head_dim/2 + head_dim/16 B: 288 B)
//     and "layers.L.indexer_k" 128/r MXFP4 rows (index_head_dim/2 + /32 B: 68 B); row b lives
//     in the block of position b*r, row b mod (128/r).
//   "engram.cids" (when the model has Engram): 128 int32 compressed token ids (-1 = image), so
//     the n-gram history of any position is in the cache (chunked prefill, decode, replay).
#ifndef DEEPINFER_MODEL_DEEPSEEK_V41_KV_LAYOUT_H_
#define DEEPINFER_MODEL_DEEPSEEK_V41_KV_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "model/deepseek_v41_config.h"
#include "model/kv_layout.h"

namespace deepinfer::model::dsv41 {

// Where each block's caches are (indices into KvLayout::paged / state; -1 = none).
struct KvIndices {
  int64_t ring_slots = 0;      // window + kSpeculativeRollbackTokens
  int64_t window_row_bytes = 0;
  int64_t num_encoder_layers = 0;
  int encoder_windows = -1;    // state index of the stored region
  int64_t stored_bytes = 0;    // bytes of the stored region
  std::vector<int> window;     // per block: state index of its own ring (decoder / DSpark)
  std::vector<int> compressor; // per block: state index of the pending-group carry
  std::vector<int> comp_kv;    // per block: paged index (KV sources)
  std::vector<int> index_k;    // per block: paged index (KV sources)
  int engram_cids = -1;        // paged index
};

// Builds the layout; `fp32_activations` only changes layout_id (same bytes, different numerics).
KvLayout BuildKvLayout41(const Config& c, bool fp32_activations, KvIndices* idx);

}  // namespace deepinfer::model::dsv41

#endif  // DEEPINFER_MODEL_DEEPSEEK_V41_KV_LAYOUT_H_
