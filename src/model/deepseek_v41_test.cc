// DeepSeek-V4.1: config / layout unit tests, the compact formats, and the independent goldens
// of ../shared/golden/dsv41-tiny-a (README there): stage-by-stage teacher-forced comparison with
// trace_040.safetensors, end-to-end logits in both numeric tiers, the prompt-40 debug values,
// the image variant, and the invariants (decode == prefill, chunking, batch invariance).
#include "model/deepseek_v41.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "common/status.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "model/checkpoint.h"
#include "model/deepseek_v41_engram.h"
#include "model/deepseek_v41_formats.h"
#include "model/deepseek_v41_kv_layout.h"
#include "model/deepseek_v41_make_test_model.h"
#include "model/deepseek_v41_numpy_rng.h"
#include "model/deepseek_v41_session_testing.h"
#include "model/deepseek_v41_weights.h"
#include "model/deepseek_v4_golden_testing.h"
#include "nlohmann/json.hpp"
#include "tokenizer/engram_token_map.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::model::dsv41 {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

std::string SharedDir() { return DEEPINFER_SHARED_DIR; }
std::string ModelDir() { return SharedDir() + "/models/dsv41-tiny-a"; }
std::string GoldenDir() { return SharedDir() + "/golden/dsv41-tiny-a"; }

#define SKIP_WITHOUT_SHARED()                                                                      \
  if (!fs::exists(ModelDir() + "/config.json") || !fs::exists(GoldenDir() + "/prompt_040.json")) { \
    GTEST_SKIP() << "shared dsv41-tiny-a model/goldens not available";                             \
  }

using dsv4::Flat;
using dsv4::Ints;
using dsv4::ReadJson;
using dsv4::ReadText;

// ---------------------------------------------------------------------------------------------
// Config and layout.

// The released config.json's text fields as the spec quotes them (§1.1), in the nested layout.
std::string ReleasedConfigText() {
  Json tc = {{"vocab_size", 129280},
             {"hidden_size", 5120},
             {"num_hidden_layers", 40},
             {"num_attention_heads", 64},
             {"num_key_value_heads", 1},
             {"head_dim", 512},
             {"qk_rope_head_dim", 64},
             {"q_lora_rank", 1280},
             {"o_groups", 8},
             {"o_lora_rank", 1024},
             {"moe_intermediate_size", 2304},
             {"n_routed_experts", 384},
             {"num_experts_per_tok", 6},
             {"n_shared_experts", 1},
             {"scoring_func", "sqrtsoftplus"},
             {"topk_method", "noaux_tc"},
             {"norm_topk_prob", true},
             {"routed_scaling_factor", 1.5},
             {"swiglu_limit", 10.0},
             {"rms_norm_eps", 1e-20},
             {"sliding_window", 128},
             {"rope_theta", 10000},
             {"rope_scaling",
              {{"rope_type", "yarn"},
               {"factor", 16},
               {"beta_fast", 32},
               {"beta_slow", 1},
               {"original_max_position_embeddings", 65536}}},
             {"compress_rope_theta", 160000},
             {"kv_source_layer_ids", {2, 8, 14, 20}},
             {"index_source_layer_ids", {2, 8, 14, 20, 24, 28, 32, 36}},
             {"index_n_heads", 32},
             {"index_head_dim", 128},
             {"index_topk", 512},
             {"candidate_source_layer_id", 20},
             {"candidate_topk_blocks", 2048},
             {"candidate_block_size", 8},
             {"hc_mult", 4},
             {"hc_sinkhorn_iters", 20},
             {"hc_eps", 1e-6},
             {"engram_layer_ids", {1, 14}},
             {"engram_num_embeddings", {384006168, 384016682}},
             {"engram_max_ngram_size", 4},
             {"engram_vocab_size", 16000000},
             {"engram_n_heads", 8},
             {"engram_head_dim", 256},
             {"engram_pad_token_id", 2},
             {"engram_compressed_vocab_size", 99092},
             {"num_nextn_predict_layers", 3},
             {"dspark_block_size", 5},
             {"dspark_noise_token_id", 128799},
             {"dspark_target_layer_ids", {37, 38, 39}},
             {"dspark_markov_rank", 256},
             {"dspark_n_routed_experts", 128},
             {"dspark_num_experts_per_tok", 3},
             {"max_position_embeddings", 1048576}};
  std::vector<int> ratios = {0, 0};
  for (int i = 0; i < 18; ++i) ratios.push_back(2);
  for (int i = 0; i < 20; ++i) ratios.push_back(1);
  for (int i = 0; i < 3; ++i) ratios.push_back(0);
  tc["compress_ratios"] = ratios;
  Json root = {{"architectures", {"DeepseekV41ForCausalLM"}},
               {"model_type", "deepseek_v41"},
               {"image_token_id", 129264},
               {"quantization_config",
                {{"quant_method", "fp8"},
                 {"activation_scheme", "dynamic"},
                 {"weight_block_size", {32, 32}},
                 {"scale_fmt", "ue8m0"},
                 {"expert_dtype", "fp4"}}},
               {"text_config", tc},
               {"vision_config", {{"num_hidden_layers", 32}, {"hidden_size", 1024}}}};
  return root.dump();
}

TEST(DsV41Config, ReleasedRolesAndStoredRegion) {
  ASSERT_OK_AND_ASSIGN(Config c, Config::Parse(ReleasedConfigText(), "released config.json"));
  EXPECT_EQ(c.TotalBlocks(), 43);
  // §1.2 role table.
  EXPECT_EQ(c.roles[0].role, Role::kSwa);
  EXPECT_EQ(c.roles[2].role, Role::kFull);
  EXPECT_EQ(c.roles[3].role, Role::kReuse);
  EXPECT_EQ(c.roles[3].kv_source, 2);
  EXPECT_EQ(c.roles[19].kv_source, 14);
  EXPECT_EQ(c.roles[20].role, Role::kFull);
  EXPECT_TRUE(c.roles[20].candidate_source);
  EXPECT_FALSE(c.roles[20].candidate_masked);
  EXPECT_EQ(c.roles[24].role, Role::kReindex);
  EXPECT_TRUE(c.roles[24].candidate_masked);
  EXPECT_EQ(c.roles[24].kv_source, 20);
  EXPECT_EQ(c.roles[25].role, Role::kReuse);
  EXPECT_EQ(c.roles[25].index_source, 24);
  EXPECT_EQ(c.roles[39].index_source, 36);
  EXPECT_EQ(c.roles[40].role, Role::kSwa);
  EXPECT_TRUE(c.roles[1].engram && c.roles[14].engram);
  KvIndices idx;
  KvLayout L = BuildKvLayout41(c, false, &idx);
  // §7: stored region = 20 x 134 x 528 B = 1,415,040 B, first in the slot.
  EXPECT_EQ(idx.num_encoder_layers, 20);
  EXPECT_EQ(idx.ring_slots, 134);
  EXPECT_EQ(idx.window_row_bytes, 528);
  EXPECT_EQ(idx.stored_bytes, 1415040);
  ASSERT_EQ(idx.encoder_windows, 0);
  EXPECT_EQ(L.state[0].bytes, 1415040);
  EXPECT_EQ(L.StateOffset(1), 1415040);
  // §6: 288 B NVFP4 rows, 68 B MXFP4 index keys; per 128 tokens 3 x 64 + 128 rows of each.
  int64_t comp_rows = 0;
  for (const auto& p : L.paged) {
    if (p.name.find("compressed_kv") != std::string::npos) {
      EXPECT_EQ(p.row_bytes, 288);
      comp_rows += p.rows_per_block;
    }
    if (p.name.find("indexer_k") != std::string::npos) {
      EXPECT_EQ(p.row_bytes, 68);
    }
  }
  EXPECT_EQ(comp_rows, 3 * 64 + 128);
  EXPECT_EQ(L.window_tokens, 128);
}

