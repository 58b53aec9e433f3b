#include "model/deepseek_v4_config.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace deepinfer::model::dsv4 {
namespace {

using Json = nlohmann::json;

class Reader {
 public:
  Reader(const Json& j, std::string_view source) : j_(j), source_(source) {}

  absl::Status Int(const char* key, int64_t* out, bool required = true) {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) {
      if (!required) return absl::OkStatus();
      return Missing(key);
    }
    if (it->is_number_integer() || it->is_number_unsigned()) {
      *out = it->get<int64_t>();
      return absl::OkStatus();
    }
    if (it->is_number_float() && it->get<double>() == static_cast<int64_t>(it->get<double>())) {
      *out = static_cast<int64_t>(it->get<double>());
      return absl::OkStatus();
    }
    return BadType(key, "an integer");
  }
  absl::Status Num(const char* key, double* out, bool required = true) {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) {
      if (!required) return absl::OkStatus();
      return Missing(key);
    }
    if (!it->is_number()) return BadType(key, "a number");
    *out = it->get<double>();
    return absl::OkStatus();
  }
  absl::Status Str(const char* key, std::string* out, bool required = true) {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) {
      if (!required) return absl::OkStatus();
      return Missing(key);
    }
    if (!it->is_string()) return BadType(key, "a string");
    *out = it->get<std::string>();
    return absl::OkStatus();
  }
  absl::Status Missing(const char* key) const {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(source_), ": missing required field \"", key, "\""));
  }
  absl::Status BadType(const char* key, const char* what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(source_), ": field \"", key, "\" must be ", what));
  }
  absl::Status Bad(const std::string& msg) const {
    return absl::InvalidArgumentError(absl::StrCat(std::string(source_), ": ", msg));
  }

 private:
  const Json& j_;
  std::string_view source_;
};

}  // namespace

absl::StatusOr<Config> Config::Parse(std::string_view json_text, std::string_view source) {
  Json j = Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(source), ": not a JSON object"));
  }
  Reader r(j, source);
  Config c;
