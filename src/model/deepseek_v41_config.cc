#include "model/deepseek_v41_config.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace deepinfer::model::dsv41 {
namespace {

using Json = nlohmann::json;

// Field lookup in the text fields (nested name) with the flat inference/config.json name as
// fallback (spec §1.1 table).
class Fields {
 public:
  Fields(const Json& text, const Json& root, std::string source)
      : text_(text), root_(root), source_(std::move(source)) {}

  const Json* Find(const char* nested, const char* flat) const {
    for (const Json* j : {&text_, &root_}) {
      if (nested != nullptr && j->contains(nested) && !(*j)[nested].is_null()) return &(*j)[nested];
      if (flat != nullptr && j->contains(flat) && !(*j)[flat].is_null()) return &(*j)[flat];
    }
    return nullptr;
  }
  absl::Status Missing(const char* nested) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": missing or malformed field '", nested, "'"));
  }
  template <class T>
  absl::Status Get(const char* nested, const char* flat, T* out, bool required = true) const {
    const Json* j = Find(nested, flat);
    if (j == nullptr) return required ? Missing(nested) : absl::OkStatus();
    try {
      *out = j->get<T>();
    } catch (const std::exception&) {
      return Missing(nested);
    }
    return absl::OkStatus();
  }

 private:
  const Json& text_;
  const Json& root_;
  std::string source_;
};

#define RET(expr)                         \
  do {                                    \
    absl::Status _st = (expr);            \
    if (!_st.ok()) return _st;            \
  } while (0)

bool Contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

