#include "model/deepseek_v4_make_test_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status.h"
#include "model/deepseek_v4_numerics.h"
#include "model/test_model_random.h"

namespace deepinfer::model::dsv4 {
namespace {

using testgen::Rng;

std::vector<int64_t> Shape2(int64_t r, int64_t c) { return {r, c}; }

class Builder {
 public:
  Builder(const Config& c, uint64_t seed, SafetensorsWriter* w) : c_(c), seed_(seed), w_(w) {}

  void F32(const std::string& name, std::vector<int64_t> shape, float mean, float std) {
    testgen::AddRandomF32(w_, seed_, name, std::move(shape), mean, std);
  }
  void Bf16(const std::string& name, std::vector<int64_t> shape, float mean, float std) {
    testgen::AddRandomBf16(w_, seed_, name, std::move(shape), mean, std);
  }
  // FP8 e4m3 weight + E8M0 128x128 block scales (`prefix.weight`, `prefix.scale`).
  void Fp8(const std::string& prefix, int64_t rows, int64_t cols, float std) {
    const uint64_t seed = seed_;
    const int64_t sr = (rows + 127) / 128, sc = (cols + 127) / 128;
    // Uniform values: amax of a block is ~sqrt(3) std, so the block scale is fixed up front.
    const float amax = 1.7320508075688772f * std;
    const float scale = Pow2Ceil(amax / 448.f);
    int e;
    std::frexp(scale, &e);
    const uint8_t scale_code = static_cast<uint8_t>(e - 1 + 127);
    const std::string wname = prefix + ".weight";
    w_->AddGenerated(wname, "F8_E4M3", Shape2(rows, cols), [=](uint8_t* out) {
      Rng rng(seed, wname);
      const float inv = 1.0f / scale;
      for (int64_t i = 0; i < rows * cols; ++i) out[i] = F32ToE4M3(rng.Uniform(std) * inv);
    });
    w_->AddGenerated(prefix + ".scale", "F8_E8M0", Shape2(sr, sc),
                     [=](uint8_t* out) { std::memset(out, scale_code, sr * sc); });
  }
  // Packed MXFP4: random e2m1 codes (uniform over the 16 codes, RMS 2.93) with per-32 scales
  // chosen so the dequantised weights have roughly the requested std.
  void Fp4(const std::string& prefix, int64_t rows, int64_t cols, float std) {
    const uint64_t seed = seed_;
    const float s = Pow2Ceil(std / 2.93f);
    int e;
    std::frexp(s, &e);
    const uint8_t base_code = static_cast<uint8_t>(e - 1 + 127);
    const std::string wname = prefix + ".weight";
    w_->AddGenerated(wname, "I8", Shape2(rows, cols / 2), [=](uint8_t* out) {
      Rng rng(seed, wname);
      int64_t i = 0;
      const int64_t n = rows * cols / 2;
      while (i < n) {
        uint64_t r = rng.Next();
        for (int j = 0; j < 8 && i < n; ++j, ++i) out[i] = static_cast<uint8_t>(r >> (8 * j));
      }
    });
    const std::string sname = prefix + ".scale";
    w_->AddGenerated(sname, "F8_E8M0", Shape2(rows, cols / 32), [=](uint8_t* out) {
      Rng rng(seed, sname);
      // Scales alternate between 2^k and 2^(k-1) so the per-block scale path is exercised.
      for (int64_t i = 0; i < rows * cols / 32; ++i) {
        out[i] = static_cast<uint8_t>(base_code - static_cast<uint8_t>(rng.Next() & 1));
      }
    });
  }

  void Hc(const std::string& prefix, const std::string& kind, int64_t mix) {
    const int64_t n = c_.hc_mult, nD = n * c_.hidden_size;
    F32(prefix + "hc_" + kind + "_fn", {mix, nD}, 0.f, 0.5f / std::sqrt(static_cast<float>(nD)));
    F32(prefix + "hc_" + kind + "_base", {mix}, 0.f, 0.5f);
    F32(prefix + "hc_" + kind + "_scale", {kind == "head" ? 1 : int64_t{3}}, 1.f, 0.1f);
  }

  void Compressor(const std::string& p, int64_t ratio, int64_t width) {
    const int64_t coff = ratio == 4 ? 2 : 1, D = c_.hidden_size;
    const float sd = 1.f / std::sqrt(static_cast<float>(D));
    F32(p + "ape", {ratio, coff * width}, 0.f, 0.3f);
    Bf16(p + "wkv.weight", {coff * width, D}, 0.f, sd);
    Bf16(p + "wgate.weight", {coff * width, D}, 0.f, sd);
    Bf16(p + "norm.weight", {width}, 1.f, 0.1f);
  }