#define DSV4_RET(expr)         \
  do {                         \
    absl::Status _st = (expr); \
    if (!_st.ok()) return _st; \
  } while (0)
  DSV4_RET(r.Int("vocab_size", &c.vocab_size));
  DSV4_RET(r.Int("hidden_size", &c.hidden_size));
  DSV4_RET(r.Int("num_hidden_layers", &c.num_layers));
  DSV4_RET(r.Int("num_nextn_predict_layers", &c.num_mtp_layers, false));
  DSV4_RET(r.Int("num_attention_heads", &c.num_heads));
  DSV4_RET(r.Int("head_dim", &c.head_dim));
  DSV4_RET(r.Int("qk_rope_head_dim", &c.rope_dim));
  DSV4_RET(r.Int("q_lora_rank", &c.q_lora_rank));
  DSV4_RET(r.Int("o_groups", &c.o_groups));
  DSV4_RET(r.Int("o_lora_rank", &c.o_lora_rank));
  DSV4_RET(r.Int("sliding_window", &c.window));
  DSV4_RET(r.Num("rope_theta", &c.rope_theta));
  DSV4_RET(r.Num("compress_rope_theta", &c.compress_rope_theta));
  DSV4_RET(r.Int("index_n_heads", &c.index_n_heads));
  DSV4_RET(r.Int("index_head_dim", &c.index_head_dim));
  DSV4_RET(r.Int("index_topk", &c.index_topk));
  DSV4_RET(r.Int("n_routed_experts", &c.n_routed_experts));
  DSV4_RET(r.Int("num_experts_per_tok", &c.n_active_experts));
  DSV4_RET(r.Int("moe_intermediate_size", &c.moe_inter));
  DSV4_RET(r.Int("n_shared_experts", &c.n_shared_experts));
  DSV4_RET(r.Int("num_hash_layers", &c.num_hash_layers, false));
  DSV4_RET(r.Num("routed_scaling_factor", &c.route_scale));
  DSV4_RET(r.Num("swiglu_limit", &c.swiglu_limit, false));
  DSV4_RET(r.Int("hc_mult", &c.hc_mult));
  DSV4_RET(r.Int("hc_sinkhorn_iters", &c.hc_sinkhorn_iters));
  DSV4_RET(r.Num("hc_eps", &c.hc_eps, false));
  DSV4_RET(r.Num("rms_norm_eps", &c.rms_eps, false));
  DSV4_RET(r.Int("max_position_embeddings", &c.max_position_embeddings));
  int64_t kv_heads = 1;
  DSV4_RET(r.Int("num_key_value_heads", &kv_heads, false));
  if (kv_heads != 1) return r.Bad("num_key_value_heads must be 1 (single shared latent KV head)");
  std::string scoring = "sqrtsoftplus";
  DSV4_RET(r.Str("scoring_func", &scoring, false));
  if (scoring != "sqrtsoftplus") {
    return r.Bad(absl::StrCat("unsupported scoring_func \"", scoring, "\""));
  }
  std::string act = "silu";
  DSV4_RET(r.Str("hidden_act", &act, false));
  if (act != "silu") return r.Bad(absl::StrCat("unsupported hidden_act \"", act, "\""));
  std::string expert_dtype = "fp4";
  DSV4_RET(r.Str("expert_dtype", &expert_dtype, false));
  if (expert_dtype != "fp4" && expert_dtype != "fp8") {
    return r.Bad(absl::StrCat("unsupported expert_dtype \"", expert_dtype, "\""));
  }
  c.expert_fp4 = expert_dtype == "fp4";

  int64_t bos = -1;
  DSV4_RET(r.Int("bos_token_id", &bos, false));
  c.bos_token_id = static_cast<int32_t>(bos);
  if (auto it = j.find("eos_token_id"); it != j.end()) {
    if (it->is_number_integer()) {
      c.eos_token_ids.push_back(it->get<int32_t>());
    } else if (it->is_array()) {
      for (const auto& e : *it) {
        if (!e.is_number_integer()) return r.BadType("eos_token_id", "an integer or a list");
        c.eos_token_ids.push_back(e.get<int32_t>());
      }
    } else if (!it->is_null()) {
      return r.BadType("eos_token_id", "an integer or a list");
    }
  }

  auto cr = j.find("compress_ratios");
  if (cr == j.end() || !cr->is_array()) {
    return r.Bad("missing or non-list field \"compress_ratios\"");
  }
  for (const auto& e : *cr) {
    if (!e.is_number_integer() || e.get<int64_t>() < 0) {
      return r.Bad("compress_ratios entries must be non-negative integers");
    }
    c.compress_ratios.push_back(e.get<int64_t>());
  }
  if (static_cast<int64_t>(c.compress_ratios.size()) < c.TotalBlocks()) {
    return r.Bad(absl::StrCat(
        "compress_ratios has ", c.compress_ratios.size(),
        " entries, need num_hidden_layers + num_nextn_predict_layers = ", c.TotalBlocks()));
  }
  c.compress_ratios.resize(c.TotalBlocks());

  if (auto rs = j.find("rope_scaling"); rs != j.end() && rs->is_object()) {
    Reader rr(*rs, absl::StrCat(std::string(source), ": rope_scaling"));
    std::string type;
    DSV4_RET(rr.Str("type", &type, false));
    if (type.empty()) DSV4_RET(rr.Str("rope_type", &type, false));
    if (type == "yarn") {
      DSV4_RET(rr.Num("factor", &c.yarn_factor));
      DSV4_RET(rr.Int("original_max_position_embeddings", &c.yarn_original_len));
      DSV4_RET(rr.Num("beta_fast", &c.yarn_beta_fast, false));
      DSV4_RET(rr.Num("beta_slow", &c.yarn_beta_slow, false));
    } else if (!type.empty() && type != "default") {
      return r.Bad(absl::StrCat("unsupported rope_scaling type \"", type, "\""));
    }
  }
