#include "model/deepseek_v41_make_test_model.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/deepseek_v41_config.h"
#include "model/deepseek_v4_numerics.h"
#include "model/safetensors_writer.h"
#include "model/test_model_random.h"
#include "nlohmann/json.hpp"

namespace deepinfer::model::dsv41 {
namespace {

using Json = nlohmann::json;

using testgen::Rng;

bool IsPrime(int64_t n) {
  if (n < 2) return false;
  for (int64_t d = 2; d * d <= n; ++d) {
    if (n % d == 0) return false;
  }
  return true;
}

// Consecutive primes above engram_vocab_size - 1, layer -> n-gram -> head (spec §4.2).
std::vector<std::vector<std::vector<int64_t>>> EngramPrimes(int64_t vocab, int64_t layers,
                                                            int64_t max_ngram, int64_t heads) {
  std::vector<std::vector<std::vector<int64_t>>> p(layers);
  int64_t next = vocab - 1;
  for (auto& layer : p) {
    layer.resize(max_ngram - 1);
    for (auto& g : layer) {
      for (int64_t h = 0; h < heads; ++h) {
        do {
          ++next;
        } while (!IsPrime(next));
        g.push_back(next);
      }
    }
  }
  return p;
}

// Test-model token map: merges every 7th id into its predecessor (ids 0..2 keep 0..2), so the
// compressed vocabulary is smaller than the model's as in the release. For vocab 512 this is
// the map of shared/models/dsv41-tiny-a (439 compressed ids).
int32_t TestCid(int64_t t) { return static_cast<int32_t>(t - t / 7); }

class Builder {
 public:
  Builder(const Config& c, uint64_t seed, SafetensorsWriter* w) : c_(c), seed_(seed), w_(w) {}

  void F32(const std::string& name, std::vector<int64_t> shape, float mean, float std) {
    testgen::AddRandomF32(w_, seed_, name, std::move(shape), mean, std);
  }
  void Bf16(const std::string& name, std::vector<int64_t> shape, float mean, float std) {
    testgen::AddRandomBf16(w_, seed_, name, std::move(shape), mean, std);
  }
  static uint8_t ScaleCode(float scale) {
    int e;
    std::frexp(scale, &e);
    return static_cast<uint8_t>(e - 1 + 127);
  }
  // e4m3 codes of uniform values (std) with one power-of-two scale for the whole tensor.
  void E4m3(const std::string& name, int64_t rows, int64_t cols, float std, float scale) {
    const uint64_t seed = seed_;
    w_->AddGenerated(name, "F8_E4M3", {rows, cols}, [=](uint8_t* out) {
      Rng rng(seed, name);
      const float inv = 1.0f / scale;
      for (int64_t i = 0; i < rows * cols; ++i) out[i] = dsv4::F32ToE4M3(rng.Uniform(std) * inv);
    });
  }
  // FP8 weight + E8M0 scales in c.fp8_block square blocks (§2.2).
  void Fp8(const std::string& prefix, int64_t rows, int64_t cols, float std) {
    const int64_t B = c_.fp8_block, sr = (rows + B - 1) / B, sc = (cols + B - 1) / B;
    const float scale = dsv4::Pow2Ceil(1.7320508075688772f * std / 448.f);
    E4m3(prefix + ".weight", rows, cols, std, scale);
    const uint8_t code = ScaleCode(scale);
    w_->AddGenerated(prefix + ".scale", "F8_E8M0", {sr, sc},
                     [=](uint8_t* out) { std::memset(out, code, sr * sc); });
  }
  // MXFP4 routed expert: random e2m1 codes, per-32 E8M0 scales alternating 2^k / 2^(k-1).
  void Fp4(const std::string& prefix, int64_t rows, int64_t cols, float std) {
    const uint64_t seed = seed_;
    const uint8_t base = ScaleCode(dsv4::Pow2Ceil(std / 2.93f));
    const std::string wname = prefix + ".weight", sname = prefix + ".scale";
    w_->AddGenerated(wname, "I8", {rows, cols / 2}, [=](uint8_t* out) {
      Rng rng(seed, wname);
      const int64_t n = rows * cols / 2;
      for (int64_t i = 0; i < n;) {
        const uint64_t r = rng.Next();
        for (int j = 0; j < 8 && i < n; ++j, ++i) out[i] = static_cast<uint8_t>(r >> (8 * j));
      }
    });
    w_->AddGenerated(sname, "F8_E8M0", {rows, cols / 32}, [=](uint8_t* out) {
      Rng rng(seed, sname);
      for (int64_t i = 0; i < rows * cols / 32; ++i) {
        out[i] = static_cast<uint8_t>(base - static_cast<uint8_t>(rng.Next() & 1));
      }
    });
  }
  void Expert(const std::string& prefix, int64_t rows, int64_t cols, float std) {
    if (c_.expert_fp4) {
      Fp4(prefix, rows, cols, std);
    } else {
      Fp8(prefix, rows, cols, std);
    }
  }
  void Hc(const std::string& p, const std::string& kind) {
    const int64_t n = c_.hc_mult, nD = n * c_.hidden_size, mix = (2 + n) * n;
    F32(p + "hc_" + kind + "_fn", {mix, nD}, 0.f, 0.5f / std::sqrt(static_cast<float>(nD)));
    F32(p + "hc_" + kind + "_base", {mix}, 0.f, 0.5f);
    F32(p + "hc_" + kind + "_scale", {3}, 1.f, 0.1f);
  }