// Absent fields take the official code's defaults (OFF41 ModelArgs / get_moe_config), layer
// lists are sets, and values the engine does not implement are errors, never another model.
TEST(DsV41Config, OfficialDefaultsSortedListsAndUnsupportedValues) {
  Json root = Json::parse(ReleasedConfigText());
  Json& tc = root["text_config"];
  for (const char* k : {"dspark_n_routed_experts", "dspark_num_experts_per_tok",
                        "dspark_markov_rank", "engram_pad_token_id", "sliding_window"}) {
    tc.erase(k);
  }
  tc["dspark_target_layer_ids"] = {39, 37, 38};
  tc["kv_source_layer_ids"] = {20, 2, 14, 8};
  ASSERT_OK_AND_ASSIGN(Config c, Config::Parse(root.dump(), "defaults"));
  EXPECT_EQ(c.dspark_n_routed_experts, 384);  // `dspark_n_routed_experts or n_routed_experts`
  EXPECT_EQ(c.dspark_n_active_experts, 6);
  EXPECT_EQ(c.dspark_markov_rank, 256);
  EXPECT_EQ(c.engram_pad_token_id, 2);
  EXPECT_EQ(c.window, 128);
  EXPECT_EQ(c.dspark_target_layers, (std::vector<int64_t>{37, 38, 39}));
  EXPECT_EQ(c.LastKvSource(), 20);
  EXPECT_EQ(c.roles[19].kv_source, 14);
  EXPECT_EQ(c.roles[24].kv_source, 20);
  auto with = [&](const char* key, Json value) {
    Json r = Json::parse(ReleasedConfigText());
    r["text_config"][key] = value;
    return Config::Parse(r.dump(), "bad").status();
  };
  EXPECT_THAT(with("scoring_func", "softmax"), ::deepinfer::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                                         ::testing::HasSubstr("scoring_func")));
  EXPECT_THAT(with("norm_topk_prob", false), ::deepinfer::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                                       ::testing::HasSubstr("norm_topk_prob")));
  EXPECT_THAT(with("dspark_target_layer_ids", Json::array({37, 40})),
              ::deepinfer::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("dspark_target_layer_ids")));
  EXPECT_THAT(with("engram_pad_token_id", 129280),
              ::deepinfer::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("engram_pad_token_id")));
  EXPECT_OK(with("scoring_func", "sqrtsoftplus"));
}

TEST(DsV41Config, FlatInferenceConfigMatchesNested) {
  SKIP_WITHOUT_SHARED();
  ASSERT_OK_AND_ASSIGN(Config a, Config::Parse(ReadText(ModelDir() + "/config.json"), "nested"));
  ASSERT_OK_AND_ASSIGN(Config b,
                       Config::Parse(ReadText(ModelDir() + "/inference/config.json"), "flat"));
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.compress_ratios, b.compress_ratios);
  EXPECT_EQ(a.kv_source_layers, b.kv_source_layers);
  EXPECT_EQ(a.yarn_original_len, b.yarn_original_len);
  EXPECT_EQ(a.candidate_block_size, b.candidate_block_size);
  EXPECT_EQ(a.engram_pad_token_id, b.engram_pad_token_id);
  EXPECT_EQ(a.dspark_n_active_experts, b.dspark_n_active_experts);
  EXPECT_EQ(a.swiglu_limit, b.swiglu_limit);
}

TEST(DsV41Config, LoadModelDispatchesOnArchitecture) {
  SKIP_WITHOUT_SHARED();
  LoadOptions o;
  o.show_progress = false;
  ASSERT_OK_AND_ASSIGN(auto m, LoadModel(ModelDir(), o));
  EXPECT_EQ(m->info().architecture, "DeepseekV41ForCausalLM");
  EXPECT_EQ(m->info().vocab_size, 512);
  EXPECT_EQ(m->kv_layout().window_tokens, 16);
  // Tiny: encoder layers 0..3, rings of 16 + 6 slots of 128 + 4 bytes.
  EXPECT_EQ(m->kv_layout().state[0].bytes, 4 * 22 * 132);
}

TEST(DsV41Formats, CompactRowsAreLossless) {
  std::vector<float> x(512);
  uint32_t seed = 7;
  for (auto& v : x) {
    seed = seed * 1664525u + 1013904223u;
    v = (static_cast<float>(seed >> 8) / (1 << 24) - 0.5f) * 3.0f;
  }
  for (int kind = 0; kind < 3; ++kind) {
    std::vector<float> q = x, back(512);
    std::vector<uint8_t> row(600);
    if (kind == 0) {
      Mxfp8Quantize(q.data(), 512, row.data());
      Mxfp8Decode(row.data(), 512, back.data());
    } else if (kind == 1) {
      Nvfp4Quantize(q.data(), 512, row.data());
      Nvfp4Decode(row.data(), 512, back.data());
    } else {
      Mxfp4Quantize(q.data(), 512, row.data());
      Mxfp4Decode(row.data(), 512, back.data());
    }
    EXPECT_EQ(q, back) << "format " << kind;
  }
  // NVFP4 ties to even: 0.25 -> 0, 0.75 -> 1 (scale 1 block: amax 6).
  std::vector<float> t(16, 0.f);
  t[0] = 6.f;
  t[1] = 0.25f;
  t[2] = 0.75f;
  t[3] = 2.5f;
  t[4] = 5.f;
  Nvfp4Quantize(t.data(), 16, nullptr);
  EXPECT_EQ(t[1], 0.f);
  EXPECT_EQ(t[2], 1.f);
  EXPECT_EQ(t[3], 2.f);
  EXPECT_EQ(t[4], 4.f);
}

std::unique_ptr<DeepseekV41Model> LoadTiny(bool fp32) {
  LoadOptions o;
  o.fp32_activations = fp32;
  o.show_progress = false;
  auto m = LoadDeepseekV41(ModelDir(), o);
  CHECK(m.ok()) << m.status();
  return std::unique_ptr<DeepseekV41Model>(static_cast<DeepseekV41Model*>(m->release()));
}

using dsv4::ArgMax;
using dsv4::CompareLogits;
using dsv4::LogitStats;

// ---------------------------------------------------------------------------------------------
// Stage by stage (teacher forced).

class TraceCompare : public Tracer {
 public:
  explicit TraceCompare(const SafetensorsFile* trace) : trace_(trace) {}
  struct Result {
    int64_t n = 0, off_ulp = 0;
    double max_abs = 0;
  };
  std::map<std::string, Result> results;
  std::map<std::string, int64_t> int_mismatch;
  std::set<std::string> missing, seen;

  void Floats(const std::string& name, std::span<float> v) override {
    seen.insert(name);
    const TensorView* tp = dsv4::FindTraceStage(*trace_, name, v.size(), /*f32=*/true, &missing);
    if (tp == nullptr) return;
    Result& r = results[name];
    for (size_t i = 0; i < v.size(); ++i) {
      const float want = dsv4::F32At(*tp, i);
      const double d = std::fabs(static_cast<double>(v[i]) - want);
      const double ulp = dsv4::Bf16UlpOfLarger(want, v[i]);
      r.n++;
      if (d > ulp * 1.01 + 1e-30) r.off_ulp++;
      r.max_abs = std::max(r.max_abs, d);
      v[i] = want;
    }
  }
  void Ints(const std::string& name, std::span<int32_t> v) override {
    seen.insert(name);
    const TensorView* tp = dsv4::FindTraceStage(*trace_, name, v.size(), /*f32=*/false, &missing);
    if (tp == nullptr) return;
    const TensorView& t = *tp;
    const int64_t cols = t.shape.back();
    const int64_t esz = t.dtype == DType::kU8 ? 1 : 8;
    int64_t bad = 0;
    for (int64_t r = 0; r < t.shape[0]; ++r) {
      std::multiset<int64_t> want, got;
      for (int64_t c = 0; c < cols; ++c) {
        int64_t w = 0;
        std::memcpy(&w, t.data + esz * (r * cols + c), esz);
        // Sets for selections (-1 padded); positional for 0/1 masks and hash ids.
        if (w >= 0)
          want.insert(esz == 1 || name.find("hash") != std::string::npos ? c * 1000000000LL + w
                                                                         : w);
        const int64_t g = v[r * cols + c];
        if (g >= 0)
          got.insert(esz == 1 || name.find("hash") != std::string::npos ? c * 1000000000LL + g : g);
        v[r * cols + c] = static_cast<int32_t>(w);
      }
      if (want != got && getenv("DSV41_VERBOSE")) {
        std::cerr << name << " row " << r << " want";
        for (auto x : want) std::cerr << ' ' << x;
        std::cerr << " got";
        for (auto x : got) std::cerr << ' ' << x;
        std::cerr << "\n";
      }
      bad += want != got;
    }
    int_mismatch[name] = bad;
  }

 private:
  const SafetensorsFile* trace_;
};

TEST(DsV41Golden, TraceStagesTeacherForced) {
  SKIP_WITHOUT_SHARED();
  ASSERT_OK_AND_ASSIGN(auto trace, SafetensorsFile::Open(GoldenDir() + "/trace_040.safetensors"));
  auto model = LoadTiny(false);
  const Json g = ReadJson(GoldenDir() + "/prompt_040.json");
  const std::vector<int32_t> prompt = Ints(g["prompt"]);
  TraceCompare tc(trace.get());
  model->set_tracer(&tc);
  Session s(model.get(), 64);
  ASSERT_OK_AND_ASSIGN(auto logits, s.Feed(prompt));
  model->set_tracer(nullptr);
  EXPECT_TRUE(tc.missing.empty()) << "stages not in the trace: " << *tc.missing.begin();
  // Every traced stage is observed.
  for (const auto& [name, t] : trace->tensors()) {
    if (name == "tokens") continue;
    EXPECT_TRUE(tc.seen.count(name)) << "trace stage not produced: " << name;
  }
  for (const auto& [name, r] : tc.results) {
    const double frac = static_cast<double>(r.off_ulp) / std::max<int64_t>(1, r.n);
    // README: single stages bit-exact or <= 1 BF16 ulp in rare elements; stages that end in an
    // FP8/FP4 quantiser can flip a code on a 1-ulp input difference.
    EXPECT_LE(frac, 0.01) << name << ": " << r.off_ulp << "/" << r.n
                          << " elements beyond 1 BF16 ulp, max abs " << r.max_abs;
  }
  for (const auto& [name, bad] : tc.int_mismatch) EXPECT_EQ(bad, 0) << name << ": rows differ";
}

