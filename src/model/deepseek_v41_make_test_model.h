// Random-weight DeepSeek-V4.1 checkpoints in the released layout (shared/spec/deepseek-v41.md
// §1.1, §2): nested config.json (`text_config`, quantization_config with 32x32 FP8 blocks),
// generation_config.json, one model.safetensors with the official names and dtypes (FP8 e4m3 +
// E8M0 32x32 scales, MXFP4 experts, FP8 Engram tables with per-32 scales, BF16/F32 elsewhere),
// and engram_tables.json (token map + hash constants: the stand-in for the tokenizer-derived map,
// as in shared/models/dsv41-tiny-a). Weights are deterministic functions of (seed, tensor name),
// scaled so that residual streams keep RMS ~1 and sublayer outputs ~0.05-0.1.
#ifndef DEEPINFER_MODEL_DEEPSEEK_V41_MAKE_TEST_MODEL_H_
#define DEEPINFER_MODEL_DEEPSEEK_V41_MAKE_TEST_MODEL_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace deepinfer::model::dsv41 {

// Named presets, as config.json text (the released nested layout):
//   "tiny"  - the dsv41-tiny-a architecture of spec §10 (vocab 512, hidden 256, 8 layers + 1
//             DSpark stage, ratios [0,0,2,2,1,1,1,1,0], window 16, Engram at 1)
//   "alt"   - a second small configuration for generality tests: hidden 320, 2 heads x 192,
//             10 layers (KV sources 2, 5), window 12, 6 experts top-3, Engram at 1 and 3 with
//             4-grams, three DSpark stages with a block of 4 (as the release's three)
//   "demo"  - vocab 129280 (the DeepSeek tokenizer), hidden 256, 8 layers + 1 DSpark stage with
//             the release's role pattern, window 128, 16 experts top-2, Engram at 1
//   "bench" - vocab 129280, hidden 1024, 12 layers (encoder 0-5, last KV source 6, decoder 7-11
//             truncated by compact replay), 64 experts top-6 (~1.1 B parameters)
// NotFound for an unknown name (the message lists the presets).
absl::StatusOr<std::string> TestModelConfigJson41(const std::string& preset);

// Writes config.json, generation_config.json, engram_tables.json and model.safetensors for the
// config.json text `config_json` into `dir` (created). Errors: InvalidArgument (config does not
// parse, directory or file not writable).
absl::Status WriteTestModel41(const std::string& config_json, uint64_t seed,
                              const std::string& dir);

}  // namespace deepinfer::model::dsv41

#endif  // DEEPINFER_MODEL_DEEPSEEK_V41_MAKE_TEST_MODEL_H_