  void Block(int64_t l) {
    const Config& c = c_;
    const LayerRole& role = c.roles[l];
    const bool dspark = l >= c.num_layers;
    const std::string p = dspark ? absl::StrCat("mtp.", l - c.num_layers, ".")
                                 : absl::StrCat("layers.", l, ".");
    const int64_t D = c.hidden_size, H = c.num_heads, d = c.head_dim, n = c.hc_mult;
    const int64_t G = c.o_groups, L = c.o_lora_rank, Q = c.q_lora_rank, I = c.moe_inter;
    const int64_t IH = c.index_n_heads, ID = c.index_head_dim;
    auto inv = [](int64_t x) { return 1.f / std::sqrt(static_cast<float>(x)); };
    Hc(p, "attn");
    Hc(p, "ffn");
    Bf16(p + "attn_norm.weight", {D}, 1.f, 0.1f);
    Bf16(p + "ffn_norm.weight", {D}, 1.f, 0.1f);
    F32(p + "attn.attn_sink", {H}, 0.f, 1.f);
    Fp8(p + "attn.wq_a", Q, D, inv(D));
    Bf16(p + "attn.q_norm.weight", {Q}, 1.f, 0.1f);
    Fp8(p + "attn.wq_b", H * d, Q, inv(Q));
    Fp8(p + "attn.wkv", d, D, inv(D));
    Bf16(p + "attn.kv_norm.weight", {d}, 1.f, 0.1f);
    Fp8(p + "attn.wo_a", G * L, H * d / G, inv(H * d / G));
    Fp8(p + "attn.wo_b", D, G * L, 0.1f * inv(G * L));
    if (role.role == Role::kFull) {
      Bf16(p + "attn.compressor.wkv.weight", {d, D}, 0.f, inv(D));
      if (role.ratio > 1) Bf16(p + "attn.compressor.wgate.weight", {d, D}, 0.f, inv(D));
      Bf16(p + "attn.compressor.norm.weight", {d}, 1.f, 0.1f);
      Bf16(p + "attn.indexer.wk.weight", {ID, d}, 0.f, inv(d));
      Bf16(p + "attn.indexer.k_norm.weight", {ID}, 1.f, 0.1f);
    }
    if (role.role == Role::kFull || role.role == Role::kReindex) {
      Fp8(p + "attn.indexer.wq_b", IH * ID, Q, inv(Q));
      Bf16(p + "attn.indexer.weights_proj.weight", {IH, D}, 0.f, inv(D));
    }
    const int64_t E = dspark ? c.dspark_n_routed_experts : c.n_routed_experts;
    Bf16(p + "ffn.gate.weight", {E, D}, 0.f, inv(D));
    F32(p + "ffn.gate.bias", {E}, 0.f, 0.1f);
    F32(p + "ffn.gate.bias_vl", {E}, 0.f, 0.1f);
    for (int64_t e = 0; e < E; ++e) {
      const std::string ep = absl::StrCat(p, "ffn.experts.", e, ".");
      Expert(ep + "w1", I, D, inv(D));
      Expert(ep + "w2", D, I, 0.3f * inv(I));
      Expert(ep + "w3", I, D, inv(D));
    }
    Fp8(p + "ffn.shared_experts.w1", I, D, inv(D));
    Fp8(p + "ffn.shared_experts.w2", D, I, 0.15f * inv(I));
    Fp8(p + "ffn.shared_experts.w3", I, D, inv(D));
    if (role.engram) {
      const size_t li = static_cast<size_t>(
          std::find(c.engram_layer_ids.begin(), c.engram_layer_ids.end(), l) -
          c.engram_layer_ids.begin());
      const int64_t rows = c.engram_num_embeddings[li], hd = c.engram_head_dim;
      const int64_t cols = (c.engram_max_ngram - 1) * c.engram_n_heads;
      const float scale = dsv4::Pow2Ceil(1.7320508075688772f / 448.f);
      E4m3(p + "engram.embed.weight", rows, hd, 1.f, scale);
      const uint8_t code = ScaleCode(scale);
      w_->AddGenerated(p + "engram.embed.scale", "F8_E8M0", {rows, hd / 32},
                       [=](uint8_t* out) { std::memset(out, code, rows * (hd / 32)); });
      Fp8(p + "engram.wkv", (n + 1) * D, cols * hd, 0.5f * inv(cols * hd));
      Bf16(p + "engram.q_weight", {n, D}, 1.f, 0.3f);
      Bf16(p + "engram.k_weight", {n, D}, 1.f, 0.3f);
    }
  }