// ---------------------------------------------------------------------------------------------
// End to end.

void RunPrompt(DeepseekV41Model* m, const std::vector<int32_t>& prompt,
               const std::vector<int32_t>& teacher, int steps, std::vector<float>* prefill,
               std::vector<float>* decode, std::span<const uint8_t> image = {}) {
  Session s(m, static_cast<int64_t>(prompt.size()) + steps + 1);
  auto p = s.Feed(prompt, 0, 0, image);
  ASSERT_TRUE(p.ok()) << p.status();
  *prefill = *p;
  decode->clear();
  for (int i = 0; i < steps; ++i) {
    auto d = s.Feed(std::span<const int32_t>(&teacher[i], 1));
    ASSERT_TRUE(d.ok()) << d.status();
    decode->insert(decode->end(), d->begin(), d->end());
  }
}

void CheckTier(bool fp32, double mean_abs, double p50, double p90, double agree,
               const char* against) {
  auto model = LoadTiny(fp32);
  const int64_t V = model->config().vocab_size;
  std::vector<float> got, want;
  for (const char* f : {"prompt_040.json", "prompt_300.json"}) {
    const Json g = ReadJson(GoldenDir() + "/" + f);
    const std::vector<int32_t> greedy = Ints(g["greedy_tokens"]);
    const int steps = static_cast<int>(g["decode_logits"].size());
    std::vector<float> pre, dec;
    RunPrompt(model.get(), Ints(g["prompt"]), greedy, steps, &pre, &dec);
    got.insert(got.end(), pre.begin(), pre.end());
    got.insert(got.end(), dec.begin(), dec.end());
    const std::string suf = against;
    const auto wp = Flat(g["prefill_logits" + suf]), wd = Flat(g["decode_logits" + suf]);
    want.insert(want.end(), wp.begin(), wp.end());
    want.insert(want.end(), wd.begin(), wd.end());
  }
  const LogitStats s = CompareLogits(got, want, V);
  std::cout << (fp32 ? "tier B" : "tier A") << " vs '" << against << "': mean_abs=" << s.mean_abs
            << " p50_max=" << s.p50_max << " p90_max=" << s.p90_max << " argmax=" << s.argmax_agree
            << "\n";
  EXPECT_LE(s.mean_abs, mean_abs);
  EXPECT_LE(s.p50_max, p50);
  EXPECT_LE(s.p90_max, p90);
  EXPECT_GE(s.argmax_agree, agree);
}

TEST(DsV41Golden, TierAOfficialNumerics) {
  SKIP_WITHOUT_SHARED();
  CheckTier(false, 0.227, 0.879, 1.54, 0.790, "");
}

TEST(DsV41Golden, TierBFp32Activations) {
  SKIP_WITHOUT_SHARED();
  CheckTier(true, 0.118, 0.382, 1.03, 0.938, "_fp32");
  CheckTier(true, 0.237, 0.945, 1.48, 0.827, "");
}

TEST(DsV41Golden, SmallPromptsAndGreedyIds) {
  SKIP_WITHOUT_SHARED();
  auto model = LoadTiny(false);
  const int64_t V = model->config().vocab_size;
  for (const char* f : {"prompt_001.json", "prompt_007.json"}) {
    SCOPED_TRACE(f);
    const Json g = ReadJson(GoldenDir() + "/" + f);
    const std::vector<int32_t> greedy = Ints(g["greedy_tokens"]);
    const int steps = static_cast<int>(g["decode_logits"].size());
    std::vector<float> pre, dec;
    RunPrompt(model.get(), Ints(g["prompt"]), greedy, steps, &pre, &dec);
    std::vector<float> got = pre, want = Flat(g["prefill_logits"]);
    got.insert(got.end(), dec.begin(), dec.end());
    const auto wd = Flat(g["decode_logits"]);
    want.insert(want.end(), wd.begin(), wd.end());
    const LogitStats s = CompareLogits(got, want, V);
    EXPECT_LE(s.mean_abs, 0.227);
    EXPECT_LE(s.p50_max, 0.879);
    // Greedy ids where the golden margin is large.
    const int64_t T = static_cast<int64_t>(g["prompt"].size());
    EXPECT_EQ(ArgMax(std::span<const float>(pre).subspan((T - 1) * V, V)), greedy[0]);
    const auto margins = g["margins"]["decode_top1_minus_top2"];
    for (int i = 0; i < steps; ++i) {
      if (margins[i].get<double>() < 0.5) continue;
      EXPECT_EQ(ArgMax(std::span<const float>(dec).subspan(i * V, V)), greedy[i + 1]) << i;
    }
  }
}

TEST(DsV41Golden, Prompt40DebugValues) {
  SKIP_WITHOUT_SHARED();
  auto model = LoadTiny(false);
  const Json g = ReadJson(GoldenDir() + "/prompt_040.json");
  std::vector<BlockDebug41> dbg;
  model->set_debug(&dbg);
  Session s(model.get(), 64);
  ASSERT_OK_AND_ASSIGN(auto logits, s.Feed(Ints(g["prompt"])));
  model->set_debug(nullptr);
  const auto& layers = g["debug"]["layers"];
  ASSERT_EQ(dbg.size(), layers.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    const auto& L = layers[l];
    EXPECT_EQ(dbg[l].experts, Ints(L["experts"]));
    const auto ew = Flat(L["expert_weights"]);
    for (size_t j = 0; j < ew.size(); ++j)
      EXPECT_NEAR(dbg[l].expert_weights[j], ew[j], 0.02 * ew[j]);
    const auto rms = Flat(L["stream_rms"]);
    for (size_t j = 0; j < rms.size(); ++j)
      EXPECT_NEAR(dbg[l].stream_rms[j], rms[j], 0.02 * rms[j]);
    const auto f8 = Flat(L["stream0_first8"]);
    for (size_t j = 0; j < f8.size(); ++j) EXPECT_NEAR(dbg[l].stream0_first8[j], f8[j], 0.05);
    if (L.contains("compressed_rows_selected")) {
      EXPECT_EQ(dbg[l].selected_rows, Ints(L["compressed_rows_selected"]));
    }
    if (L.contains("candidate_positions")) {
      EXPECT_EQ(dbg[l].candidate_positions, Ints(L["candidate_positions"]));
    }
    if (L.contains("engram_hash_ids")) {
      std::vector<int64_t> want;
      for (const auto& e : L["engram_hash_ids"]) want.push_back(e.get<int64_t>());
      EXPECT_EQ(dbg[l].engram_hash_ids, want);
      const auto gate = Flat(L["engram_gate"]);
      for (size_t j = 0; j < gate.size(); ++j) EXPECT_NEAR(dbg[l].engram_gate[j], gate[j], 0.02);
    }
  }
}

TEST(DsV41Golden, ImageVariant) {
  SKIP_WITHOUT_SHARED();
  auto model = LoadTiny(false);
  const int64_t V = model->config().vocab_size;
  const Json g = ReadJson(GoldenDir() + "/prompt_040.json")["image_variant"];
  const std::vector<int32_t> greedy = Ints(g["greedy_tokens"]);
  const int steps = static_cast<int>(g["decode_logits"].size());
  std::vector<float> pre, dec;
  const std::vector<int32_t> prompt = Ints(g["prompt"]);
  std::vector<uint8_t> image(prompt.size(), 0);
  for (const auto& p : g["image_positions"]) image[p.get<int64_t>()] = 1;
  RunPrompt(model.get(), prompt, greedy, steps, &pre, &dec, image);
  std::vector<float> got = pre, want = Flat(g["prefill_logits"]);
  got.insert(got.end(), dec.begin(), dec.end());
  const auto wd = Flat(g["decode_logits"]);
  want.insert(want.end(), wd.begin(), wd.end());
  const LogitStats s = CompareLogits(got, want, V);
  // Greedy ids of the image variant differ from the text prompt's where the golden says so.
  const int64_t T = static_cast<int64_t>(prompt.size());
  EXPECT_EQ(ArgMax(std::span<const float>(pre).subspan((T - 1) * V, V)), greedy[0]);
  std::cout << "image variant: mean_abs=" << s.mean_abs << " p50_max=" << s.p50_max
            << " argmax=" << s.argmax_agree << "\n";
  EXPECT_LE(s.mean_abs, 0.227);
  EXPECT_LE(s.p50_max, 0.879);
  EXPECT_LE(s.p90_max, 1.54);
  EXPECT_GE(s.argmax_agree, 0.790);
}

