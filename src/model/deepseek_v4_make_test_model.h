// Random-weight DeepSeek-V4 checkpoints in the official layout and dtypes (spec §2.3) for tests,
// demos and benchmarks: config.json (official field names), model.safetensors and
// generation_config.json. Weights are deterministic functions of (seed, tensor name) and scaled
// so that residual streams keep RMS ~1 and sublayer outputs ~0.1-0.2 through all layers.
#ifndef DEEPINFER_MODEL_DEEPSEEK_V4_MAKE_TEST_MODEL_H_
#define DEEPINFER_MODEL_DEEPSEEK_V4_MAKE_TEST_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/deepseek_v4_config.h"
#include "model/safetensors_writer.h"

namespace deepinfer::model::dsv4 {

// Named size presets:
//   "tiny"  - spec §7 (vocab 512, hidden 256, ratios [0, 4, 16, 4] + MTP 0, window 16, ...)
//   "tiny128" - tiny with the HCA slot at ratio 128 (for >= 300-token boundary tests)
//   "demo"  - vocab 129280, hidden 256, 6 layers [0, 4, 128, 4, 128, 0] + MTP, window 128
//   "bench" - vocab 129280, hidden 1024, 8 layers, 64 experts top-6 (~1.2 B parameters)
// NotFound for an unknown name (the message lists the presets).
absl::StatusOr<Config> TestModelPreset(const std::string& name);

// Fills `writer` with every tensor of `config` (random, deterministic in `seed`).
void BuildTestWeights(const Config& config, uint64_t seed, SafetensorsWriter* writer);

// Writes config.json, generation_config.json and model.safetensors into `dir` (created if
// needed). Errors: InvalidArgument when the directory or a file cannot be written.
absl::Status WriteTestModel(const Config& config, uint64_t seed, const std::string& dir);

}  // namespace deepinfer::model::dsv4

#endif  // DEEPINFER_MODEL_DEEPSEEK_V4_MAKE_TEST_MODEL_H_
