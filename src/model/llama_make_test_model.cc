#include "model/llama_make_test_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/formats.h"
#include "model/safetensors_writer.h"
#include "nlohmann/json.hpp"

namespace deepinfer::model::llama_test_model {
namespace {

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t NameHash(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Rows generated from one RNG stream: the unit of parallel work, fixed so that the bytes do not
// depend on how many threads ran.
constexpr int64_t kRowsPerChunk = 64;

// Adds a BF16 tensor [rows, cols] (cols == 0: a vector [rows]) of `mean` + uniform noise with
// standard deviation `std`, generated while the writer writes it.
void AddBf16(SafetensorsWriter* w, uint64_t seed, const std::string& name, int64_t rows,
             int64_t cols, float mean, float std, int threads) {
  const std::vector<int64_t> shape = cols == 0 ? std::vector<int64_t>{rows}
                                               : std::vector<int64_t>{rows, cols};
  const int64_t width = cols == 0 ? rows : cols;
  const int64_t height = cols == 0 ? 1 : rows;
  const uint64_t base = SplitMix(seed ^ NameHash(name));
  w->AddGenerated(name, "BF16", shape, [=](uint8_t* out) {
    const int64_t chunks = (height + kRowsPerChunk - 1) / kRowsPerChunk;
    const float scale = 1.7320508075688772f * std * 2.0f / 16777216.0f;  // u in [0, 2^24)
    auto run = [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        uint64_t s = SplitMix(base + static_cast<uint64_t>(c));
        const int64_t r0 = c * kRowsPerChunk, r1 = std::min(height, r0 + kRowsPerChunk);
        uint16_t* dst = reinterpret_cast<uint16_t*>(out) + r0 * width;
        for (int64_t i = 0; i < (r1 - r0) * width; ++i) {
          // xorshift64*: cheap, good enough for weights.
          s ^= s >> 12;
          s ^= s << 25;
          s ^= s >> 27;
          const uint64_t r = s * 0x2545f4914f6cdd1dull;
          const float u = static_cast<float>(r >> 40) * scale - 1.7320508075688772f * std;
          const uint16_t b = kernels::FloatToBf16(mean + u);
          std::memcpy(dst + i, &b, 2);
        }
      }
    };
    const int n = static_cast<int>(std::clamp<int64_t>(threads, 1, chunks));
    if (n == 1) {
      run(0, chunks);
      return;
    }
    std::vector<std::thread> pool;
    for (int t = 0; t < n; ++t) {
      pool.emplace_back(run, chunks * t / n, chunks * (t + 1) / n);
    }
    for (std::thread& th : pool) th.join();
  });
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace

int64_t LlamaTestConfig::NumParameters() const {
  const int64_t d = hidden_size, hd = head_dim(), f = intermediate_size;
  const int64_t per_layer = d * num_attention_heads * hd * 2 +      // q, o
                            d * num_key_value_heads * hd * 2 +      // k, v
                            3 * d * f + 2 * d;                      // mlp, norms
  return num_hidden_layers * per_layer + 2 * vocab_size * d + d;
}

std::string LlamaTestConfig::ToJson() const {
  nlohmann::ordered_json j;
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  j["attention_bias"] = false;
  j["bos_token_id"] = bos_token_id;
  j["eos_token_id"] = eos_token_id;
  j["head_dim"] = head_dim();
  j["hidden_act"] = "silu";
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["max_position_embeddings"] = max_position_embeddings;
  j["mlp_bias"] = false;
  j["num_attention_heads"] = num_attention_heads;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_key_value_heads"] = num_key_value_heads;
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_scaling"] = nullptr;
  j["rope_theta"] = rope_theta;
  j["tie_word_embeddings"] = false;
  j["torch_dtype"] = "bfloat16";
  j["vocab_size"] = vocab_size;
  return j.dump(2) + "\n";
}

absl::StatusOr<LlamaTestConfig> LlamaTestPreset(const std::string& name) {
  LlamaTestConfig c;
  if (name == "1b") return c;
  if (name == "tiny") {
    c.hidden_size = 64;
    c.intermediate_size = 160;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.max_position_embeddings = 512;
    return c;
  }
  return absl::NotFoundError(
      absl::StrCat("unknown Llama test-model preset '", name, "' (1b, tiny)"));
}

absl::Status WriteLlamaTestModel(const LlamaTestConfig& c, uint64_t seed,
                                 const std::string& tokenizer_dir, const std::string& dir,
                                 int threads) {
  if (c.hidden_size <= 0 || c.num_attention_heads <= 0 || c.num_key_value_heads <= 0 ||
      c.hidden_size % c.num_attention_heads != 0 ||
      c.num_attention_heads % c.num_key_value_heads != 0 || c.intermediate_size <= 0 ||
      c.num_hidden_layers <= 0 || c.vocab_size <= 0) {
    return absl::InvalidArgumentError(
        "Llama test model: sizes must be positive, heads must divide hidden_size and KV heads "
        "the query heads");
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  if (!tokenizer_dir.empty()) {
    if (!std::filesystem::exists(tokenizer_dir + "/tokenizer.json")) {
      return absl::NotFoundError(absl::StrCat("no tokenizer.json in ", tokenizer_dir));
    }
    for (const char* f : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json",
                          "special_tokens_map.json"}) {
      const std::string src = tokenizer_dir + "/" + f;
      if (!std::filesystem::exists(src)) continue;
      std::filesystem::copy_file(src, dir + "/" + f,
                                 std::filesystem::copy_options::overwrite_existing, ec);
      if (ec) return absl::InvalidArgumentError(absl::StrCat("cannot copy ", src, ": ", ec.message()));
    }
  }
  if (absl::Status s = WriteText(dir + "/config.json", c.ToJson()); !s.ok()) return s;
  if (absl::Status s = WriteText(
          dir + "/generation_config.json",
          absl::StrCat("{\n  \"bos_token_id\": ", c.bos_token_id,
                       ",\n  \"eos_token_id\": ", c.eos_token_id, "\n}\n"));
      !s.ok()) {
    return s;
  }
  const int64_t d = c.hidden_size, hd = c.head_dim(), f = c.intermediate_size;
  const float in_std = 1.0f / std::sqrt(static_cast<float>(d));
  const float res_scale = 1.0f / std::sqrt(2.0f * static_cast<float>(c.num_hidden_layers));
  SafetensorsWriter w;
  AddBf16(&w, seed, "model.embed_tokens.weight", c.vocab_size, d, 0.0f, 1.0f, threads);
  AddBf16(&w, seed, "lm_head.weight", c.vocab_size, d, 0.0f, in_std, threads);
  AddBf16(&w, seed, "model.norm.weight", d, 0, 1.0f, 0.0f, threads);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    AddBf16(&w, seed, p + "input_layernorm.weight", d, 0, 1.0f, 0.0f, threads);
    AddBf16(&w, seed, p + "post_attention_layernorm.weight", d, 0, 1.0f, 0.0f, threads);
    AddBf16(&w, seed, p + "self_attn.q_proj.weight", c.num_attention_heads * hd, d, 0.0f, in_std,
            threads);
    AddBf16(&w, seed, p + "self_attn.k_proj.weight", c.num_key_value_heads * hd, d, 0.0f, in_std,
            threads);
    AddBf16(&w, seed, p + "self_attn.v_proj.weight", c.num_key_value_heads * hd, d, 0.0f, in_std,
            threads);
    AddBf16(&w, seed, p + "self_attn.o_proj.weight", d, c.num_attention_heads * hd, 0.0f,
            res_scale / std::sqrt(static_cast<float>(c.num_attention_heads * hd)), threads);
    AddBf16(&w, seed, p + "mlp.gate_proj.weight", f, d, 0.0f, in_std, threads);
    AddBf16(&w, seed, p + "mlp.up_proj.weight", f, d, 0.0f, in_std, threads);
    AddBf16(&w, seed, p + "mlp.down_proj.weight", d, f, 0.0f,
            res_scale / std::sqrt(static_cast<float>(f)), threads);
  }
  return w.Write(dir + "/model.safetensors");
}

}  // namespace deepinfer::model::llama_test_model
