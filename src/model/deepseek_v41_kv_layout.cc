#include "model/deepseek_v41_kv_layout.h"

#include "absl/strings/str_cat.h"
#include "model/deepseek_v41_formats.h"

namespace deepinfer::model::dsv41 {

KvLayout BuildKvLayout41(const Config& c, bool fp32_activations, KvIndices* idx) {
  KvLayout L;
  const int64_t nb = c.TotalBlocks();
  idx->ring_slots = c.window + kSpeculativeRollbackTokens;
  idx->window_row_bytes = Mxfp8RowBytes(c.head_dim);
  idx->num_encoder_layers = c.NumEncoderLayers();
  idx->window.assign(nb, -1);
  idx->compressor.assign(nb, -1);
  idx->comp_kv.assign(nb, -1);
  idx->index_k.assign(nb, -1);
  const int64_t ring_bytes = idx->ring_slots * idx->window_row_bytes;
  // Stored region first.
  idx->stored_bytes = idx->num_encoder_layers * ring_bytes;
  if (idx->stored_bytes > 0) {
    idx->encoder_windows = static_cast<int>(L.state.size());
    L.state.push_back({"encoder.windows", idx->stored_bytes});
  }
  for (int64_t b = idx->num_encoder_layers; b < nb; ++b) {
    const std::string name = b < c.num_layers ? absl::StrCat("layers.", b, ".window")
                                              : absl::StrCat("mtp.", b - c.num_layers, ".window");
    idx->window[b] = static_cast<int>(L.state.size());
    L.state.push_back({name, ring_bytes});
  }
  for (int64_t b = 0; b < c.num_layers; ++b) {
    const LayerRole& r = c.roles[b];
    if (r.role != Role::kFull) continue;
    if (r.ratio > 1) {
      idx->compressor[b] = static_cast<int>(L.state.size());
      L.state.push_back({absl::StrCat("layers.", b, ".compressor"),
                         (r.ratio - 1) * 2 * c.head_dim * 4});
    }
    idx->comp_kv[b] = static_cast<int>(L.paged.size());
    L.paged.push_back({absl::StrCat("layers.", b, ".compressed_kv"), Nvfp4RowBytes(c.head_dim),
                       kBlockTokens / r.ratio});
    idx->index_k[b] = static_cast<int>(L.paged.size());
    L.paged.push_back({absl::StrCat("layers.", b, ".indexer_k"), Mxfp4RowBytes(c.index_head_dim),
                       kBlockTokens / r.ratio});
  }
  if (!c.engram_layer_ids.empty()) {
    idx->engram_cids = static_cast<int>(L.paged.size());
    L.paged.push_back({"engram.cids", 4, kBlockTokens});
  }
  uint64_t id = 1469598103934665603ull;
  auto mixin = [&](int64_t v) {
    id ^= static_cast<uint64_t>(v);
    id *= 1099511628211ull;
  };
  mixin(0x44535641);  // "DSVA"
  mixin(1);           // layout version
  for (int64_t v : {c.hidden_size, c.num_layers, c.head_dim, c.rope_dim, c.window, c.index_head_dim,
                    c.vocab_size, c.num_dspark_layers}) {
    mixin(v);
  }
  for (int64_t r : c.compress_ratios) mixin(r);
  for (int64_t r : c.kv_source_layers) mixin(r);
  mixin(fp32_activations ? 1 : 0);
  L.layout_id = id;
  L.window_tokens = c.window;
  return L;
}

}  // namespace deepinfer::model::dsv41