// ---------------------------------------------------------------------------------------------
// Decoder-side bounded replay at prefill (§7, compact truncation).

// Prefill with kLast under compact truncation keeping `keep` rows, then teacher-forced decode;
// returns [1 + steps, V] logits.
std::vector<float> RunTruncated(DeepseekV41Model* m, const std::vector<int32_t>& prompt,
                                const std::vector<int32_t>& teacher, int steps, int64_t keep) {
  m->set_prefill_truncation(keep > 0, keep);
  Session s(m, static_cast<int64_t>(prompt.size()) + steps + 1);
  auto p = s.Feed(prompt, 0, 0, {}, LogitsMode::kLast);
  CHECK(p.ok()) << p.status();
  std::vector<float> all = *p;
  for (int i = 0; i < steps; ++i) {
    auto d = s.Feed(std::span<const int32_t>(&teacher[i], 1), 0, 0, {}, LogitsMode::kLast);
    CHECK(d.ok()) << d.status();
    all.insert(all.end(), d->begin(), d->end());
  }
  m->set_prefill_truncation(false, 0);
  return all;
}

TEST(DsV41Replay, CompactTruncationGoldens) {
  SKIP_WITHOUT_SHARED();
  for (bool fp32 : {false, true}) {
    auto model = LoadTiny(fp32);
    const int64_t V = model->config().vocab_size;
    std::vector<float> got, want;
    for (const char* f : {"prompt_040.json", "prompt_300.json"}) {
      const Json g = ReadJson(GoldenDir() + "/" + f);
      const Json& r = g["replay"];
      const int64_t keep = r["keep"].get<int64_t>();
      EXPECT_EQ(r["first_layer"].get<int64_t>(), model->config().LastKvSource() + 1);
      const int steps = static_cast<int>(r["decode_logits"].size());
      const auto res =
          RunTruncated(model.get(), Ints(g["prompt"]), Ints(g["greedy_tokens"]), steps, keep);
      got.insert(got.end(), res.begin(), res.end());
      const std::string suf = fp32 ? "_fp32" : "";
      const auto pre = Flat(r["prefill_logits" + suf]);
      want.insert(want.end(), pre.end() - V, pre.end());  // the last kept row
      const auto dec = Flat(r["decode_logits" + suf]);
      want.insert(want.end(), dec.begin(), dec.end());
    }
    const LogitStats s = CompareLogits(got, want, V);
    std::cout << "replay " << (fp32 ? "tier B" : "tier A") << ": mean_abs=" << s.mean_abs
              << " p50_max=" << s.p50_max << " p90_max=" << s.p90_max
              << " argmax=" << s.argmax_agree << "\n";
    EXPECT_LE(s.mean_abs, fp32 ? 0.118 : 0.227);
    EXPECT_LE(s.p50_max, fp32 ? 0.382 : 0.879);
    EXPECT_LE(s.p90_max, fp32 ? 1.03 : 1.54);
    EXPECT_GE(s.argmax_agree, fp32 ? 0.938 : 0.790);
  }
}

TEST(DsV41Replay, ExactKeepReproducesLastRow) {
  SKIP_WITHOUT_SHARED();
  auto model = LoadTiny(false);
  const Config& c = model->config();
  const int64_t V = c.vocab_size;
  // K = n_replay_layers * (window - 1) + 1 (spec §7).
  const int64_t n_replay = c.num_layers - 1 - c.LastKvSource();
  const int64_t exact = n_replay * (c.window - 1) + 1;
  const std::vector<int32_t> prompt = Ints(ReadJson(GoldenDir() + "/prompt_300.json")["prompt"]);
  const std::vector<int32_t> p(prompt.begin(), prompt.begin() + 120);
  const auto ref = RunTruncated(model.get(), p, {}, 0, 0);
  const auto same = RunTruncated(model.get(), p, {}, 0, exact);
  EXPECT_EQ(same, ref) << "keep " << exact;
  const auto approx = RunTruncated(model.get(), p, {}, 0, exact - 1);
  ASSERT_EQ(approx.size(), static_cast<size_t>(V));
  EXPECT_NE(approx, ref) << "keep " << exact - 1 << " should not be exact";
}

// ---------------------------------------------------------------------------------------------
// Invariants.

TEST(DsV41Invariants, DecodeAndChunkingEqualWholePrompt) {
  SKIP_WITHOUT_SHARED();
  for (bool fp32 : {false, true}) {
    auto model = LoadTiny(fp32);
    const std::vector<int32_t> prompt = Ints(ReadJson(GoldenDir() + "/prompt_300.json")["prompt"]);
    const std::vector<int32_t> p(prompt.begin(), prompt.begin() + 150);
    Session whole(model.get(), 300);
    ASSERT_OK_AND_ASSIGN(auto ref, whole.Feed(p));
    for (int64_t chunk : {1, 7, 64, 76}) {
      SCOPED_TRACE(std::to_string(chunk) + (fp32 ? " fp32" : " bf16"));
      Session s(model.get(), 300);
      ASSERT_OK_AND_ASSIGN(auto got, s.Feed(p, chunk));
      ASSERT_EQ(got.size(), ref.size());
      int64_t diff = 0;
      for (size_t i = 0; i < got.size(); ++i) diff += got[i] != ref[i];
      EXPECT_EQ(diff, 0);
    }
  }
}

TEST(DsV41Invariants, BatchInvariance) {
  SKIP_WITHOUT_SHARED();
  auto model = LoadTiny(false);
  const std::vector<int32_t> a = Ints(ReadJson(GoldenDir() + "/prompt_040.json")["prompt"]);
  const std::vector<int32_t> b = Ints(ReadJson(GoldenDir() + "/prompt_007.json")["prompt"]);
  Session alone(model.get(), 64);
  ASSERT_OK_AND_ASSIGN(auto ref, alone.Feed(a));
  Session two(model.get(), 64, 2);
  ForwardBatch batch;
  for (int s = 0; s < 2; ++s) {
    SequenceChunk c;
    c.tokens = s == 0 ? std::span<const int32_t>(b) : std::span<const int32_t>(a);
    c.block_table = two.table(s);
    c.state_slot = s;
    c.logits = LogitsMode::kAll;
    batch.chunks.push_back(c);
  }
  ForwardOutput out;
  ASSERT_OK(model->Forward(batch, two.view(), &out));
  const int64_t V = model->config().vocab_size;
  ASSERT_EQ(out.chunk_row_begin.size(), 3u);
  std::vector<float> got(out.logits.begin() + out.chunk_row_begin[1] * V, out.logits.end());
  EXPECT_EQ(got, ref);
}

