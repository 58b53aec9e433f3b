// DeepSeek-V4 tests on checkpoints made by make-test-model: config round trip, chunking
// invariants on a second random configuration (hc_mult 2, ratio-128 HCA layer, >= 300 tokens),
// the demo preset's health, and load errors naming the bad tensor.
#include "model/deepseek_v4.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "common/config.h"
#include "common/status.h"
#include "common/status_matchers.h"
#include "common/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4_golden_testing.h"
#include "model/deepseek_v4_make_test_model.h"
#include "model/deepseek_v4_moe.h"
#include "model/deepseek_v4_reference.h"
#include "model/deepseek_v4_weights.h"
#include "model/model.h"
#include "model/safetensors_writer.h"

namespace deepinfer::model::dsv4 {
namespace {

namespace fs = std::filesystem;
using ::deepinfer::testing::StatusIs;
using ::testing::HasSubstr;

// One directory per test: ctest runs the tests of this binary as parallel processes, and a test
// rewriting a checkpoint another one has memory-mapped would make the reader fault (SIGBUS).
std::string TempDir(const std::string& name) {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string d = std::string(DEEPINFER_BINARY_DIR) + "/dsv4_test_models/" + name + "." +
                        info->test_suite_name() + "." + info->name();
  fs::create_directories(d);
  return d;
}

std::unique_ptr<DeepseekV4Model> Load(const std::string& dir) {
  auto m = LoadModel(dir, LoadOptions{});
  CHECK(m.ok()) << m.status();
  return std::unique_ptr<DeepseekV4Model>(static_cast<DeepseekV4Model*>(m->release()));
}

std::vector<int32_t> Prompt(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> p(n);
  uint64_t x = seed;
  for (auto& t : p) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<int32_t>((x >> 33) % vocab);
  }
  return p;
}

TEST(DsV4Config, RoundTripThroughJson) {
  for (const char* preset : {"tiny", "tiny128", "demo", "bench"}) {
    ASSERT_OK_AND_ASSIGN(Config c, TestModelPreset(preset));
    ASSERT_OK_AND_ASSIGN(Config back, Config::Parse(c.ToJson(), preset));
    EXPECT_EQ(back.ToJson(), c.ToJson()) << preset;
  }
  EXPECT_THAT(TestModelPreset("nope").status(), StatusIs(absl::StatusCode::kNotFound));
}

TEST(DsV4Config, RejectsRatioNotDividingTheBlock) {
  ASSERT_OK_AND_ASSIGN(Config c, TestModelPreset("tiny"));
  c.compress_ratios[2] = 24;
  EXPECT_THAT(Config::Parse(c.ToJson(), "cfg").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("compress_ratios[2]")));
  ASSERT_OK_AND_ASSIGN(Config d, TestModelPreset("tiny"));
  d.compress_ratios.resize(3);
  EXPECT_THAT(Config::Parse(d.ToJson(), "cfg").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("compress_ratios")));
}

// Second random config: hc_mult 2, ratios [0, 4, 128, 4] + MTP; 300 tokens cross the window
// (16), the ratio-4 and the ratio-128 boundaries; chunk sizes 1, 7, 64 and prefill + decode must
// equal one whole-prompt forward bit for bit.
TEST(DsV4Invariants, SecondConfigChunkingEqualsWholePrompt) {
  const std::string dir = TempDir("tiny128");
  ASSERT_OK_AND_ASSIGN(Config c, TestModelPreset("tiny128"));
  ASSERT_OK(WriteTestModel(c, 7, dir));
  auto model = Load(dir);
  const std::vector<int32_t> prompt = Prompt(300, c.vocab_size, 3);
  ReferenceSession whole(model.get(), 300);
  std::vector<float> streams;
  ASSERT_OK_AND_ASSIGN(auto ref, whole.Feed(prompt, {}, &streams));
  for (auto& v : ref) ASSERT_TRUE(std::isfinite(v));
  for (int64_t size : {1, 7, 64}) {
    ReferenceSession s(model.get(), 300);
    ASSERT_OK_AND_ASSIGN(auto got, s.Feed(prompt, std::vector<int64_t>{size}));
    int64_t diff = 0;
    for (size_t i = 0; i < got.size(); ++i) diff += got[i] != ref[i];
    EXPECT_EQ(diff, 0) << "chunk size " << size;
  }
  // MTP: chunked equals whole as well.
  std::vector<int32_t> next(prompt.begin() + 1, prompt.end());
  next.push_back(5);
  ASSERT_OK_AND_ASSIGN(auto mtp_whole, whole.Mtp(0, streams, next, LogitsMode::kAll));
  const int64_t per = c.hc_mult * c.hidden_size;
  std::vector<float> mtp_chunked;
  for (int64_t start = 0; start < 300; start += 64) {
    const int64_t n = std::min<int64_t>(64, 300 - start);
    ASSERT_OK_AND_ASSIGN(
        auto part, whole.Mtp(start, std::span<const float>(streams).subspan(start * per, n * per),
                             std::span<const int32_t>(next).subspan(start, n), LogitsMode::kAll));
    mtp_chunked.insert(mtp_chunked.end(), part.begin(), part.end());
  }
  EXPECT_EQ(mtp_chunked, mtp_whole);
}

