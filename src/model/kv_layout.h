// KvLayout: what a model stores per 128-token block and per sequence (ARCHITECTURE.md §4,
// KV-CACHE.md §1). The model declares it; the engine's block pool and state cache are generic
// over it and only see byte sizes and offsets.
//
// Memory model (owned by the engine, see model.h KvCacheView):
//   block arena: [num_blocks][BlockBytes()]      block b, cache c at  b*BlockBytes() + paged_offset(c)
//   state arena: [num_slots][StateBytes()]       slot s, state k at   s*StateBytes() + state_offset(k)
// All caches of a block are allocated together (one block id covers every layer); a sequence's
// fixed state (window rings, compressor partial state) lives in one slot.
#ifndef DEEPINFER_MODEL_KV_LAYOUT_H_
#define DEEPINFER_MODEL_KV_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer::model {

// Tokens per KV block: the storage, prefix-matching and replay granularity.
inline constexpr int kBlockTokens = 128;

// Tokens of speculative rollback the window rings and the hit rule reserve (the seed's 6).
inline constexpr int kSpeculativeRollbackTokens = 6;

// One paged cache: `rows_per_block` rows of `row_bytes` each per block (e.g. Llama layer L's K:
// 128 rows of num_kv_heads*head_dim floats; DSv4 CSA layer compressed KV: 32 rows).
struct PagedCacheSpec {
  std::string name;  // e.g. "layers.3.k", "layers.2.compressed_kv", "layers.2.indexer_k"
  int64_t row_bytes = 0;
  int64_t rows_per_block = 0;
  int64_t BlockBytes() const { return row_bytes * rows_per_block; }
};

// One fixed-size per-sequence state (e.g. "layers.0.window" ring, "layers.2.compressor").
struct StateSpec {
  std::string name;
  int64_t bytes = 0;
};

struct KvLayout {
  std::vector<PagedCacheSpec> paged;
  std::vector<StateSpec> state;
  // Identifies the bytes a block holds (model, dims, precision, layout version): part of every
  // prefix-cache key, so blocks of different layouts never match (KV-CACHE.md §2).
  uint64_t layout_id = 0;
  // Sliding-window length in tokens of the model's window state (DeepSeek: `sliding_window`);
  // 0 when the model keeps no per-sequence state (Llama). The prefix-cache hit rule leaves at
  // least window + kSpeculativeRollbackTokens tokens to recompute (KV-CACHE.md §5).
  int64_t window_tokens = 0;
  // Tokens at the end of a prompt that a prefix hit also leaves to recompute (0 = none): V4.1
  // compact truncation's kept rows, so that the decoder floor (prefill_end - kept) is never
  // below the hit and a snapshot's decoder windows are never read (KV-CACHE.md §5.5).
  int64_t min_recompute_tokens = 0;
  // Speculative rollback is a frontier reset (../shared/spec/speculative.md §4.6): every
  // per-sequence state a later query reads is position-indexed with room for
  // kSpeculativeRollbackTokens positions past the committed frontier (window rings of
  // window_tokens + kSpeculativeRollbackTokens slots, compressor rings), and paged rows are
  // append-only, so entries a rejected draft wrote are never read and are overwritten when the
  // position is computed again. The runner then neither copies the state slot before a verify
  // nor recomputes the accepted tokens after a rejection. false: the runner restores the slot.
  bool frontier_rollback = false;

  // Bytes of one block (all paged caches; each cache's region 64-byte aligned).
  int64_t BlockBytes() const;
  // Bytes of one state slot (all states; each 64-byte aligned). 0 when the model has no state.
  int64_t StateBytes() const;
  // Byte offset of paged cache `index` inside a block / state `index` inside a slot.
  int64_t PagedOffset(int index) const;
  int64_t StateOffset(int index) const;
};

}  // namespace deepinfer::model

#endif  // DEEPINFER_MODEL_KV_LAYOUT_H_
