// Loading steps shared by DeepSeek-V4 and V4.1 (LoadDeepseekV4, LoadDeepseekV41 and their
// Create): reading a checkpoint directory's config.json and describing the loaded model to the
// engine (ModelInfo). Both configs and weight sets carry the same fields for these.
#ifndef DEEPINFER_MODEL_DEEPSEEK_V4_LOADING_H_
#define DEEPINFER_MODEL_DEEPSEEK_V4_LOADING_H_

#include <string>

#include "absl/status/statusor.h"
#include "model/model.h"

namespace deepinfer::model::dsv4 {

// The text of `dir`/config.json (read as bytes); NotFound when the directory has none.
absl::StatusOr<std::string> ReadConfigJson(const std::string& dir);

// Fills `info` from a V4 or V4.1 Config (sizes, context, special tokens) and its Weights
// (parameters and bytes, total and active per decoded token).
template <class ConfigT, class WeightsT>
void FillModelInfo(const std::string& architecture, const std::string& model_type,
                   const ConfigT& c, const WeightsT& w, ModelInfo* info) {
  info->architecture = architecture;
  info->model_type = model_type;
  info->vocab_size = c.vocab_size;
  info->max_context = c.max_position_embeddings;
  info->hidden_size = c.hidden_size;
  info->num_layers = c.num_layers;
  info->bos_token_id = c.bos_token_id;
  info->eos_token_ids = c.eos_token_ids;
  info->num_parameters = w.num_parameters;
  info->weight_bytes = w.weight_bytes;
  info->active_weight_bytes_per_token = w.active_bytes_per_token;
}

}  // namespace deepinfer::model::dsv4

#endif  // DEEPINFER_MODEL_DEEPSEEK_V4_LOADING_H_