TEST(DsV4Invariants, BatchOfTwoSequencesMatchesSingle) {
  const std::string dir = TempDir("tiny_batch");
  ASSERT_OK_AND_ASSIGN(Config c, TestModelPreset("tiny"));
  ASSERT_OK(WriteTestModel(c, 11, dir));
  auto model = Load(dir);
  const KvLayout& L = model->kv_layout();
  std::vector<float> blocks(4 * L.BlockBytes() / 4 + 16), state(2 * L.StateBytes() / 4 + 16);
  KvCacheView kv{reinterpret_cast<uint8_t*>(blocks.data()), 4,
                 reinterpret_cast<uint8_t*>(state.data()), 2};
  const auto a = Prompt(40, c.vocab_size, 1), b = Prompt(25, c.vocab_size, 2);
  const std::vector<int32_t> ta = {0}, tb = {1};
  ForwardBatch batch;
  batch.chunks.push_back({0, a, ta, 0, LogitsMode::kAll});
  batch.chunks.push_back({0, b, tb, 1, LogitsMode::kLast});
  ForwardOutput out;
  ASSERT_OK(model->Forward(batch, kv, &out));
  ASSERT_EQ(out.chunk_row_begin, (std::vector<int64_t>{0, 40, 41}));
  ReferenceSession sb(model.get(), 25);
  ASSERT_OK_AND_ASSIGN(auto lb, sb.Feed(b));
  const int64_t V = c.vocab_size;
  EXPECT_EQ(std::vector<float>(out.logits.begin() + 40 * V, out.logits.end()),
            std::vector<float>(lb.end() - V, lb.end()));
  // Malformed batches are rejected.
  ForwardBatch bad;
  const std::vector<int32_t> bad_tok = {static_cast<int32_t>(V)};
  bad.chunks.push_back({0, bad_tok, ta, 0, LogitsMode::kLast});
  EXPECT_THAT(model->Forward(bad, kv, &out), StatusIs(absl::StatusCode::kInvalidArgument));
  bad.chunks[0] = {0, a, {}, 0, LogitsMode::kLast};
  EXPECT_THAT(model->Forward(bad, kv, &out),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("block table")));
  bad.chunks[0] = {0, a, ta, 5, LogitsMode::kLast};
  EXPECT_THAT(model->Forward(bad, kv, &out),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("state slot")));
}

// Continuous batching: a ForwardBatch mixing prefill chunks (first and continuing), middle
// chunks without logits and single decode tokens of five sequences at different positions
// (crossing the window of 16, the ratio-4 / ratio-16 compression boundaries and a 128-token
// block) gives, for every chunk, the logits of running that chunk alone (same chunk sequence,
// own KV arena and block ids). Batch order is shuffled between steps, so rows move around.
// Without DEEPINFER_BATCH_INVARIANT a tight tolerance applies; with it, bitwise equality.
struct MixedStep {
  int seq;
  int64_t tokens;
  LogitsMode mode;
};

