// numpy's `np.random.default_rng(seed).integers(0, high, size=n, dtype=np.int64)` (PCG64 seeded
// through SeedSequence, Lemire's bounded draw), reimplemented because the Engram hash multipliers
// of DeepSeek-V4.1 are defined by that stream (shared/spec/deepseek-v41.md §4.2,
// inference/engram.py compute_hash_multipliers). The spec recommends hard-coding the released
// values; deriving them instead lets any configuration (other layer ids or compressed
// vocabulary sizes) load without a sidecar file. Checked against the spec's release table and the
// tiny checkpoint's engram_tables.json (deepseek_v41_test).
#ifndef DEEPINFER_MODEL_DEEPSEEK_V41_NUMPY_RNG_H_
#define DEEPINFER_MODEL_DEEPSEEK_V41_NUMPY_RNG_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace deepinfer::model::dsv41 {

// The first `n` values of default_rng(seed).integers(0, high, size=n, dtype=int64).
// seed: a non-negative integer below 2^32 (numpy splits larger ones into several words; Engram
// seeds 10007 * layer_id stay below). high: > 2^32 (the 32-bit buffered path numpy takes for
// smaller ranges is not implemented; Engram bounds are ~2^45). Errors: InvalidArgument outside
// those ranges.
absl::StatusOr<std::vector<int64_t>> NumpyIntegers(uint64_t seed, int64_t high, int n);

// Engram multipliers of one layer (spec §4.2): 2 * integers(0, bound, max_ngram)[k] + 1 with
// bound = max(1, (2^63 - 1) // compressed_vocab // 2), seed 10007 * layer_id.
absl::StatusOr<std::vector<int64_t>> EngramMultipliers(int64_t layer_id, int64_t compressed_vocab,
                                                       int max_ngram);

}  // namespace deepinfer::model::dsv41

#endif  // DEEPINFER_MODEL_DEEPSEEK_V41_NUMPY_RNG_H_