// One weight pass per step (deepseek_v41.h): a forward over decode steps of two sequences, a
// compact-truncated whole prompt and a middle chunk wholly below its decoder floor (prefill_end
// set: the decoder layers skip it) gives every chunk the logits it gets alone, for two steps
// (so the states they left are the same too); and the prompt chunked at 200 with prefill_end
// ends with the same logits as the whole prompt (the floor does not depend on the chunking).
TEST(DsV41Invariants, MixedBatchEqualsEachChunkAlone) {
  SKIP_WITHOUT_SHARED();
  auto model = LoadTiny(false);
  model->set_prefill_truncation(true, 28);
  const std::vector<int32_t> p300 = Ints(ReadJson(GoldenDir() + "/prompt_300.json")["prompt"]);
  const std::vector<int32_t> p40 = Ints(ReadJson(GoldenDir() + "/prompt_040.json")["prompt"]);
  const std::vector<int32_t> p7 = Ints(ReadJson(GoldenDir() + "/prompt_007.json")["prompt"]);
  const int32_t next[3][2] = {{5, 6}, {9, 10}, {11, 12}};
  struct Part {
    int slot;
    int64_t start;
    std::vector<int32_t> tokens;
    LogitsMode mode;
  };
  // Step 0 and step 1 of the four sequences.
  const std::vector<Part> steps[2] = {
      {{0, 40, {next[0][0]}, LogitsMode::kLast},
       {1, 7, {next[1][0]}, LogitsMode::kLast},
       {2, 0, p300, LogitsMode::kLast},
       {3, 0, std::vector<int32_t>(p300.begin(), p300.begin() + 200), LogitsMode::kNone}},
      {{0, 41, {next[0][1]}, LogitsMode::kLast},
       {1, 8, {next[1][1]}, LogitsMode::kLast},
       {2, 300, {next[2][1]}, LogitsMode::kLast},
       {3, 200, std::vector<int32_t>(p300.begin() + 200, p300.end()), LogitsMode::kLast}}};
  auto chunk = [](const Session& s, const Part& part) {
    SequenceChunk c;
    c.start_pos = part.start;
    c.tokens = part.tokens;
    c.block_table = s.table(part.slot);
    c.state_slot = part.slot;
    c.logits = part.mode;
    c.prefill_end = part.slot >= 2 ? 300 : part.slot == 0 ? 40 : 7;
    return c;
  };
  Session batched(model.get(), 320, 4), alone(model.get(), 320, 4);
  for (Session* s : {&batched, &alone}) {
    ASSERT_OK(s->Feed(p40, 0, 0, {}, LogitsMode::kLast).status());
    ASSERT_OK(s->Feed(p7, 0, 1, {}, LogitsMode::kLast).status());
  }
  const int64_t V = model->config().vocab_size;
  std::vector<float> last_of_slot2;
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE(step);
    ForwardBatch all;
    for (const Part& part : steps[step]) all.chunks.push_back(chunk(batched, part));
    ForwardOutput got;
    ASSERT_OK(model->Forward(all, batched.view(), &got));
    std::vector<float> want;
    for (const Part& part : steps[step]) {
      ForwardBatch one;
      one.chunks.push_back(chunk(alone, part));
      ForwardOutput out;
      ASSERT_OK(model->Forward(one, alone.view(), &out));
      want.insert(want.end(), out.logits.begin(), out.logits.end());
    }
    ASSERT_EQ(got.chunk_row_begin, (std::vector<int64_t>{0, 1, 2, 3, step == 0 ? 3 : 4}));
    EXPECT_EQ(got.logits, want);
    if (step == 0) last_of_slot2.assign(got.logits.begin() + 2 * V, got.logits.begin() + 3 * V);
    if (step == 1) {
      const std::vector<float> chunked(got.logits.begin() + 3 * V, got.logits.end());
      EXPECT_EQ(chunked, last_of_slot2);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Engram constants and token map without engram_tables.json (spec §4.2).

// numpy's default_rng(10007 * layer_id) stream: the spec's release table (numpy 1.24.2) and the
// tiny checkpoint's file (derived by its author with numpy) are two independent references.
TEST(DsV41Engram, MultipliersFollowNumpyStream) {
  ASSERT_OK_AND_ASSIGN(auto l1, EngramMultipliers(1, 99092, 4));
  EXPECT_EQ(l1,
            (std::vector<int64_t>{76632096046245, 4839876093313, 35959672319349, 73987337458391}));
  ASSERT_OK_AND_ASSIGN(auto l14, EngramMultipliers(14, 99092, 4));
  EXPECT_EQ(l14,
            (std::vector<int64_t>{67716810739261, 51510806800915, 30921347202721, 82619226485591}));
  SKIP_WITHOUT_SHARED();
  const Json t = ReadJson(ModelDir() + "/engram_tables.json");
  ASSERT_OK_AND_ASSIGN(auto tiny, EngramMultipliers(1, t["compressed_vocab_size"].get<int64_t>(),
                                                    static_cast<int>(t["multipliers"][0].size())));
  EXPECT_EQ(tiny, t["multipliers"][0].get<std::vector<int64_t>>());
}

// A copy of dsv41-tiny-a without engram_tables.json (links to the shared files; config.json
// optionally with another compressed vocabulary size) and, optionally, a tokenizer.json.
std::string TinyWithoutTables(const std::string& name, int64_t compressed_vocab,
                              const std::string& tokenizer_json) {
  const fs::path dir = fs::path(::testing::TempDir()) / (std::to_string(getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir / "inference");
  for (const char* f :
       {"model.safetensors", "model.safetensors.index.json", "generation_config.json"}) {
    fs::create_symlink(fs::path(ModelDir()) / f, dir / f);
  }
  for (const char* f : {"config.json", "inference/config.json"}) {
    Json j = ReadJson(ModelDir() + "/" + f);
    if (compressed_vocab > 0) {
      if (j.contains("text_config")) {
        j["text_config"]["engram_compressed_vocab_size"] = compressed_vocab;
      } else {
        j["engram_compressed_vocab_size"] = compressed_vocab;
      }
    }
    std::ofstream(dir / f) << j.dump(2);
  }
  if (!tokenizer_json.empty()) fs::copy_file(tokenizer_json, dir / "tokenizer.json");
  return dir.string();
}

std::vector<float> RunPrompt40(const std::string& dir) {
  LoadOptions o;
  o.show_progress = false;
  auto lm = LoadDeepseekV41(dir, o);
  CHECK(lm.ok()) << lm.status();
  Session s(static_cast<DeepseekV41Model*>(lm->get()), 64);
  auto got = s.Feed(Ints(ReadJson(GoldenDir() + "/prompt_040.json")["prompt"]));
  CHECK(got.ok()) << got.status();
  return *got;
}

// Without the file the multipliers come from the numpy stream and the map from the source: given
// the tiny model's map, the logits equal the run with the file bit for bit.
TEST(DsV41Engram, NoTablesFileDerivesTheSameHashing) {
  SKIP_WITHOUT_SHARED();
  const std::string dir = TinyWithoutTables("dsv41_no_tables", 0, "");
  SetEngramTokenMapSource(nullptr);
  LoadOptions o;
  o.show_progress = false;
  EXPECT_THAT(LoadDeepseekV41(dir, o).status(),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition));
  const Json t = ReadJson(ModelDir() + "/engram_tables.json");
  SetEngramTokenMapSource([&](const std::string&) -> absl::StatusOr<EngramTokenMap> {
    return EngramTokenMap{t["token_map"].get<std::vector<int32_t>>(),
                          t["compressed_vocab_size"].get<int64_t>()};
  });
  EXPECT_EQ(RunPrompt40(dir), RunPrompt40(ModelDir()));
  SetEngramTokenMapSource(nullptr);
  fs::remove_all(dir);
}

// The official token map has one entry per tokenizer id, which may be fewer than the embedding
// rows; a sidecar of that length loads (the missing ids hash as the pad token), and an
// engram_num_embeddings larger than the prime buckets (a padded table) is accepted: for a prompt
// of ids inside the map the logits equal the full map's, and padding the table with rows no id
// reaches changes nothing either.
TEST(DsV41Engram, ShortTokenMapAndPaddedTableCountLoad) {
  SKIP_WITHOUT_SHARED();
  const std::string dir = TinyWithoutTables("dsv41_short_map", 0, "");
  Json t = ReadJson(ModelDir() + "/engram_tables.json");
  std::vector<int32_t> map = t["token_map"].get<std::vector<int32_t>>();
  ASSERT_EQ(map.size(), 512u);
  map.resize(480);
  t["token_map"] = map;
  std::ofstream(dir + "/engram_tables.json") << t.dump();
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back((i * 37 + 11) % 470);
  auto run = [&](const std::string& d) {
    LoadOptions o;
    o.show_progress = false;
    auto lm = LoadDeepseekV41(d, o);
    CHECK(lm.ok()) << lm.status();
    Session s(static_cast<DeepseekV41Model*>(lm->get()), 64);
    auto got = s.Feed(prompt);
    CHECK(got.ok()) << got.status();
    return *got;
  };
  const std::vector<float> ref = run(ModelDir());
  EXPECT_EQ(run(dir), ref);
  // A table count past the prime sum (only the count in config.json; the rows the hashes reach
  // are the same tensor).
  for (const char* f : {"config.json", "inference/config.json"}) {
    Json j = ReadJson(dir + "/" + f);
    Json& tc = j.contains("text_config") ? j["text_config"] : j;
    const int64_t rows = tc["engram_num_embeddings"][0].get<int64_t>();
    tc["engram_num_embeddings"][0] = rows + 8;
    std::ofstream(dir + "/" + f) << j.dump(2);
  }
  LoadOptions o;
  o.show_progress = false;
  // The tensor itself keeps the old row count: the prime check passes, and binding the table
  // then names the tensor whose shape disagrees.
  auto padded = LoadDeepseekV41(dir, o);
  ASSERT_FALSE(padded.ok());
  EXPECT_THAT(std::string(padded.status().message()), ::testing::HasSubstr("engram.embed"));
  EXPECT_THAT(std::string(padded.status().message()), ::testing::Not(::testing::HasSubstr("prime")));
  fs::remove_all(dir);
}

// The production path: the map derived from a real tokenizer.json (stories260K's 512 ids, the
// tiny vocabulary size). The key count must match config.json (the official assert); with it set,
// the checkpoint loads and runs, and token-by-token decode equals whole-prompt prefill.
TEST(DsV41Engram, TokenizerDerivedMapLoadsAndRuns) {
  SKIP_WITHOUT_SHARED();
  const std::string tok_json = SharedDir() + "/models/stories260K/tokenizer.json";
  if (!fs::exists(tok_json)) GTEST_SKIP() << "no stories260K tokenizer";
  SetEngramTokenMapSource([](const std::string& dir) -> absl::StatusOr<EngramTokenMap> {
    ASSIGN_OR_RETURN(auto tok, Tokenizer::FromDirectory(dir));
    ASSIGN_OR_RETURN(auto m, tokenizer::BuildEngramTokenMap(*tok));
    return EngramTokenMap{std::move(m.map), m.num_keys};
  });
  ASSERT_OK_AND_ASSIGN(auto tok, Tokenizer::FromDirectory(SharedDir() + "/models/stories260K"));
  ASSERT_OK_AND_ASSIGN(auto derived, tokenizer::BuildEngramTokenMap(*tok));
  ASSERT_LE(tok->vocab_size(), 512);
  ASSERT_NE(derived.num_keys, 439);
  {
    const std::string bad = TinyWithoutTables("dsv41_tok_bad", 0, tok_json);
    LoadOptions o;
    o.show_progress = false;
    EXPECT_THAT(LoadDeepseekV41(bad, o).status(),
                testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                  ::testing::HasSubstr("engram_compressed_vocab_size")));
    fs::remove_all(bad);
  }
  const std::string dir = TinyWithoutTables("dsv41_tok", derived.num_keys, tok_json);
  LoadOptions o;
  o.show_progress = false;
  ASSERT_OK_AND_ASSIGN(auto lm, LoadDeepseekV41(dir, o));
  auto* m = static_cast<DeepseekV41Model*>(lm.get());
  std::vector<BlockDebug41> dbg;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 30; ++i) prompt.push_back((i * 53 + 5) % 500);
  Session whole(m, 64);
  m->set_debug(&dbg);
  ASSERT_OK_AND_ASSIGN(auto ref, whole.Feed(prompt));
  m->set_debug(nullptr);
  for (float v : ref) ASSERT_TRUE(std::isfinite(v));
  // The hash ids use the derived map: row ids of the Engram layer are inside the table.
  bool saw_ids = false;
  for (const BlockDebug41& d : dbg) {
    for (int64_t id : d.engram_hash_ids) {
      saw_ids = true;
      EXPECT_GE(id, 0);
      EXPECT_LT(id, 240);
    }
  }
  EXPECT_TRUE(saw_ids);
  Session step(m, 64);
  ASSERT_OK_AND_ASSIGN(auto got, step.Feed(prompt, 1));
  EXPECT_EQ(got, ref);
  SetEngramTokenMapSource(nullptr);
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------------------------
// Generality: the same invariants on a second V4.1 configuration written by make-test-model
// (preset "alt": other widths, heads, head_dim, layer count and roles, window, experts, two
// Engram layers with 4-grams), so nothing depends on dsv41-tiny-a's shapes.

DeepseekV41Model* AltModel() {
  static DeepseekV41Model* model = [] {
    auto cfg = TestModelConfigJson41("alt");
    CHECK(cfg.ok()) << cfg.status();
    const std::string dir = ::testing::TempDir() + "/dsv41_alt_" + std::to_string(getpid());
    CHECK(WriteTestModel41(*cfg, 11, dir).ok());
    LoadOptions o;
    o.show_progress = false;
    auto m = LoadDeepseekV41(dir, o);
    CHECK(m.ok()) << m.status();
    fs::remove_all(dir);  // the checkpoint is mapped; the files may go
    return static_cast<DeepseekV41Model*>(m->release());
  }();
  return model;
}

std::vector<int32_t> AltPrompt(int n) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(3 + (i * 131 + i * i * 7) % 497);
  return p;
}