void CheckMixedBatchEqualsAlone(bool batch_invariant) {
  EnvConfig saved = Env();
  EnvConfig env = saved;
  env.batch_invariant = batch_invariant;
  SetEnvConfigForTesting(env);
  const std::string dir = TempDir("tiny_mixed");
  ASSERT_OK_AND_ASSIGN(Config c, TestModelPreset("tiny"));
  ASSERT_OK(WriteTestModel(c, 13, dir));
  auto model = Load(dir);
  const KvLayout& L = model->kv_layout();
  const int64_t V = c.vocab_size;
  constexpr int kSeqs = 5;
  constexpr int64_t kBlocksPerSeq = 2;
  const std::vector<std::vector<MixedStep>> steps = {
      {{0, 37, LogitsMode::kAll}, {1, 20, LogitsMode::kLast}, {2, 5, LogitsMode::kNone}},
      {{3, 130, LogitsMode::kLast},
       {0, 1, LogitsMode::kLast},
       {2, 30, LogitsMode::kAll},
       {1, 1, LogitsMode::kLast}},
      {{0, 1, LogitsMode::kLast},
       {1, 3, LogitsMode::kAll},
       {2, 1, LogitsMode::kLast},
       {3, 1, LogitsMode::kLast},
       {4, 1, LogitsMode::kAll}},
      {{4, 16, LogitsMode::kAll}, {0, 1, LogitsMode::kLast}, {3, 2, LogitsMode::kAll}},
      {{1, 1, LogitsMode::kLast},
       {4, 1, LogitsMode::kLast},
       {0, 20, LogitsMode::kNone},
       {3, 1, LogitsMode::kLast},
       {2, 1, LogitsMode::kLast}},
      {{2, 1, LogitsMode::kAll},
       {0, 1, LogitsMode::kAll},
       {4, 1, LogitsMode::kAll},
       {3, 1, LogitsMode::kAll},
       {1, 1, LogitsMode::kAll}},
  };
  std::vector<std::vector<int32_t>> ids(kSeqs);
  for (int i = 0; i < kSeqs; ++i) ids[i] = Prompt(200, V, 100 + i);

  // Alone: each sequence's chunks, in order, as one-chunk batches on its own arena.
  // alone_rows[step][item] = that chunk's logits.
  std::vector<std::vector<std::vector<float>>> alone_rows(steps.size());
  for (size_t st = 0; st < steps.size(); ++st) alone_rows[st].resize(steps[st].size());
  for (int seq = 0; seq < kSeqs; ++seq) {
    std::vector<float> blocks(kBlocksPerSeq * L.BlockBytes() / 4 + 16);
    std::vector<float> state(L.StateBytes() / 4 + 16);
    KvCacheView kv{reinterpret_cast<uint8_t*>(blocks.data()), kBlocksPerSeq,
                   reinterpret_cast<uint8_t*>(state.data()), 1};
    const std::vector<int32_t> table = {1, 0};
    int64_t pos = 0;
    for (size_t st = 0; st < steps.size(); ++st) {
      for (size_t it = 0; it < steps[st].size(); ++it) {
        const MixedStep& m = steps[st][it];
        if (m.seq != seq) continue;
        ForwardBatch one;
        one.chunks.push_back(
            {pos, std::span<const int32_t>(ids[seq]).subspan(pos, m.tokens), table, 0, m.mode});
        ForwardOutput out;
        ASSERT_OK(model->Forward(one, kv, &out));
        alone_rows[st][it] = out.logits;
        pos += m.tokens;
      }
    }
  }

  // Batched: every step's chunks in one ForwardBatch on a shared arena (interleaved block ids,
  // slots in reverse order).
  std::vector<float> blocks(kSeqs * kBlocksPerSeq * L.BlockBytes() / 4 + 16);
  std::vector<float> state(kSeqs * L.StateBytes() / 4 + 16);
  KvCacheView kv{reinterpret_cast<uint8_t*>(blocks.data()), kSeqs * kBlocksPerSeq,
                 reinterpret_cast<uint8_t*>(state.data()), kSeqs};
  std::vector<std::vector<int32_t>> tables(kSeqs);
  for (int i = 0; i < kSeqs; ++i) tables[i] = {i, i + kSeqs};
  std::vector<int64_t> pos(kSeqs, 0);
  int64_t compared = 0, exact = 0;
  for (size_t st = 0; st < steps.size(); ++st) {
    ForwardBatch batch;
    for (const MixedStep& m : steps[st]) {
      batch.chunks.push_back({pos[m.seq],
                              std::span<const int32_t>(ids[m.seq]).subspan(pos[m.seq], m.tokens),
                              tables[m.seq], kSeqs - 1 - m.seq, m.mode});
      pos[m.seq] += m.tokens;
    }
    ForwardOutput out;
    ASSERT_OK(model->Forward(batch, kv, &out));
    ASSERT_EQ(out.chunk_row_begin.size(), steps[st].size() + 1);
    ASSERT_EQ(static_cast<int64_t>(out.logits.size()), out.chunk_row_begin.back() * V);
    for (size_t it = 0; it < steps[st].size(); ++it) {
      const std::vector<float>& want = alone_rows[st][it];
      const int64_t begin = out.chunk_row_begin[it] * V, end = out.chunk_row_begin[it + 1] * V;
      ASSERT_EQ(end - begin, static_cast<int64_t>(want.size())) << "step " << st << " item " << it;
      for (int64_t i = 0; i < end - begin; ++i) {
        const float got = out.logits[begin + i], ref = want[i];
        ASSERT_TRUE(std::isfinite(got));
        ++compared;
        exact += got == ref;
        if (batch_invariant) {
          ASSERT_EQ(got, ref) << "step " << st << " seq " << steps[st][it].seq << " index " << i;
        } else {
          ASSERT_NEAR(got, ref, 1e-5f + 1e-5f * std::fabs(ref))
              << "step " << st << " seq " << steps[st][it].seq << " index " << i;
        }
      }
    }
  }
  EXPECT_GT(compared, 100 * V);
  ::testing::Test::RecordProperty("exact_fraction",
                                  std::to_string(static_cast<double>(exact) / compared));
  SetEnvConfigForTesting(saved);
}