absl::StatusOr<Config> Config::Parse(const std::string& text, const std::string& source) {
  Json root;
  try {
    root = Json::parse(text);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not JSON: ", e.what()));
  }
  const Json empty = Json::object();
  const Json& tc = root.contains("text_config") ? root["text_config"] : empty;
  Fields f(tc, root, source);
  Config c;
  c.source = source;
  RET(f.Get("vocab_size", "vocab_size", &c.vocab_size));
  RET(f.Get("hidden_size", "dim", &c.hidden_size));
  RET(f.Get("num_hidden_layers", "n_layers", &c.num_layers));
  RET(f.Get("num_attention_heads", "n_heads", &c.num_heads));
  RET(f.Get("head_dim", "head_dim", &c.head_dim));
  RET(f.Get("qk_rope_head_dim", "rope_head_dim", &c.rope_dim));
  RET(f.Get("q_lora_rank", "q_lora_rank", &c.q_lora_rank));
  RET(f.Get("o_groups", "o_groups", &c.o_groups));
  RET(f.Get("o_lora_rank", "o_lora_rank", &c.o_lora_rank));
  RET(f.Get("moe_intermediate_size", "moe_inter_dim", &c.moe_inter));
  RET(f.Get("n_routed_experts", "n_routed_experts", &c.n_routed_experts));
  RET(f.Get("num_experts_per_tok", "n_activated_experts", &c.n_active_experts));
  RET(f.Get("n_shared_experts", "n_shared_experts", &c.n_shared_experts, false));
  RET(f.Get("routed_scaling_factor", "route_scale", &c.route_scale, false));
  RET(f.Get("swiglu_limit", "swiglu_limit", &c.swiglu_limit, false));
  RET(f.Get("rms_norm_eps", "norm_eps", &c.rms_eps, false));
  RET(f.Get("gate_temp", "gate_temp", &c.gate_temp, false));
  c.window = 128;  // OFF41 ModelArgs.window_size
  RET(f.Get("sliding_window", "window_size", &c.window, false));
  RET(f.Get("rope_theta", "rope_theta", &c.rope_theta, false));
  RET(f.Get("compress_rope_theta", "compress_rope_theta", &c.compress_rope_theta, false));
  if (const Json* rs = f.Find("rope_scaling", nullptr); rs != nullptr && rs->is_object()) {
    c.yarn_factor = rs->value("factor", 1.0);
    c.yarn_beta_fast = rs->value("beta_fast", 32.0);
    c.yarn_beta_slow = rs->value("beta_slow", 1.0);
    c.yarn_original_len = rs->value("original_max_position_embeddings", int64_t{0});
  } else {
    RET(f.Get(nullptr, "rope_factor", &c.yarn_factor, false));
    RET(f.Get(nullptr, "beta_fast", &c.yarn_beta_fast, false));
    RET(f.Get(nullptr, "beta_slow", &c.yarn_beta_slow, false));
    RET(f.Get(nullptr, "original_seq_len", &c.yarn_original_len, false));
  }
  RET(f.Get("compress_ratios", "compress_ratios", &c.compress_ratios));
  // Routing (§4.6): sqrt-softplus scores, normalised top-k weights; nothing else is implemented,
  // so another value is an error rather than a silently different model.
  {
    std::string scoring = "sqrtsoftplus";
    RET(f.Get("scoring_func", "score_func", &scoring, false));
    if (scoring != "sqrtsoftplus") {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": unsupported scoring_func \"", scoring, "\" (sqrtsoftplus)"));
    }
    bool norm_topk = true;
    RET(f.Get("norm_topk_prob", "norm_topk_prob", &norm_topk, false));
    if (!norm_topk) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": norm_topk_prob false is not supported"));
    }
  }
  RET(f.Get("kv_source_layer_ids", "kv_source_layers", &c.kv_source_layers, false));
  RET(f.Get("index_source_layer_ids", "index_source_layers", &c.index_source_layers, false));
  RET(f.Get("index_n_heads", "index_n_heads", &c.index_n_heads, false));
  RET(f.Get("index_head_dim", "index_head_dim", &c.index_head_dim, false));
  RET(f.Get("index_topk", "index_topk", &c.index_topk, false));
  RET(f.Get("candidate_source_layer_id", "candidate_source_layer", &c.candidate_source_layer,
            false));
  RET(f.Get("candidate_topk_blocks", "candidate_topk_blocks", &c.candidate_topk_blocks, false));
  RET(f.Get("candidate_block_size", "candidate_block_size", &c.candidate_block_size, false));
  RET(f.Get("hc_mult", "hc_mult", &c.hc_mult, false));
  RET(f.Get("hc_sinkhorn_iters", "hc_sinkhorn_iters", &c.hc_sinkhorn_iters, false));
  RET(f.Get("hc_eps", "hc_eps", &c.hc_eps, false));
  RET(f.Get("engram_layer_ids", "engram_layer_ids", &c.engram_layer_ids, false));
  RET(f.Get("engram_num_embeddings", "engram_num_embeddings", &c.engram_num_embeddings, false));
  RET(f.Get("engram_max_ngram_size", "engram_max_ngram_size", &c.engram_max_ngram, false));
  RET(f.Get("engram_vocab_size", "engram_vocab_size", &c.engram_vocab_size, false));
  RET(f.Get("engram_n_heads", "engram_n_heads", &c.engram_n_heads, false));
  RET(f.Get("engram_head_dim", "engram_head_dim", &c.engram_head_dim, false));
  RET(f.Get("engram_pad_token_id", "engram_pad_id", &c.engram_pad_token_id, false));
  RET(f.Get("engram_compressed_vocab_size", "engram_compressed_vocab_size",
            &c.engram_compressed_vocab, false));
  RET(f.Get("num_nextn_predict_layers", "n_mtp_layers", &c.num_dspark_layers, false));
  RET(f.Get("dspark_block_size", "dspark_block_size", &c.dspark_block_size, false));
  RET(f.Get("dspark_noise_token_id", "dspark_noise_token_id", &c.dspark_noise_token_id, false));
  RET(f.Get("dspark_target_layer_ids", "dspark_target_layer_ids", &c.dspark_target_layers, false));
  RET(f.Get("dspark_markov_rank", "dspark_markov_rank", &c.dspark_markov_rank, false));
  RET(f.Get("dspark_n_routed_experts", "dspark_n_routed_experts", &c.dspark_n_routed_experts,
            false));
  RET(f.Get("dspark_num_experts_per_tok", "dspark_n_activated_experts",
            &c.dspark_n_active_experts, false));
  // Official fallbacks (OFF41 get_moe_config: `dspark_n_routed_experts or n_routed_experts`;
  // ModelArgs: dspark_markov_rank 256, engram_pad_id 2 = the pad token's id, spec §4.2).
  if (c.dspark_n_routed_experts <= 0) c.dspark_n_routed_experts = c.n_routed_experts;
  if (c.dspark_n_active_experts <= 0) c.dspark_n_active_experts = c.n_active_experts;
  if (f.Find("dspark_markov_rank", "dspark_markov_rank") == nullptr) c.dspark_markov_rank = 256;
  if (f.Find("engram_pad_token_id", "engram_pad_id") == nullptr) c.engram_pad_token_id = 2;
  // Layer lists are sets in the official code (`i in target_layer_ids`, the latest source <= l):
  // keep them sorted so list order never changes a feature slot or a source.
  std::sort(c.kv_source_layers.begin(), c.kv_source_layers.end());
  std::sort(c.index_source_layers.begin(), c.index_source_layers.end());
  std::sort(c.dspark_target_layers.begin(), c.dspark_target_layers.end());
  c.max_position_embeddings = 1 << 20;
  RET(f.Get("max_position_embeddings", "max_seq_len", &c.max_position_embeddings, false));
  RET(f.Get("image_token_id", "image_token_id", &c.image_token_id, false));
  RET(f.Get("bos_token_id", "bos_token_id", &c.bos_token_id, false));
  if (const Json* eos = f.Find("eos_token_id", "eos_token_id"); eos != nullptr) {
    if (eos->is_array()) {
      for (const auto& e : *eos) c.eos_token_ids.push_back(e.get<int32_t>());
    } else if (eos->is_number_integer()) {
      c.eos_token_ids.push_back(eos->get<int32_t>());
    }
  }
  if (root.contains("quantization_config") && root["quantization_config"].is_object()) {
    const Json& q = root["quantization_config"];
    c.expert_fp4 = q.value("expert_dtype", std::string("fp4")) == "fp4";
    if (q.contains("weight_block_size") && q["weight_block_size"].is_array() &&
        !q["weight_block_size"].empty()) {
      c.fp8_block = q["weight_block_size"][0].get<int64_t>();
      if (q["weight_block_size"].size() > 1 && q["weight_block_size"][1].get<int64_t>() != c.fp8_block) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ": quantization_config.weight_block_size must be square"));
      }
    }
  } else if (const Json* ed = f.Find(nullptr, "expert_dtype"); ed != nullptr) {
    c.expert_fp4 = ed->get<std::string>() == "fp4";
  }
  if (root.contains("vision_config") && root["vision_config"].is_object()) {
    c.has_vision = root["vision_config"].value("num_hidden_layers", 1) > 0;
  }

  // ---- consistency (§1.2) ----
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", why));
  };
  if (c.hidden_size <= 0 || c.num_layers <= 0 || c.head_dim <= 0 || c.num_heads <= 0 ||
      c.window <= 0 || c.vocab_size <= 0) {
    return bad("non-positive model dimension");
  }
  if (static_cast<int64_t>(c.compress_ratios.size()) < c.num_layers) {
    return bad("compress_ratios has fewer entries than num_hidden_layers");
  }
  c.compress_ratios.resize(c.TotalBlocks(), 0);
  if (c.head_dim % 32 != 0 || c.rope_dim % 2 != 0 || c.rope_dim > c.head_dim) {
    return bad("head_dim must be a multiple of 32 and rope dim even and <= head_dim");
  }
  if (c.num_heads % c.o_groups != 0) return bad("num_attention_heads % o_groups != 0");
  c.roles.resize(c.TotalBlocks());
  int64_t last_kv = -1, last_index = -1;
  for (int64_t l = 0; l < c.TotalBlocks(); ++l) {
    LayerRole& r = c.roles[l];
    r.ratio = l < c.num_layers ? c.compress_ratios[l] : 0;
    r.engram = Contains(c.engram_layer_ids, l);
    const bool kv_src = l < c.num_layers && Contains(c.kv_source_layers, l);
    const bool idx_src = l < c.num_layers && (kv_src || Contains(c.index_source_layers, l));
    if (kv_src) last_kv = l;
    if (idx_src) last_index = l;
    if (r.ratio == 0) {
      if (kv_src || Contains(c.index_source_layers, l)) {
        return bad(absl::StrCat("layer ", l, " has compress ratio 0 but is a KV/index source"));
      }
      continue;
    }
    if (last_kv < 0 || last_index < 0) {
      return bad(absl::StrCat("layer ", l, " is compressed but no KV/index source precedes it"));
    }
    if (c.compress_ratios[last_kv] != r.ratio) {
      return bad(absl::StrCat("layer ", l, " (ratio ", r.ratio, ") reads KV source ", last_kv,
                              " of ratio ", c.compress_ratios[last_kv]));
    }
    r.kv_source = last_kv;
    r.index_source = last_index;
    r.role = kv_src ? Role::kFull : idx_src ? Role::kReindex : Role::kReuse;
    r.candidate_source = l == c.candidate_source_layer;
    r.candidate_masked =
        idx_src && c.candidate_source_layer >= 0 && l > c.candidate_source_layer;
    if (r.candidate_source && !kv_src) {
      return bad("candidate_source_layer_id must be a KV source");
    }
  }
  if (c.index_topk <= 0 && !c.kv_source_layers.empty()) return bad("index_topk must be > 0");
  if (!c.kv_source_layers.empty() && c.index_head_dim % 32 != 0) {
    return bad("index_head_dim must be a multiple of 32");
  }
  for (int64_t l : c.engram_layer_ids) {
    if (l < 0 || l >= c.num_layers) return bad("engram_layer_ids outside the layers");
  }
  for (int64_t l : c.dspark_target_layers) {
    if (l < 0 || l >= c.num_layers) return bad("dspark_target_layer_ids outside the layers");
  }
  if (c.num_dspark_layers > 0 &&
      (c.dspark_block_size < 1 || c.dspark_target_layers.empty() || c.dspark_markov_rank <= 0 ||
       c.dspark_n_active_experts > c.dspark_n_routed_experts)) {
    return bad("inconsistent dspark_* fields");
  }
  if (!c.engram_layer_ids.empty() &&
      (c.engram_pad_token_id < 0 || c.engram_pad_token_id >= c.vocab_size)) {
    return bad("engram_pad_token_id outside the vocabulary");
  }
  if (!c.engram_layer_ids.empty() &&
      (c.engram_max_ngram < 2 || c.engram_n_heads <= 0 || c.engram_head_dim % 32 != 0 ||
       c.engram_num_embeddings.size() != c.engram_layer_ids.size())) {
    return bad("inconsistent engram_* fields");
  }
  return c;
}

}  // namespace deepinfer::model::dsv41