TEST(DsV41Alt, ConfigDiffersFromTiny) {
  const Config& c = AltModel()->config();
  EXPECT_EQ(c.num_layers, 10);
  EXPECT_EQ(c.hidden_size, 320);
  EXPECT_EQ(c.num_heads, 2);
  EXPECT_EQ(c.head_dim, 192);
  EXPECT_EQ(c.window, 12);
  EXPECT_EQ(c.LastKvSource(), 5);
  EXPECT_EQ(c.engram_layer_ids, (std::vector<int64_t>{1, 3}));
}

TEST(DsV41Alt, DecodeAndChunkingEqualWholePrompt) {
  DeepseekV41Model* m = AltModel();
  const std::vector<int32_t> p = AltPrompt(70);
  Session whole(m, 128);
  ASSERT_OK_AND_ASSIGN(auto ref, whole.Feed(p));
  for (float v : ref) ASSERT_TRUE(std::isfinite(v));
  for (int64_t chunk : {1, 5, 13, 64}) {
    SCOPED_TRACE(chunk);
    Session s(m, 128);
    ASSERT_OK_AND_ASSIGN(auto got, s.Feed(p, chunk));
    ASSERT_EQ(got.size(), ref.size());
    int64_t diff = 0;
    for (size_t i = 0; i < got.size(); ++i) diff += got[i] != ref[i];
    EXPECT_EQ(diff, 0);
  }
}

TEST(DsV41Alt, CompactTruncationFormulaIsExact) {
  DeepseekV41Model* m = AltModel();
  const Config& c = m->config();
  const int64_t n_replay = c.num_layers - 1 - c.LastKvSource();
  ASSERT_EQ(n_replay, 4);
  const int64_t exact = n_replay * (c.window - 1) + 1;  // 45 (spec §7)
  const std::vector<int32_t> p = AltPrompt(90);
  const std::vector<int32_t> teacher = AltPrompt(3);
  const auto ref = RunTruncated(m, p, teacher, 3, 0);
  EXPECT_EQ(RunTruncated(m, p, teacher, 3, exact), ref) << "keep " << exact;
  const auto approx = RunTruncated(m, p, {}, 0, exact - 1);
  EXPECT_NE(approx, std::vector<float>(ref.begin(), ref.begin() + c.vocab_size))
      << "keep " << exact - 1 << " should not be exact";
}

TEST(DsV41Alt, BatchInvariance) {
  DeepseekV41Model* m = AltModel();
  const std::vector<int32_t> a = AltPrompt(40), b = AltPrompt(9);
  Session alone(m, 64);
  ASSERT_OK_AND_ASSIGN(auto ref, alone.Feed(a));
  Session two(m, 64, 2);
  ForwardBatch batch;
  for (int s = 0; s < 2; ++s) {
    SequenceChunk ch;
    ch.tokens = s == 0 ? std::span<const int32_t>(b) : std::span<const int32_t>(a);
    ch.block_table = two.table(s);
    ch.state_slot = s;
    ch.logits = LogitsMode::kAll;
    batch.chunks.push_back(ch);
  }
  ForwardOutput out;
  ASSERT_OK(m->Forward(batch, two.view(), &out));
  const int64_t V = m->config().vocab_size;
  std::vector<float> got(out.logits.begin() + out.chunk_row_begin[1] * V, out.logits.end());
  EXPECT_EQ(got, ref);
}

// ---------------------------------------------------------------------------------------------
// Prefix cache on V4.1 (KV-CACHE.md §5 via model.h SequenceChunk::replay_*): the engine's hit
// rule caps a hit at L - (window + 6) (scheduler.cc; 134 for the released window, asserted from
// the KvLayout here), and without a window snapshot it replays the encoder from the block before
// the hit end over cached block KV. With dsv41-tiny-a's window 16 the replay's cone
// (8 layers x 15 rows = 120) fits in the replayed 128-row block, so the logits after the hit
// equal the uncached run bitwise.
TEST(DsV41PrefixCache, EncoderReplayOverCachedBlocksEqualsUncached) {
  SKIP_WITHOUT_SHARED();
  auto model = LoadTiny(false);
  EXPECT_EQ(model->kv_layout().window_tokens, model->config().window);
  const std::vector<int32_t> p = Ints(ReadJson(GoldenDir() + "/prompt_300.json")["prompt"]);
  const int64_t L = static_cast<int64_t>(p.size()), hit = 256, from = hit - kBlockTokens;
  ASSERT_LE(hit, L - (model->config().window + 6));
  Session ref(model.get(), L + 8);
  ASSERT_OK_AND_ASSIGN(auto all, ref.Feed(p));
  // A second sequence: the first two blocks copied from the first (the cache), no state.
  Session s(model.get(), L + 8);
  const int64_t bb = model->kv_layout().BlockBytes();
  std::memcpy(s.view().block_base, ref.view().block_base, 2 * bb);
  int64_t floor = from;
  auto run = [&](int64_t start, int64_t end, LogitsMode mode,
                 std::vector<float>* logits) -> absl::Status {
    ForwardBatch b;
    SequenceChunk c;
    c.start_pos = start;
    c.tokens = std::span<const int32_t>(p).subspan(start, end - start);
    c.block_table = s.table(0);
    c.state_slot = 0;
    c.logits = mode;
    c.replay_start = floor;
    c.replay_until = start == floor ? hit : 0;
    b.chunks.push_back(c);
    ForwardOutput out;
    RETURN_IF_ERROR(model->Forward(b, s.view(), &out));
    *logits = std::move(out.logits);
    return absl::OkStatus();
  };
  std::vector<float> replayed, after;
  ASSERT_OK(run(from, hit, LogitsMode::kNone, &replayed));
  ASSERT_OK(run(hit, L, LogitsMode::kAll, &after));
  const int64_t V = model->config().vocab_size;
  const std::vector<float> want(all.begin() + hit * V, all.end());
  ASSERT_EQ(after.size(), want.size());
  EXPECT_EQ(after, want);
  // Control: no replay (the window state starts empty at the hit) is not the uncached run.
  std::memset(s.view().state_base, 0, model->kv_layout().StateBytes());
  floor = hit;
  std::vector<float> no_replay;
  ASSERT_OK(run(hit, L, LogitsMode::kAll, &no_replay));
  EXPECT_NE(no_replay, want);
}