  void All() {
    const Config& c = c_;
    const int64_t D = c.hidden_size, V = c.vocab_size;
    Bf16("embed.weight", {V, D}, 0.f, 1.f);
    Bf16("head.weight", {V, D}, 0.f, 2.5f / std::sqrt(static_cast<float>(D)));
    Bf16("norm.weight", {D}, 1.f, 0.1f);
    for (int64_t l = 0; l < c.TotalBlocks(); ++l) Block(l);
    if (c.num_dspark_layers > 0) {
      const std::string first = "mtp.0.", last = absl::StrCat("mtp.", c.num_dspark_layers - 1, ".");
      const int64_t nt = static_cast<int64_t>(c.dspark_target_layers.size()), R = c.dspark_markov_rank;
      Fp8(first + "main_proj", D, nt * D, 1.f / std::sqrt(static_cast<float>(nt * D)));
      Bf16(first + "main_norm.weight", {D}, 1.f, 0.1f);
      Bf16(last + "norm.weight", {D}, 1.f, 0.1f);
      Bf16(last + "markov_head.embed.weight", {V, R}, 0.f, 1.f);
      Bf16(last + "markov_head.head.weight", {V, R}, 0.f, 1.f / std::sqrt(static_cast<float>(R)));
      Bf16(last + "confidence_head.proj.weight", {1, D + R}, 0.f,
           1.f / std::sqrt(static_cast<float>(D + R)));
    }
  }