TEST(DsV4Invariants, MixedBatchEqualsEachChunkAlone) { CheckMixedBatchEqualsAlone(false); }

TEST(DsV4Invariants, MixedBatchBitwiseEqualsEachChunkAloneWhenBatchInvariant) {
  CheckMixedBatchEqualsAlone(true);
}

TEST(DsV4Invariants, BatchRejectsSharedStateSlot) {
  const std::string dir = TempDir("tiny_batch");
  ASSERT_OK_AND_ASSIGN(Config c, TestModelPreset("tiny"));
  ASSERT_OK(WriteTestModel(c, 11, dir));
  auto model = Load(dir);
  const KvLayout& L = model->kv_layout();
  std::vector<float> blocks(2 * L.BlockBytes() / 4 + 16), state(2 * L.StateBytes() / 4 + 16);
  KvCacheView kv{reinterpret_cast<uint8_t*>(blocks.data()), 2,
                 reinterpret_cast<uint8_t*>(state.data()), 2};
  const auto a = Prompt(8, c.vocab_size, 1), b = Prompt(4, c.vocab_size, 2);
  const std::vector<int32_t> ta = {0}, tb = {1};
  ForwardBatch batch;
  batch.chunks.push_back({0, a, ta, 1, LogitsMode::kLast});
  batch.chunks.push_back({0, b, tb, 1, LogitsMode::kLast});
  ForwardOutput out;
  EXPECT_THAT(model->Forward(batch, kv, &out),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("state slot 1")));
  EXPECT_TRUE(out.logits.empty());
}