  void Block(const std::string& p, int64_t layer) {
    const Config& c = c_;
    const int64_t D = c.hidden_size, H = c.num_heads, d = c.head_dim, n = c.hc_mult;
    const int64_t G = c.o_groups, L = c.o_lora_rank, Q = c.q_lora_rank, I = c.moe_inter;
    const int64_t E = c.n_routed_experts, K = c.n_active_experts;
    auto inv = [](int64_t x) { return 1.f / std::sqrt(static_cast<float>(x)); };
    Hc(p, "attn", (2 + n) * n);
    Hc(p, "ffn", (2 + n) * n);
    Bf16(p + "attn_norm.weight", {D}, 1.f, 0.1f);
    Bf16(p + "ffn_norm.weight", {D}, 1.f, 0.1f);
    F32(p + "attn.attn_sink", {H}, 0.f, 1.f);
    Fp8(p + "attn.wq_a", Q, D, inv(D));
    Bf16(p + "attn.q_norm.weight", {Q}, 1.f, 0.1f);
    Fp8(p + "attn.wq_b", H * d, Q, inv(Q));
    Fp8(p + "attn.wkv", d, D, inv(D));
    Bf16(p + "attn.kv_norm.weight", {d}, 1.f, 0.1f);
    Fp8(p + "attn.wo_a", G * L, H * d / G, inv(H * d / G));
    Fp8(p + "attn.wo_b", D, G * L, 0.15f * inv(G * L));
    const int64_t ratio = c.Ratio(layer);
    if (ratio > 0) {
      Compressor(p + "attn.compressor.", ratio, d);
      if (ratio == 4) {
        const int64_t IH = c.index_n_heads, ID = c.index_head_dim;
        Fp8(p + "attn.indexer.wq_b", IH * ID, Q, inv(Q));
        Bf16(p + "attn.indexer.weights_proj.weight", {IH, D}, 0.f, inv(D));
        Compressor(p + "attn.indexer.compressor.", 4, ID);
      }
    }
    Bf16(p + "ffn.gate.weight", {E, D}, 0.f, inv(D));
    if (layer < c.num_hash_layers) {
      const std::string name = p + "ffn.gate.tid2eid";
      const uint64_t seed = seed_;
      const int64_t V = c.vocab_size;
      w_->AddGenerated(name, "I64", Shape2(V, K), [=](uint8_t* out) {
        Rng rng(seed, name);
        std::vector<int64_t> perm(E);
        for (int64_t t = 0; t < V; ++t) {
          std::iota(perm.begin(), perm.end(), 0);
          for (int64_t j = 0; j < K; ++j) {  // partial Fisher-Yates: K distinct experts
            const int64_t r = j + static_cast<int64_t>(rng.Next() % (E - j));
            std::swap(perm[j], perm[r]);
            std::memcpy(out + 8 * (t * K + j), &perm[j], 8);
          }
        }
      });
    } else {
      F32(p + "ffn.gate.bias", {E}, 0.f, 0.1f);
    }
    for (int64_t e = 0; e < E; ++e) {
      const std::string ep = absl::StrCat(p, "ffn.experts.", e, ".");
      if (c.expert_fp4) {
        Fp4(ep + "w1", I, D, inv(D));
        Fp4(ep + "w2", D, I, 0.3f * inv(I));
        Fp4(ep + "w3", I, D, inv(D));
      } else {
        Fp8(ep + "w1", I, D, inv(D));
        Fp8(ep + "w2", D, I, 0.3f * inv(I));
        Fp8(ep + "w3", I, D, inv(D));
      }
    }
    Fp8(p + "ffn.shared_experts.w1", I, D, inv(D));
    Fp8(p + "ffn.shared_experts.w2", D, I, 0.15f * inv(I));
    Fp8(p + "ffn.shared_experts.w3", I, D, inv(D));
  }

  void All() {
    const Config& c = c_;
    const int64_t D = c.hidden_size, V = c.vocab_size;
    Bf16("embed.weight", {V, D}, 0.f, 1.f);
    Bf16("head.weight", {V, D}, 0.f, 2.5f / std::sqrt(static_cast<float>(D)));
    Bf16("norm.weight", {D}, 1.f, 0.1f);
    Hc("", "head", c.hc_mult);
    for (int64_t l = 0; l < c.num_layers; ++l) Block(absl::StrCat("layers.", l, "."), l);
    for (int64_t j = 0; j < c.num_mtp_layers; ++j) {
      const std::string p = absl::StrCat("mtp.", j, ".");
      Block(p, c.num_layers + j);
      Fp8(p + "e_proj", D, D, 0.7f / std::sqrt(static_cast<float>(D)));
      Fp8(p + "h_proj", D, D, 0.7f / std::sqrt(static_cast<float>(D)));
      Bf16(p + "enorm.weight", {D}, 1.f, 0.1f);
      Bf16(p + "hnorm.weight", {D}, 1.f, 0.1f);
      Bf16(p + "norm.weight", {D}, 1.f, 0.1f);
      Hc(p, "head", c.hc_mult);
    }
  }