 private:
  const Config& c_;
  uint64_t seed_;
  SafetensorsWriter* w_;
};

struct Shape41 {
  int64_t vocab, hidden, heads, head_dim, q_lora, o_groups, o_lora, window;
  std::vector<int64_t> ratios, kv_sources, index_sources;
  int64_t candidate_source, candidate_blocks, candidate_block_size;
  int64_t index_heads, index_topk, experts, active, inter;
  double swiglu_limit;
  std::vector<int64_t> engram_layers;
  int64_t engram_vocab, engram_ngram, engram_heads, engram_head_dim;
  int64_t dspark_layers, noise_id, markov_rank, dspark_experts, dspark_active;
  int64_t dspark_block = 5;
  std::vector<int64_t> dspark_targets;
  int64_t image_token_id, yarn_original, max_pos;
};

std::string ConfigJson(const Shape41& s) {
  const int64_t nl = static_cast<int64_t>(s.ratios.size()) - s.dspark_layers;
  const auto primes = EngramPrimes(s.engram_vocab, static_cast<int64_t>(s.engram_layers.size()),
                                   s.engram_ngram, s.engram_heads);
  std::vector<int64_t> rows;
  for (const auto& layer : primes) {
    int64_t sum = 0;
    for (const auto& g : layer) {
      for (int64_t p : g) sum += p;
    }
    rows.push_back(sum);
  }
  Json tc = {{"vocab_size", s.vocab}, {"hidden_size", s.hidden}, {"num_hidden_layers", nl},
             {"num_attention_heads", s.heads}, {"num_key_value_heads", 1},
             {"head_dim", s.head_dim}, {"qk_rope_head_dim", 64}, {"q_lora_rank", s.q_lora},
             {"o_groups", s.o_groups}, {"o_lora_rank", s.o_lora},
             {"moe_intermediate_size", s.inter}, {"n_routed_experts", s.experts},
             {"num_experts_per_tok", s.active}, {"n_shared_experts", 1},
             {"scoring_func", "sqrtsoftplus"}, {"topk_method", "noaux_tc"},
             {"norm_topk_prob", true}, {"routed_scaling_factor", 1.5},
             {"swiglu_limit", s.swiglu_limit}, {"rms_norm_eps", 1e-20},
             {"sliding_window", s.window}, {"rope_theta", 10000},
             {"rope_scaling",
              {{"rope_type", "yarn"}, {"factor", 16}, {"beta_fast", 32}, {"beta_slow", 1},
               {"original_max_position_embeddings", s.yarn_original}}},
             {"compress_rope_theta", 160000}, {"compress_ratios", s.ratios},
             {"kv_source_layer_ids", s.kv_sources}, {"index_source_layer_ids", s.index_sources},
             {"index_n_heads", s.index_heads}, {"index_head_dim", 128},
             {"index_topk", s.index_topk}, {"candidate_source_layer_id", s.candidate_source},
             {"candidate_topk_blocks", s.candidate_blocks},
             {"candidate_block_size", s.candidate_block_size}, {"hc_mult", 4},
             {"hc_sinkhorn_iters", 20}, {"hc_eps", 1e-6}, {"engram_layer_ids", s.engram_layers},
             {"engram_num_embeddings", rows}, {"engram_max_ngram_size", s.engram_ngram},
             {"engram_vocab_size", s.engram_vocab}, {"engram_n_heads", s.engram_heads},
             {"engram_head_dim", s.engram_head_dim}, {"engram_pad_token_id", 2},
             {"engram_compressed_vocab_size", TestCid(s.vocab - 1) + 1},
             {"num_nextn_predict_layers", s.dspark_layers}, {"dspark_block_size", s.dspark_block},
             {"dspark_noise_token_id", s.noise_id}, {"dspark_target_layer_ids", s.dspark_targets},
             {"dspark_markov_rank", s.markov_rank},
             {"dspark_n_routed_experts", s.dspark_experts},
             {"dspark_num_experts_per_tok", s.dspark_active},
             {"max_position_embeddings", s.max_pos}, {"bos_token_id", 0}, {"eos_token_id", 1}};
  Json root = {{"architectures", {"DeepseekV41ForCausalLM"}},
               {"model_type", "deepseek_v41"},
               {"image_token_id", s.image_token_id},
               {"bos_token_id", 0},
               {"eos_token_id", 1},
               {"pad_token_id", 2},
               {"torch_dtype", "bfloat16"},
               {"quantization_config",
                {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}, {"fmt", "e4m3"},
                 {"weight_block_size", {32, 32}}, {"scale_fmt", "ue8m0"},
                 {"expert_dtype", "fp4"}}},
               {"text_config", tc},
               // No vision tower in test models (image positions use embed[image_token_id]).
               {"vision_config", {{"num_hidden_layers", 0}}}};
  return root.dump(2);
}

// engram_tables.json: token map (TestCid), primes/offsets (derived as from config.json), odd
// multipliers below bound = (2^63-1) // compressed_vocab // 2 (spec §4.2; random in place of
// numpy's PCG64 stream, which only matters for the released tables).
std::string EngramTablesJson(const Config& c, uint64_t seed) {
  Json j;
  j["_comment"] =
      "Not an official file: the test model's stand-in for the tokenizer-derived token map "
      "(deepinfer make-test-model --arch deepseek_v41).";
  std::vector<int32_t> map(c.vocab_size);
  for (int64_t t = 0; t < c.vocab_size; ++t) map[t] = TestCid(t);
  j["compressed_vocab_size"] = c.engram_compressed_vocab;
  j["token_map"] = map;
  j["pad_id"] = map[c.engram_pad_token_id];
  j["layer_ids"] = c.engram_layer_ids;
  const auto primes = EngramPrimes(c.engram_vocab_size,
                                   static_cast<int64_t>(c.engram_layer_ids.size()),
                                   c.engram_max_ngram, c.engram_n_heads);
  j["primes"] = primes;
  Json offsets = Json::array(), mults = Json::array();
  const int64_t bound =
      std::max<int64_t>(1, std::numeric_limits<int64_t>::max() / c.engram_compressed_vocab / 2);
  for (size_t li = 0; li < primes.size(); ++li) {
    std::vector<int64_t> off;
    int64_t sum = 0;
    for (const auto& g : primes[li]) {
      for (int64_t p : g) {
        off.push_back(sum);
        sum += p;
      }
    }
    offsets.push_back(off);
    Rng rng(seed, absl::StrCat("engram.multipliers.", c.engram_layer_ids[li]));
    std::vector<int64_t> m;
    for (int64_t k = 0; k < c.engram_max_ngram; ++k) {
      m.push_back(2 * static_cast<int64_t>(rng.Next() % static_cast<uint64_t>(bound)) + 1);
    }
    mults.push_back(m);
  }
  j["offsets"] = offsets;
  j["multipliers"] = mults;
  return j.dump();
}

}  // namespace