// The demo preset (vocab 129280, window 128, ratios 4 and 128) loads, keeps healthy activations
// over a 300-token prompt and decodes.
// RunRoutedExperts hands whole experts to the pool's threads when there are many (decode
// batches): every expert still runs exactly once over exactly its rows, and each row's sum is
// the expert-id-ordered sum a plain loop computes, bitwise, with or without the pool.
TEST(DsV4Moe, RoutedExpertsOnThePoolEqualTheSerialSumBitwise) {
  ThreadPool pool(2);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  const int64_t D = 24, E = 16, K = 3;
  for (int64_t T : {1, 2, 5, 16}) {
    std::vector<float> xn(T * D), wts(T * K);
    std::vector<int32_t> ids(T * K);
    for (float& v : xn) v = nd(rng);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<int32_t> all(E);
      for (int32_t e = 0; e < E; ++e) all[e] = e;
      std::shuffle(all.begin(), all.end(), rng);
      for (int64_t j = 0; j < K; ++j) {
        ids[t * K + j] = all[j];
        wts[t * K + j] = std::abs(nd(rng));
      }
    }
    // A nonlinear expert whose output depends on the expert id, the row and its route weight.
    auto expert_out = [&](int64_t e, const float* x, float w, int64_t k) {
      return std::tanh(x[k] * (1.0f + 0.1f * e)) * w + 0.01f * e;
    };
    // Expected: for each row, its experts' outputs added in increasing expert id, from 0.
    std::vector<float> want(T * D, 0.0f);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<std::pair<int32_t, float>> mine;
      for (int64_t j = 0; j < K; ++j) mine.push_back({ids[t * K + j], wts[t * K + j]});
      std::sort(mine.begin(), mine.end());
      for (const auto& [e, w] : mine) {
        for (int64_t k = 0; k < D; ++k) want[t * D + k] += expert_out(e, &xn[t * D], w, k);
      }
    }
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      std::vector<std::atomic<int>> calls(E);
      std::vector<float> y(T * D, -1.0f);
      RunRoutedExperts(
          xn.data(), T, D, E, K, ids.data(), wts.data(),
          [&](int64_t e, const float* xg, int64_t M, const float* rw, float* yg) {
            ++calls[e];
            for (int64_t r = 0; r < M; ++r) {
              for (int64_t k = 0; k < D; ++k) yg[r * D + k] = expert_out(e, xg + r * D, rw[r], k);
            }
          },
          y.data(), p);
      for (int64_t e = 0; e < E; ++e) {
        const int64_t rows = std::count(ids.begin(), ids.end(), static_cast<int32_t>(e));
        EXPECT_EQ(calls[e].load(), rows > 0 ? 1 : 0) << "expert " << e << " T " << T;
      }
      for (int64_t i = 0; i < T * D; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(want[i]))
            << "T " << T << " i " << i << (p != nullptr ? " pool" : " serial");
      }
    }
  }
}

TEST(DsV4MakeTestModel, DemoPresetIsHealthy) {
  const std::string dir = TempDir("demo");
  ASSERT_OK_AND_ASSIGN(Config c, TestModelPreset("demo"));
  ASSERT_OK(WriteTestModel(c, 1, dir));
  auto model = Load(dir);
  EXPECT_EQ(model->info().vocab_size, 129280);
  std::vector<BlockDebug> dbg;
  model->set_debug(&dbg);
  ReferenceSession s(model.get(), 301);
  const auto prompt = Prompt(300, c.vocab_size, 9);
  ASSERT_OK_AND_ASSIGN(auto logits,
                       s.Feed(prompt, std::vector<int64_t>{300}, nullptr, LogitsMode::kLast));
  model->set_debug(nullptr);
  ASSERT_EQ(dbg.size(), static_cast<size_t>(c.num_layers));
  for (const BlockDebug& b : dbg) {
    for (float r : b.stream_rms) {
      EXPECT_GT(r, 0.3f);
      EXPECT_LT(r, 3.0f);
    }
  }
  double ss = 0;
  const int64_t V = c.vocab_size;
  ASSERT_EQ(logits.size(), static_cast<size_t>(V));
  for (int64_t i = 0; i < V; ++i) ss += logits[i] * logits[i];
  const double rms = std::sqrt(ss / V);
  EXPECT_GT(rms, 0.3);
  EXPECT_LT(rms, 10.0);
  const int32_t next = ArgMax(logits);
  ASSERT_OK_AND_ASSIGN(auto step, s.Feed(std::span<const int32_t>(&next, 1)));
  EXPECT_EQ(step.size(), static_cast<size_t>(V));
}