 private:
  const Config& c_;
  uint64_t seed_;
  SafetensorsWriter* w_;
};

Config Base() {
  Config c;
  c.vocab_size = 512;
  c.hidden_size = 256;
  c.num_layers = 4;
  c.num_mtp_layers = 1;
  c.num_heads = 4;
  c.head_dim = 128;
  c.rope_dim = 64;
  c.q_lora_rank = 128;
  c.o_groups = 2;
  c.o_lora_rank = 128;
  c.window = 16;
  c.compress_ratios = {0, 4, 16, 4, 0};
  c.rope_theta = 10000;
  c.compress_rope_theta = 160000;
  c.yarn_original_len = 64;
  c.yarn_factor = 16;
  c.yarn_beta_fast = 32;
  c.yarn_beta_slow = 1;
  c.index_n_heads = 4;
  c.index_head_dim = 128;
  c.index_topk = 4;
  c.n_routed_experts = 8;
  c.n_active_experts = 2;
  c.moe_inter = 128;
  c.n_shared_experts = 1;
  c.num_hash_layers = 2;
  c.route_scale = 1.5;
  c.swiglu_limit = 2.75;
  c.hc_mult = 4;
  c.hc_sinkhorn_iters = 20;
  c.hc_eps = 1e-6;
  c.rms_eps = 1e-6;
  c.max_position_embeddings = 4096;
  c.bos_token_id = 0;
  c.eos_token_ids = {1};
  c.expert_fp4 = true;
  return c;
}

}  // namespace

absl::StatusOr<Config> TestModelPreset(const std::string& name) {
  Config c = Base();
  if (name == "tiny") return c;
  if (name == "tiny128") {
    c.compress_ratios = {0, 4, 128, 4, 0};
    c.hc_mult = 2;  // the optional second config of spec §7
    c.num_hash_layers = 1;
    return c;
  }
  if (name == "demo") {
    c.vocab_size = 129280;
    c.hidden_size = 256;
    c.num_layers = 6;
    c.compress_ratios = {0, 4, 128, 4, 128, 0, 0};
    c.window = 128;
    c.index_topk = 16;
    c.n_routed_experts = 16;
    c.n_active_experts = 2;
    c.num_hash_layers = 2;
    c.yarn_original_len = 4096;
    c.max_position_embeddings = 65536;
    c.swiglu_limit = 10;
    return c;
  }
  if (name == "bench") {
    c.vocab_size = 129280;
    c.hidden_size = 1024;
    c.num_layers = 8;
    c.num_heads = 16;
    c.head_dim = 512;
    c.q_lora_rank = 512;
    c.o_groups = 4;
    c.o_lora_rank = 512;
    c.window = 128;
    c.compress_ratios = {0, 0, 4, 128, 4, 128, 4, 0, 0};
    c.index_n_heads = 16;
    c.index_topk = 64;
    c.n_routed_experts = 64;
    c.n_active_experts = 6;
    c.moe_inter = 512;
    c.num_hash_layers = 3;
    c.yarn_original_len = 4096;
    c.max_position_embeddings = 65536;
    c.swiglu_limit = 10;
    return c;
  }
  return absl::NotFoundError(absl::StrCat("unknown DeepSeek-V4 test-model preset '", name,
                                          "' (tiny, tiny128, demo, bench)"));
}

void BuildTestWeights(const Config& config, uint64_t seed, SafetensorsWriter* writer) {
  Builder b(config, seed, writer);
  b.All();
}

absl::Status WriteTestModel(const Config& config, uint64_t seed, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::InvalidArgumentError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  auto write_text = [&](const std::string& name, const std::string& text) -> absl::Status {
    std::ofstream out(dir + "/" + name, std::ios::binary);
    out << text;
    if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot write ", dir, "/", name));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(write_text("config.json", config.ToJson() + "\n"));
  RETURN_IF_ERROR(write_text(
      "generation_config.json",
      absl::StrCat("{\n  \"bos_token_id\": ", config.bos_token_id, ",\n  \"eos_token_id\": ",
                   config.eos_token_ids.empty() ? 1 : config.eos_token_ids[0],
                   ",\n  \"do_sample\": true,\n  \"temperature\": 1.0,\n  \"top_p\": 1.0\n}\n")));
  SafetensorsWriter writer;
  BuildTestWeights(config, seed, &writer);
  return writer.Write(dir + "/model.safetensors");
}

}  // namespace deepinfer::model::dsv4