absl::StatusOr<std::string> TestModelConfigJson41(const std::string& preset) {
  Shape41 s;
  // tiny: shared/spec/deepseek-v41.md §10.
  s.vocab = 512;
  s.hidden = 256;
  s.heads = 4;
  s.head_dim = 128;
  s.q_lora = 128;
  s.o_groups = 2;
  s.o_lora = 128;
  s.window = 16;
  s.ratios = {0, 0, 2, 2, 1, 1, 1, 1, 0};
  s.kv_sources = {2, 4};
  s.index_sources = {2, 4, 6};
  s.candidate_source = 4;
  s.candidate_blocks = 5;
  s.candidate_block_size = 4;
  s.index_heads = 4;
  s.index_topk = 16;
  s.experts = 8;
  s.active = 2;
  s.inter = 128;
  s.swiglu_limit = 2.75;
  s.engram_layers = {1};
  s.engram_vocab = 50;
  s.engram_ngram = 3;
  s.engram_heads = 2;
  s.engram_head_dim = 64;
  s.dspark_layers = 1;
  s.noise_id = 500;
  s.markov_rank = 32;
  s.dspark_experts = 4;
  s.dspark_active = 2;
  s.dspark_targets = {5, 6, 7};
  s.image_token_id = 510;
  s.yarn_original = 64;
  s.max_pos = 4096;
  if (preset == "tiny") return ConfigJson(s);
  if (preset == "alt") {
    // A second small configuration for the generality checks (deepseek_v41_test DsV41Alt*):
    // other widths, head count and head_dim, 10 layers with three ratio-2 and five ratio-1
    // layers, KV sources 2 and 5 (decoder 6-9: four replay layers), window 12, 6 experts top-3,
    // two Engram layers with 4-grams, three DSpark stages (as the release) with a block of 4
    // over layers 6, 8 and 9.
    s.hidden = 320;
    s.heads = 2;
    s.head_dim = 192;
    s.q_lora = 96;
    s.o_groups = 2;
    s.o_lora = 64;
    s.window = 12;
    s.ratios = {0, 0, 2, 2, 2, 1, 1, 1, 1, 1, 0, 0, 0};
    s.dspark_layers = 3;
    s.dspark_block = 4;
    s.kv_sources = {2, 5};
    s.index_sources = {2, 5, 7};
    s.candidate_source = 5;
    s.candidate_blocks = 3;
    s.candidate_block_size = 4;
    s.index_heads = 2;
    s.index_topk = 8;
    s.experts = 6;
    s.active = 3;
    s.inter = 96;
    s.engram_layers = {1, 3};
    s.engram_vocab = 60;
    s.engram_ngram = 4;
    s.engram_heads = 2;
    s.engram_head_dim = 32;
    s.markov_rank = 16;
    s.dspark_experts = 3;
    s.dspark_active = 2;
    s.dspark_targets = {6, 8, 9};
    return ConfigJson(s);
  }
  // Both larger presets use the DeepSeek tokenizer's ids: noise = <｜System｜> 128799 (V4.1),
  // image_token_id 129264 (the release's).
  s.vocab = 129280;
  s.noise_id = 128799;
  s.image_token_id = 129264;
  s.yarn_original = 4096;
  s.max_pos = 65536;
  s.swiglu_limit = 10;
  s.engram_vocab = 20000;
  if (preset == "demo") {
    // The release's role pattern in 8 layers: SWA 0-1 (Engram at 1), ratio-2 Full 2 + Reuse 3,
    // ratio-1 Full + candidate source 4 (last KV source: decoder 5-7), Reuse 5, Reindex 6,
    // Reuse 7; one DSpark stage on the inputs of 5-7.
    s.window = 128;
    s.index_topk = 32;
    s.candidate_blocks = 16;
    s.candidate_block_size = 8;
    s.experts = 16;
    return ConfigJson(s);
  }
  if (preset == "bench") {
    s.hidden = 1024;
    s.heads = 16;
    s.head_dim = 512;
    s.q_lora = 512;
    s.o_groups = 4;
    s.o_lora = 512;
    s.window = 128;
    s.ratios = {0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 0};
    s.kv_sources = {2, 6};
    s.index_sources = {2, 6, 8, 10};
    s.candidate_source = 6;
    s.candidate_blocks = 128;
    s.candidate_block_size = 8;
    s.index_heads = 16;
    s.index_topk = 128;
    s.experts = 64;
    s.active = 6;
    s.inter = 512;
    s.engram_heads = 4;
    s.engram_head_dim = 128;
    s.dspark_experts = 16;
    s.dspark_active = 3;
    s.markov_rank = 64;
    s.dspark_targets = {9, 10, 11};
    return ConfigJson(s);
  }
  return absl::NotFoundError(absl::StrCat("unknown DeepSeek-V4.1 test-model preset '", preset,
                                          "' (tiny, alt, demo, bench)"));
}

absl::Status WriteTestModel41(const std::string& config_json, uint64_t seed,
                              const std::string& dir) {
  ASSIGN_OR_RETURN(Config c, Config::Parse(config_json, dir + "/config.json"));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  auto write_text = [&](const std::string& name, const std::string& text) -> absl::Status {
    std::ofstream out(dir + "/" + name, std::ios::binary);
    out << text;
    if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot write ", dir, "/", name));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(write_text("config.json", config_json + "\n"));
  RETURN_IF_ERROR(write_text("generation_config.json",
                             "{\n  \"bos_token_id\": 0,\n  \"eos_token_id\": 1,\n  \"do_sample\": "
                             "true,\n  \"temperature\": 1.0,\n  \"top_p\": 1.0\n}\n"));
  if (!c.engram_layer_ids.empty()) {
    RETURN_IF_ERROR(write_text("engram_tables.json", EngramTablesJson(c, seed) + "\n"));
  }
  SafetensorsWriter writer;
  Builder b(c, seed, &writer);
  b.All();
  return writer.Write(dir + "/model.safetensors");
}

}  // namespace deepinfer::model::dsv41