// Routed FP4 experts are repacked at load into the lane layout wherever the CPU kernels read it,
// and a product through it agrees with the mapped original and with the FP64 oracle.
TEST(DsV4Weights, RoutedExpertsTakeTheKernelsLaneLayout) {
  ASSERT_OK_AND_ASSIGN(Config c, TestModelPreset("tiny"));
  ASSERT_TRUE(c.expert_fp4);
  SafetensorsWriter writer;
  BuildTestWeights(c, 5, &writer);
  const std::string dir = TempDir("lanes");
  ASSERT_OK(writer.Write(dir + "/model.safetensors"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(dir));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Weights> w, BindWeights(c, *ckpt));
  const bool lanes = kernels::UsesMxfp4Lanes();
  int64_t experts = 0;
  for (const BlockWeights& b : w->blocks) {
    for (const ExpertWeights& e : b.ffn.experts) {
      for (const WeightMatrix* m : {&e.w1, &e.w2, &e.w3}) {
        ASSERT_EQ(m->format, WeightFormat::kMxFp4);
        EXPECT_EQ(m->lane_codes != nullptr, lanes);
        EXPECT_EQ(m->lane_scales != nullptr, lanes);
        ++experts;
      }
    }
  }
  EXPECT_GT(experts, 0);
  EXPECT_EQ(w->lane_pack_bytes > 0, lanes);
  const LaneLayoutErrors errors = CompareLaneLayout(w->blocks[0].ffn.experts[0].w1, true);
  EXPECT_LE(errors.lanes, 1e-5);
  EXPECT_LE(errors.plain, 1e-5);

  // DEEPINFER_REPACK_WEIGHTS=0 keeps the checkpoint layout only.
  const EnvConfig saved = Env();
  EnvConfig off = saved;
  off.repack_weights = false;
  SetEnvConfigForTesting(off);
  auto unpacked = BindWeights(c, *ckpt);
  SetEnvConfigForTesting(saved);
  ASSERT_OK(unpacked.status());
  EXPECT_EQ((*unpacked)->lane_pack_bytes, 0);
  EXPECT_TRUE((*unpacked)->lane_packs.empty());
  EXPECT_EQ((*unpacked)->blocks[0].ffn.experts[0].w1.lane_codes, nullptr);
  // Nor does a load for the FP64 (FP32-activation) path only.
  ASSERT_OK_AND_ASSIGN(auto fp64_only, BindWeights(c, *ckpt, /*repack_experts=*/false));
  EXPECT_EQ(fp64_only->lane_pack_bytes, 0);
  EXPECT_EQ(fp64_only->blocks[0].ffn.experts[0].w1.lane_codes, nullptr);
}

// Malformed or mismatched checkpoints give errors naming the tensor.
class DsV4BadCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(config_, TestModelPreset("tiny"));
    BuildTestWeights(config_, 3, &writer_);
  }
  absl::Status LoadWith(const std::string& name, const Config& cfg) {
    const std::string dir = TempDir(name);
    std::ofstream(dir + "/config.json") << cfg.ToJson();
    RETURN_IF_ERROR(writer_.Write(dir + "/model.safetensors"));
    return LoadModel(dir, LoadOptions{}).status();
  }
  Config config_;
  SafetensorsWriter writer_;
};

TEST_F(DsV4BadCheckpoint, MissingTensor) {
  writer_.Remove("layers.2.attn.compressor.wgate.weight");
  EXPECT_THAT(
      LoadWith("bad_missing", config_),
      StatusIs(absl::StatusCode::kNotFound, HasSubstr("layers.2.attn.compressor.wgate.weight")));
}

TEST_F(DsV4BadCheckpoint, WrongShape) {
  std::vector<uint8_t> bytes(127 * 256);
  writer_.Add("layers.1.attn.wq_a.weight", "F8_E4M3", {127, 256}, bytes);
  EXPECT_THAT(LoadWith("bad_shape", config_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("layers.1.attn.wq_a.weight")));
}

TEST_F(DsV4BadCheckpoint, WrongDtype) {
  std::vector<uint8_t> bytes(256 * 4);
  writer_.Add("layers.0.attn_norm.weight", "I32", {256}, bytes);
  EXPECT_THAT(LoadWith("bad_dtype", config_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("layers.0.attn_norm.weight")));
}

TEST_F(DsV4BadCheckpoint, ConfigDisagreesWithWeights) {
  Config c = config_;
  c.moe_inter = 256;  // the checkpoint's experts are 128 wide
  EXPECT_THAT(LoadWith("bad_config", c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("layers.0.ffn.experts.0.w1")));
  Config d = config_;
  d.num_layers = 5;  // one more layer than the checkpoint has
  d.compress_ratios = {0, 4, 16, 4, 0, 0};
  EXPECT_THAT(LoadWith("bad_layers", d),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("layers.4.")));
}

TEST_F(DsV4BadCheckpoint, Tid2eidOutOfRange) {
  std::vector<int64_t> ids(512 * 2, 9);  // expert 9 of 8
  writer_.Add(
      "layers.0.ffn.gate.tid2eid", "I64", {512, 2},
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(ids.data()), ids.size() * 8));
  EXPECT_THAT(LoadWith("bad_tid2eid", config_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("layers.0.ffn.gate.tid2eid")));
}

}  // namespace
}  // namespace deepinfer::model::dsv4