// ---------------------------------------------------------------------------------------------
// DSpark (§5; speculative.md §3): the golden flow — prefill seeds the context rings, each
// teacher-forced decode step at p = T + i (input greedy[i]) appends p, then a draft block with
// anchor greedy[i + 1] and context <= p.

struct DsparkRun {
  std::vector<DsparkDraftResult> steps;
};

DsparkRun RunDspark(DeepseekV41Model* m, const std::vector<int32_t>& prompt,
                    const std::vector<int32_t>& greedy, int steps, int64_t chunk = 0) {
  DsparkRun run;
  m->set_dspark_context(true);
  const int64_t T = static_cast<int64_t>(prompt.size());
  Session s(m, T + steps + 8);
  auto p = s.Feed(prompt, chunk, 0, {}, LogitsMode::kLast);
  CHECK(p.ok()) << p.status();
  for (int i = 0; i < steps; ++i) {
    auto d = s.Feed(std::span<const int32_t>(&greedy[i], 1));
    CHECK(d.ok()) << d.status();
    DsparkRequest r;
    r.state_slot = 0;
    r.position = T + i;
    r.token = greedy[i + 1];
    r.want_logits = true;
    std::vector<DsparkDraftResult> out;
    const absl::Status st =
        m->DsparkDraft(std::span<const DsparkRequest>(&r, 1), s.view(), {}, &out);
    CHECK(st.ok()) << st;
    run.steps.push_back(std::move(out[0]));
  }
  m->set_dspark_context(false);
  return run;
}

// Top-1 minus top-2 of a row.
double Gap(std::span<const float> v) {
  std::vector<float> c(v.begin(), v.end());
  std::partial_sort(c.begin(), c.begin() + 2, c.end(), std::greater<float>());
  return static_cast<double>(c[0]) - c[1];
}

void CheckDsparkTier(bool fp32) {
  auto model = LoadTiny(fp32);
  const int64_t V = model->config().vocab_size;
  const std::string suf = fp32 ? "_fp32" : "";
  std::vector<float> got, want, got_base, want_base;
  double conf_max = 0, conf_sum = 0;
  int64_t conf_n = 0, ids_checked = 0, ids_equal = 0;
  for (const char* f :
       {"prompt_001.json", "prompt_007.json", "prompt_040.json", "prompt_300.json"}) {
    SCOPED_TRACE(f);
    const Json g = ReadJson(GoldenDir() + "/" + f);
    const Json& steps = g["dspark"]["steps"];
    const std::vector<int32_t> greedy = Ints(g["greedy_tokens"]);
    const int64_t T = g["n_prompt"].get<int64_t>();
    const DsparkRun run =
        RunDspark(model.get(), Ints(g["prompt"]), greedy, static_cast<int>(steps.size()));
    for (size_t i = 0; i < steps.size(); ++i) {
      const Json& st = steps[i];
      ASSERT_EQ(st["p"].get<int64_t>(), T + static_cast<int64_t>(i));
      ASSERT_EQ(st["token"].get<int32_t>(), greedy[i + 1]);
      const DsparkDraftResult& r = run.steps[i];
      const std::vector<float> wc = Flat(st["confidence_logit" + suf]);
      ASSERT_EQ(r.confidence_logits.size(), wc.size());
      // Draft ids where the decision is clear (our top-2 gap > 0.5, ~6x the measured logit
      // drift) along the chain; confidence k depends on draft k-1 (the Markov embedding of
      // prev_k), so it is compared while the earlier drafts agree.
      const std::vector<int32_t> wid = Ints(st["draft_ids" + suf]);
      const bool has_logits = st.contains("logits" + suf);
      std::vector<float> wl;
      if (has_logits) wl = Flat(st["logits" + suf]);
      for (size_t k = 0; k < wid.size(); ++k) {
        const double dlt = std::fabs(static_cast<double>(r.confidence_logits[k]) - wc[k]);
        conf_max = std::max(conf_max, dlt);
        conf_sum += dlt;
        ++conf_n;
        if (Gap(std::span<const float>(r.logits).subspan(k * V, V)) > 0.5) {
          ++ids_checked;
          ids_equal += r.tokens[k] == wid[k];
        }
        if (r.tokens[k] != wid[k]) break;
      }
      if (has_logits) {
        ASSERT_EQ(r.logits.size(), wl.size());
        got.insert(got.end(), r.logits.begin(), r.logits.end());
        want.insert(want.end(), wl.begin(), wl.end());
        if (!fp32) {
          const std::vector<float> wb = Flat(st["base_logits"]);
          got_base.insert(got_base.end(), r.base_logits.begin(), r.base_logits.end());
          want_base.insert(want_base.end(), wb.begin(), wb.end());
        }
        // logits = base + Markov bias: the chain used the drafted token of the slot before.
        for (size_t k = 0; k < r.tokens.size(); ++k) {
          EXPECT_EQ(r.tokens[k], ArgMax(std::span<const float>(r.logits).subspan(k * V, V)));
        }
      }
    }
  }
  const LogitStats s = CompareLogits(got, want, V);
  std::cout << "dspark " << (fp32 ? "tier B vs _fp32" : "tier A vs official")
            << ": logits mean_abs=" << s.mean_abs << " p50_max=" << s.p50_max
            << " p90_max=" << s.p90_max << " argmax=" << s.argmax_agree
            << "; confidence mean_abs=" << conf_sum / conf_n << " max_abs=" << conf_max
            << "; clear draft ids " << ids_equal << "/" << ids_checked << "\n";
  // README: the first steps' logits with the main-logit tolerances of the tier.
  if (fp32) {
    EXPECT_LE(s.mean_abs, 0.118);
    EXPECT_LE(s.p50_max, 0.382);
    EXPECT_LE(s.p90_max, 1.03);
    EXPECT_GE(s.argmax_agree, 0.938);
  } else {
    EXPECT_LE(s.mean_abs, 0.227);
    EXPECT_LE(s.p50_max, 0.879);
    EXPECT_LE(s.p90_max, 1.54);
    EXPECT_GE(s.argmax_agree, 0.790);
    const LogitStats b = CompareLogits(got_base, want_base, V);
    EXPECT_LE(b.mean_abs, 0.227);
    EXPECT_LE(b.p90_max, 1.54);
  }
  EXPECT_EQ(ids_equal, ids_checked);
  EXPECT_GT(ids_checked, 0);
  // Confidence logits are one FP32 dot product over [h ; e]: the same drift budget as one
  // logit (the per-position max threshold of the tier).
  EXPECT_LE(conf_sum / conf_n, fp32 ? 0.118 : 0.227);
  EXPECT_LE(conf_max, fp32 ? 1.03 : 1.54);
}

TEST(DsV41Dspark, GoldenDraftsAndConfidenceTierA) {
  SKIP_WITHOUT_SHARED();
  CheckDsparkTier(false);
}

TEST(DsV41Dspark, GoldenDraftsAndConfidenceTierB) {
  SKIP_WITHOUT_SHARED();
  CheckDsparkTier(true);
}