#undef DSV4_RET

  // Consistency checks (the FP8/FP4 formats and the head layout need these).
  auto positive = [&](const char* name, int64_t v) -> absl::Status {
    if (v <= 0) return r.Bad(absl::StrCat(name, " must be positive, got ", v));
    return absl::OkStatus();
  };
  for (auto [name, v] : std::initializer_list<std::pair<const char*, int64_t>>{
           {"vocab_size", c.vocab_size},
           {"hidden_size", c.hidden_size},
           {"num_hidden_layers", c.num_layers},
           {"num_attention_heads", c.num_heads},
           {"head_dim", c.head_dim},
           {"qk_rope_head_dim", c.rope_dim},
           {"q_lora_rank", c.q_lora_rank},
           {"o_groups", c.o_groups},
           {"o_lora_rank", c.o_lora_rank},
           {"sliding_window", c.window},
           {"n_routed_experts", c.n_routed_experts},
           {"num_experts_per_tok", c.n_active_experts},
           {"moe_intermediate_size", c.moe_inter},
           {"hc_mult", c.hc_mult},
           {"hc_sinkhorn_iters", c.hc_sinkhorn_iters},
           {"max_position_embeddings", c.max_position_embeddings}}) {
    if (absl::Status s = positive(name, v); !s.ok()) return s;
  }
  if (c.n_shared_experts != 1) return r.Bad("n_shared_experts must be 1");
  if (c.rope_dim % 2 != 0 || c.rope_dim >= c.head_dim) {
    return r.Bad("qk_rope_head_dim must be even and smaller than head_dim");
  }
  if ((c.head_dim - c.rope_dim) % 64 != 0) {
    return r.Bad("head_dim - qk_rope_head_dim must be a multiple of 64 (FP8 KV simulation)");
  }
  if (c.num_heads % c.o_groups != 0) return r.Bad("num_attention_heads % o_groups != 0");
  for (auto [name, v] : std::initializer_list<std::pair<const char*, int64_t>>{
           {"hidden_size", c.hidden_size},
           {"q_lora_rank", c.q_lora_rank},
           {"o_groups * o_lora_rank", c.o_groups * c.o_lora_rank},
           {"moe_intermediate_size", c.moe_inter},
           {"head_dim * heads / o_groups", c.head_dim * c.num_heads / c.o_groups}}) {
    if (v % 128 != 0) {
      return r.Bad(
          absl::StrCat(name, " = ", v, " must be a multiple of 128 (FP8 activation quantisation)"));
    }
  }
  if (c.n_active_experts > c.n_routed_experts) {
    return r.Bad("num_experts_per_tok > n_routed_experts");
  }
  bool any_csa = false;
  for (int64_t i = 0; i < c.TotalBlocks(); ++i) {
    const int64_t m = c.compress_ratios[i];
    if (m == 0) continue;
    if (128 % m != 0) {
      return r.Bad(absl::StrCat("compress_ratios[", i, "] = ", m,
                                " does not divide the 128-token KV block"));
    }
    if (m == 4) any_csa = true;
  }
  if (any_csa) {
    if (c.index_head_dim != 128) {
      return r.Bad("index_head_dim must be 128 (Hadamard-128 indexer)");
    }
    if (c.index_n_heads <= 0 || c.index_topk <= 0) {
      return r.Bad("index_n_heads and index_topk must be positive");
    }
    if (c.index_head_dim <= c.rope_dim) return r.Bad("index_head_dim <= qk_rope_head_dim");
  }
  return c;
}

std::string Config::ToJson() const {
  Json j;
  j["architectures"] = {"DeepseekV4ForCausalLM"};
  j["model_type"] = "deepseek_v4";
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["bos_token_id"] = bos_token_id;
  j["eos_token_id"] = eos_token_ids.size() == 1 ? Json(eos_token_ids[0]) : Json(eos_token_ids);
  j["expert_dtype"] = expert_fp4 ? "fp4" : "fp8";
  j["hc_eps"] = hc_eps;
  j["hc_mult"] = hc_mult;
  j["hc_sinkhorn_iters"] = hc_sinkhorn_iters;
  j["head_dim"] = head_dim;
  j["hidden_act"] = "silu";
  j["hidden_size"] = hidden_size;
  j["index_head_dim"] = index_head_dim;
  j["index_n_heads"] = index_n_heads;
  j["index_topk"] = index_topk;
  j["initializer_range"] = 0.02;
  j["max_position_embeddings"] = max_position_embeddings;
  j["moe_intermediate_size"] = moe_inter;
  j["n_routed_experts"] = n_routed_experts;
  j["n_shared_experts"] = n_shared_experts;
  j["norm_topk_prob"] = true;
  j["num_attention_heads"] = num_heads;
  j["num_experts_per_tok"] = n_active_experts;
  j["num_hidden_layers"] = num_layers;
  j["num_hash_layers"] = num_hash_layers;
  j["num_key_value_heads"] = 1;
  j["num_nextn_predict_layers"] = num_mtp_layers;
  j["o_groups"] = o_groups;
  j["o_lora_rank"] = o_lora_rank;
  j["q_lora_rank"] = q_lora_rank;
  j["qk_rope_head_dim"] = rope_dim;
  j["quantization_config"] = {{"activation_scheme", "dynamic"},
                              {"fmt", "e4m3"},
                              {"quant_method", "fp8"},
                              {"scale_fmt", "ue8m0"},
                              {"weight_block_size", {128, 128}}};
  j["rms_norm_eps"] = rms_eps;
  if (yarn_original_len > 0) {
    j["rope_scaling"] = {{"beta_fast", yarn_beta_fast},
                         {"beta_slow", yarn_beta_slow},
                         {"factor", yarn_factor},
                         {"original_max_position_embeddings", yarn_original_len},
                         {"type", "yarn"}};
  }
  j["rope_theta"] = rope_theta;
  j["routed_scaling_factor"] = route_scale;
  j["scoring_func"] = "sqrtsoftplus";
  j["sliding_window"] = window;
  j["swiglu_limit"] = swiglu_limit;
  j["tie_word_embeddings"] = false;
  j["topk_method"] = "noaux_tc";
  j["torch_dtype"] = "bfloat16";
  j["use_cache"] = true;
  j["vocab_size"] = vocab_size;
  j["compress_rope_theta"] = compress_rope_theta;
  j["compress_ratios"] = compress_ratios;
  return j.dump(2);
}

}  // namespace deepinfer::model::dsv4
