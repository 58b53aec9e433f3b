// Engram n-gram hashing of DeepSeek-V4.1 (shared/spec/deepseek-v41.md §4.2): the compressed
// token map, the per-layer prime buckets / offsets / multipliers, and the 24 (release) table row
// ids of a position.
//
// Sources of the constants, in order:
//   - primes and offsets: always derived from config.json (consecutive primes above
//     engram_vocab_size - 1, assigned layer -> n-gram -> head; offsets = exclusive prefix sums;
//     their sum per layer must equal engram_num_embeddings);
//   - token map and multipliers: `engram_tables.json` next to the checkpoint when present (the
//     tiny checkpoints' stand-in for the tokenizer-derived map); its primes/offsets are
//     cross-checked against the derived ones. Without the file, as the official code does: the
//     multipliers from numpy's default_rng(10007 * layer_id) stream (deepseek_v41_numpy_rng.h)
//     and the token map from the checkpoint's tokenizer through the installed
//     EngramTokenMapSource (tokenizer/engram_token_map.h; the model layer may not include the
//     tokenizer, ARCHITECTURE.md §2). Its key count must equal engram_compressed_vocab_size
//     (the official assert: a mismatch would silently rehash every lookup).
#ifndef DEEPINFER_MODEL_DEEPSEEK_V41_ENGRAM_H_
#define DEEPINFER_MODEL_DEEPSEEK_V41_ENGRAM_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/deepseek_v41_config.h"

namespace deepinfer::model::dsv41 {

// Compressed id of an image position (hash chains stop there, gate forced to 0).
inline constexpr int32_t kEngramDead = -1;

struct EngramLayerHash {
  int64_t layer_id = 0;
  std::vector<int64_t> primes;       // [(max_ngram - 1) * n_heads], n-gram major
  std::vector<int64_t> offsets;      // same shape: exclusive prefix sums of primes
  std::vector<int64_t> multipliers;  // [max_ngram]
};

// A token map derived from a tokenizer: compressed id per tokenizer id, and the key count.
struct EngramTokenMap {
  std::vector<int32_t> map;
  int64_t num_keys = 0;
};
// Derives the token map of checkpoint directory `dir` (its tokenizer.json). Errors as the
// tokenizer loader's (NotFound without tokenizer.json).
using EngramTokenMapSource = std::function<absl::StatusOr<EngramTokenMap>(const std::string& dir)>;

// Installs the process-wide source EngramHasher::Load uses when engram_tables.json is absent
// (the deepinfer binary installs the tokenizer-based one at startup; tests install their own).
// Without one such checkpoints fail to load with FailedPrecondition. Thread-safe.
void SetEngramTokenMapSource(EngramTokenMapSource source);

class EngramHasher {
 public:
  // Builds the tables for `cfg` from the checkpoint directory `dir` (see the file comment).
  static absl::StatusOr<EngramHasher> Load(const Config& cfg, const std::string& dir);

  // Compressed id of a token (kEngramDead when `image`).
  int32_t Cid(int32_t token, bool image) const {
    return image ? kEngramDead : token_map_[static_cast<size_t>(token)];
  }
  int64_t pad_cid() const { return pad_cid_; }
  int64_t columns() const { return (max_ngram_ - 1) * n_heads_; }
  const std::vector<EngramLayerHash>& layers() const { return layers_; }
  // Index into layers() of `layer_id`, or -1.
  int LayerIndex(int64_t layer_id) const;

  // Row ids (offsets included) of the position whose compressed ids, newest first, are
  // `cids_back` (cids_back[k] = cid at p - k, for k < min(p + 1, max_ngram)); out gets
  // columns() ids.
  void Hash(int layer_index, std::span<const int32_t> cids_back, int64_t* out) const;

 private:
  std::vector<int32_t> token_map_;
  int64_t pad_cid_ = 0;
  int64_t max_ngram_ = 0, n_heads_ = 0;
  std::vector<EngramLayerHash> layers_;
};

}  // namespace deepinfer::model::dsv41

#endif  // DEEPINFER_MODEL_DEEPSEEK_V41_ENGRAM_H_