// README invariant: drafts do not depend on whether the context window was seeded by prefill or
// step by step (or in chunks); the Markov chain follows the sampler's tokens.
TEST(DsV41Dspark, ContextSeedingInvariantAndSampler) {
  SKIP_WITHOUT_SHARED();
  auto model = LoadTiny(false);
  const Json g = ReadJson(GoldenDir() + "/prompt_040.json");
  const std::vector<int32_t> prompt = Ints(g["prompt"]), greedy = Ints(g["greedy_tokens"]);
  const DsparkRun whole = RunDspark(model.get(), prompt, greedy, 3);
  for (int64_t chunk : {1, 13}) {
    const DsparkRun split = RunDspark(model.get(), prompt, greedy, 3, chunk);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(split.steps[i].tokens, whole.steps[i].tokens) << chunk;
      EXPECT_EQ(split.steps[i].confidence_logits, whole.steps[i].confidence_logits) << chunk;
      EXPECT_EQ(split.steps[i].logits, whole.steps[i].logits) << chunk;
    }
  }
  // A sampler that always returns token 7: base logits unchanged, slot k's Markov bias (and
  // confidence for k >= 1) follows 7, slot 0 is the anchor's.
  model->set_dspark_context(true);
  Session s(model.get(), 64);
  ASSERT_OK(s.Feed(prompt, 0, 0, {}, LogitsMode::kLast).status());
  DsparkRequest r;
  r.position = static_cast<int64_t>(prompt.size()) - 1;
  r.token = greedy[0];
  r.want_logits = true;
  std::vector<DsparkDraftResult> a, b;
  ASSERT_OK(model->DsparkDraft(std::span<const DsparkRequest>(&r, 1), s.view(), {}, &a));
  std::vector<int64_t> asked;
  auto seven = [&](int64_t i, std::span<const float>) {
    asked.push_back(i);
    return 7;
  };
  ASSERT_OK(model->DsparkDraft(std::span<const DsparkRequest>(&r, 1), s.view(), seven, &b));
  EXPECT_EQ(asked, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(b[0].tokens, std::vector<int32_t>(5, 7));
  EXPECT_EQ(a[0].base_logits, b[0].base_logits);
  EXPECT_EQ(a[0].confidence_logits[0], b[0].confidence_logits[0]);
  const int64_t V = model->config().vocab_size;
  EXPECT_TRUE(std::equal(a[0].logits.begin(), a[0].logits.begin() + V, b[0].logits.begin()));
  // Errors name the field.
  r.token = -1;
  EXPECT_FALSE(model->DsparkDraft(std::span<const DsparkRequest>(&r, 1), s.view(), {}, &a).ok());
  model->set_dspark_context(false);
}

// The release drafts with three DSpark stages; dsv41-tiny-a has one. On the alt preset (three
// stages, a block of 4) the README's invariant holds as well: drafts, confidences and logits do
// not depend on how the context rings were seeded (one prefill chunk, token by token, chunks).
TEST(DsV41Alt, ThreeStageDsparkDraftsDoNotDependOnContextSeeding) {
  DeepseekV41Model* m = AltModel();
  const Config& c = m->config();
  ASSERT_EQ(c.num_dspark_layers, 3);
  ASSERT_EQ(c.dspark_block_size, 4);
  const std::vector<int32_t> prompt = AltPrompt(50), teacher = AltPrompt(5);
  const DsparkRun whole = RunDspark(m, prompt, teacher, 3);
  for (const DsparkDraftResult& st : whole.steps) {
    ASSERT_EQ(st.tokens.size(), 4u);
    ASSERT_EQ(st.confidence_logits.size(), 4u);
    ASSERT_EQ(st.logits.size(), static_cast<size_t>(4 * c.vocab_size));
    for (float v : st.logits) ASSERT_TRUE(std::isfinite(v));
    for (float v : st.confidence_logits) ASSERT_TRUE(std::isfinite(v));
    for (int32_t t : st.tokens) {
      ASSERT_GE(t, 0);
      ASSERT_LT(t, c.vocab_size);
    }
  }
  for (int64_t chunk : {1, 7}) {
    const DsparkRun split = RunDspark(m, prompt, teacher, 3, chunk);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(split.steps[i].tokens, whole.steps[i].tokens) << chunk;
      EXPECT_EQ(split.steps[i].confidence_logits, whole.steps[i].confidence_logits) << chunk;
      EXPECT_EQ(split.steps[i].logits, whole.steps[i].logits) << chunk;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// make-test-model --arch deepseek_v41: the tiny preset has exactly the tensor names, dtypes and
// shapes of the shared dsv41-tiny-a checkpoint (built independently) and runs healthily.

TEST(DsV41MakeTestModel, TinyPresetMatchesSharedLayoutAndRuns) {
  SKIP_WITHOUT_SHARED();
  ASSERT_OK_AND_ASSIGN(std::string cfg, TestModelConfigJson41("tiny"));
  const std::string dir = ::testing::TempDir() + "/dsv41_tiny_preset";
  ASSERT_OK(WriteTestModel41(cfg, 7, dir));
  ASSERT_OK_AND_ASSIGN(auto ours, SafetensorsFile::Open(dir + "/model.safetensors"));
  ASSERT_OK_AND_ASSIGN(auto ref, SafetensorsFile::Open(ModelDir() + "/model.safetensors"));
  std::map<std::string, std::string> a, b;
  auto describe = [](const auto& t) {
    std::string d = std::to_string(static_cast<int>(t.dtype)) + ":";
    for (int64_t x : t.shape) d += std::to_string(x) + ",";
    return d;
  };
  for (const auto& [name, t] : ours->tensors()) a[name] = describe(t);
  for (const auto& [name, t] : ref->tensors()) {
    if (name.rfind("vision.", 0) == 0 || name.rfind("aligner.", 0) == 0) continue;
    b[name] = describe(t);
  }
  for (const auto& [name, d] : b) {
    EXPECT_EQ(a.count(name) ? a[name] : "missing", d) << name;
  }
  for (const auto& [name, d] : a) EXPECT_TRUE(b.count(name)) << "extra tensor " << name;
  ASSERT_OK_AND_ASSIGN(Config mine, Config::Parse(cfg, "tiny"));
  ASSERT_OK_AND_ASSIGN(Config shared, Config::Parse(ReadText(ModelDir() + "/config.json"), "ref"));
  EXPECT_EQ(mine.engram_compressed_vocab, shared.engram_compressed_vocab);
  EXPECT_EQ(mine.engram_num_embeddings, shared.engram_num_embeddings);
  for (int64_t l = 0; l < shared.TotalBlocks(); ++l) {
    EXPECT_EQ(static_cast<int>(mine.roles[l].role), static_cast<int>(shared.roles[l].role)) << l;
  }
  LoadOptions o;
  o.show_progress = false;
  ASSERT_OK_AND_ASSIGN(auto lm, LoadDeepseekV41(dir, o));
  auto* m = static_cast<DeepseekV41Model*>(lm.get());
  std::vector<BlockDebug41> dbg;
  m->set_debug(&dbg);
  Session s(m, 64);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back((i * 37 + 11) % 500);
  ASSERT_OK_AND_ASSIGN(auto logits, s.Feed(prompt, 0, 0, {}, LogitsMode::kLast));
  m->set_debug(nullptr);
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  ASSERT_EQ(static_cast<int64_t>(dbg.size()), mine.num_layers);
  for (const BlockDebug41& d : dbg) {
    for (float r : d.stream_rms) {
      EXPECT_GT(r, 0.5f);
      EXPECT_LT(r, 2.0f);
    }
  }
}

// Routed MXFP4 experts of the shared checkpoint are repacked into the kernels' lane layout where
// the kernels use it (as DeepSeek-V4's are), not for an FP64-only load, and the packed product
// agrees with the checkpoint layout's and with the FP64 product.
TEST(DsV41Weights, RoutedExpertsRepackedForTheLaneKernels) {
  SKIP_WITHOUT_SHARED();
  ASSERT_OK_AND_ASSIGN(Config c, Config::Parse(ReadText(ModelDir() + "/config.json"), "ref"));
  ASSERT_TRUE(c.expert_fp4);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(ModelDir()));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Weights41> w, BindWeights41(c, *ckpt));
  const bool lanes = kernels::UsesMxfp4Lanes();
  EXPECT_EQ(w->lane_pack_bytes > 0, lanes);
  const dsv4::WeightMatrix* m = nullptr;
  for (const BlockWeights41& b : w->blocks) {
    for (const auto& e : b.ffn.experts) {
      for (const WeightMatrix* x : {&e.w1, &e.w2, &e.w3}) {
        EXPECT_EQ(x->lane_codes != nullptr, lanes);
        if (m == nullptr) m = x;
      }
    }
  }
  ASSERT_NE(m, nullptr);
  const dsv4::LaneLayoutErrors errors = dsv4::CompareLaneLayout(*m, false);
  EXPECT_LE(errors.lanes, 1e-5);
  EXPECT_LE(errors.plain, 1e-5);
  ASSERT_OK_AND_ASSIGN(auto fp64_only, BindWeights41(c, *ckpt, /*repack_experts=*/false));
  EXPECT_EQ(fp64_only->lane_pack_bytes, 0);
  EXPECT_EQ(fp64_only->blocks[0].ffn.experts[0].w1.lane_codes, nullptr);
}

}  // namespace
}  // namespace deepinfer::model::dsv41
