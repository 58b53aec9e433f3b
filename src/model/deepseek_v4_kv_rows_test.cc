// DeepSeek-V4 paged-KV row formats (deepseek_v4_kv_rows.h): byte layouts checked by hand, exact
// round trips of rows made by the model's own FP8 / FP4 / BF16 simulation (random and edge
// values), loud failure on rows the simulation cannot produce; and, on make-test-model
// checkpoints, that the compact layout stores exactly the FP32 layout's rows and leaves every
// logit bitwise unchanged.
#include "model/deepseek_v4_kv_rows.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4.h"
#include "model/deepseek_v4_make_test_model.h"
#include "model/deepseek_v4_numerics.h"
#include "model/deepseek_v4_reference.h"

namespace deepinfer::model::dsv4 {
namespace {

namespace fs = std::filesystem;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Bitwise equality of two rows; NaN positions only need to be NaN in both.
void ExpectSameRow(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool same = std::isnan(want[i]) ? std::isnan(got[i]) : Bits(got[i]) == Bits(want[i]);
    if (!same && bad++ < 5) {
      ADD_FAILURE() << "value " << i << ": got " << got[i] << " (0x" << std::hex << Bits(got[i])
                    << "), want " << want[i] << " (0x" << Bits(want[i]) << std::dec << ")";
    }
  }
  EXPECT_EQ(bad, 0);
}

std::vector<float> RoundTrip(const KvRowCodec& codec, const std::vector<float>& row) {
  std::vector<uint8_t> bytes(codec.RowBytes(), 0xAB);
  codec.Encode(row.data(), bytes.data());
  std::vector<float> back(codec.dim);
  codec.Decode(bytes.data(), back.data());
  return back;
}

// A main compressed row as the model makes it: BF16 values (the RMSNorm output), BF16 RoPE part,
// FP8 simulation of the rest (Compress in deepseek_v4.cc).
std::vector<float> MainRow(std::vector<float> x, int64_t rope_dim) {
  const int64_t n = static_cast<int64_t>(x.size());
  for (float& v : x) v = RoundBf16(v);
  Fp8SimInPlace(x.data(), n - rope_dim, 64);
  return x;
}
// An indexer key as the model makes it: Hadamard, BF16, FP4 simulation.
std::vector<float> IndexerRow(std::vector<float> x) {
  Hadamard128InPlace(x.data());
  for (float& v : x) v = RoundBf16(v);
  Fp4SimInPlace(x.data(), static_cast<int64_t>(x.size()));
  return x;
}

// Random values whose magnitude spans `lo_exp`..`hi_exp` binades, chosen per 32 values so that
// blocks get very different scales.
std::vector<float> RandomValues(int64_t n, std::mt19937* rng, int lo_exp, int hi_exp) {
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> ex(lo_exp, hi_exp);
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; i += 32) {
    const float scale = std::ldexp(1.0f, ex(*rng));
    for (int64_t j = i; j < std::min(n, i + 32); ++j) x[j] = normal(*rng) * scale;
  }
  return x;
}

TEST(DsV4KvRows, RowBytes) {
  // spec §4: 448 e4m3 + 64 BF16 + 7 scales = 583 -> 584; MXFP4 64 + 4 = 68.
  EXPECT_EQ(Fp8RopeRowBytes(512, 64), 584);
  EXPECT_EQ(Fp8RopeRowBytes(128, 64), 200);  // 64 + 128 + 1 = 193 -> 200
  EXPECT_EQ(Mxfp4RowBytes(128), 68);
  EXPECT_EQ((KvRowCodec{KvRowFormat::kF32, 128, 64}.RowBytes()), 512);
  EXPECT_EQ((KvRowCodec{KvRowFormat::kFp8Rope, 512, 64}.RowBytes()), 584);
  EXPECT_EQ((KvRowCodec{KvRowFormat::kMxfp4, 128, 0}.RowBytes()), 68);
}

TEST(DsV4KvRows, Fp8RopeBytesByHand) {
  const KvRowCodec codec{KvRowFormat::kFp8Rope, 128, 64};
  std::vector<float> row(128, 0.f);
  // Block 0: largest magnitude 1.75 -> scale 2^ceil(log2(1.75 / 448)) = 2^-8 (E8M0 119);
  // 1.0 = 256 x 2^-8 (e4m3 0x78: exponent 15, mantissa 0), -0.5 = -128 x 2^-8 (0xF0),
  // 1.75 = 448 x 2^-8 (0x7E), 2^-17 = 2^-9 x 2^-8 (smallest subnormal, 0x01), -0.0 (0x80).
  row[0] = 1.0f;
  row[1] = -0.5f;
  row[2] = 1.75f;
  row[3] = std::ldexp(1.0f, -17);
  row[4] = -0.0f;
  row[64] = 1.0f;       // BF16 0x3F80
  row[65] = -0.09375f;  // -1.5 x 2^-4: BF16 0xBDC0
  row[127] = -0.0f;     // BF16 0x8000
  std::vector<uint8_t> b(codec.RowBytes(), 0xAB);
  codec.Encode(row.data(), b.data());
  ASSERT_EQ(b.size(), 200u);
  EXPECT_EQ(b[0], 0x78);
  EXPECT_EQ(b[1], 0xF0);
  EXPECT_EQ(b[2], 0x7E);
  EXPECT_EQ(b[3], 0x01);
  EXPECT_EQ(b[4], 0x80);
  for (int i = 5; i < 64; ++i) EXPECT_EQ(b[i], 0x00) << i;
  EXPECT_EQ(b[64], 0x80);  // BF16 little-endian from byte 64
  EXPECT_EQ(b[65], 0x3F);
  EXPECT_EQ(b[66], 0xC0);
  EXPECT_EQ(b[67], 0xBD);
  EXPECT_EQ(b[64 + 2 * 63], 0x00);
  EXPECT_EQ(b[64 + 2 * 63 + 1], 0x80);
  EXPECT_EQ(b[192], 119);  // the scale byte after the 128 BF16 bytes
  for (int i = 193; i < 200; ++i) EXPECT_EQ(b[i], 0x00) << "padding " << i;
  std::vector<float> back(128);
  codec.Decode(b.data(), back.data());
  ExpectSameRow(back, row);
}

TEST(DsV4KvRows, Mxfp4BytesByHand) {
  const KvRowCodec codec{KvRowFormat::kMxfp4, 128, 0};
  std::vector<float> row(128, 0.f);
  // Block 0: largest magnitude 3 -> scale 2^ceil(log2(3 / 6)) = 2^-1 (E8M0 126): 3 = 6 x 2^-1
  // (nibble 7), -1.5 = -3 x 2^-1 (0xD), 0.5 = 1 x 2^-1 (2), -0.0 (8).
  row[0] = 3.0f;
  row[1] = -1.5f;
  row[2] = 0.5f;
  row[3] = -0.0f;
  // Block 3 (values 96..127): 2^-20 alone -> scale 2^-22 (E8M0 105), nibble 6 (4).
  row[97] = std::ldexp(1.0f, -20);
  std::vector<uint8_t> b(codec.RowBytes(), 0xAB);
  codec.Encode(row.data(), b.data());
  ASSERT_EQ(b.size(), 68u);
  EXPECT_EQ(b[0], 0xD7);  // value 0 in the low nibble, value 1 in the high one
  EXPECT_EQ(b[1], 0x82);
  for (int i = 2; i < 64; ++i) {
    if (i != 48) {
      EXPECT_EQ(b[i], 0x00) << i;
    }
  }
  EXPECT_EQ(b[48], 0x60);  // values 96 (low) and 97 (high)
  EXPECT_EQ(b[64], 126);
  EXPECT_EQ(b[65], 127);  // all-zero blocks get scale 2^0
  EXPECT_EQ(b[66], 127);
  EXPECT_EQ(b[67], 105);
  std::vector<float> back(128);
  codec.Decode(b.data(), back.data());
  ExpectSameRow(back, row);
}

TEST(DsV4KvRows, MainRowsRoundTripExactly) {
  std::mt19937 rng(7);
  for (int64_t dim : {128, 512}) {
    const KvRowCodec codec{KvRowFormat::kFp8Rope, dim, 64};
    for (int it = 0; it < 500; ++it) {
      const std::vector<float> row = MainRow(RandomValues(dim, &rng, -30, 20), 64);
      ExpectSameRow(RoundTrip(codec, row), row);
      if (HasFailure()) return;
    }
  }
}

TEST(DsV4KvRows, IndexerRowsRoundTripExactly) {
  std::mt19937 rng(8);
  const KvRowCodec codec{KvRowFormat::kMxfp4, 128, 0};
  for (int it = 0; it < 1000; ++it) {
    // Without the Hadamard too, so that blocks keep very different scales.
    std::vector<float> x = RandomValues(128, &rng, -40, 30);
    const std::vector<float> row = it % 2 == 0 ? IndexerRow(x) : [&] {
      Fp4SimInPlace(x.data(), 128);
      return x;
    }();
    ExpectSameRow(RoundTrip(codec, row), row);
    if (HasFailure()) return;
  }
}

TEST(DsV4KvRows, MainRowEdgeValues) {
  const KvRowCodec codec{KvRowFormat::kFp8Rope, 128, 64};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // All zeros (with negative zeros).
  std::vector<float> x(128, 0.f);
  for (int i = 0; i < 128; i += 3) x[i] = -0.0f;
  ExpectSameRow(RoundTrip(codec, MainRow(x, 64)), MainRow(x, 64));
  // The largest e4m3 value at several scales, subnormal e4m3 codes next to it, values that the
  // simulation flushes to (signed) zero, the activation amax floor (1e-4) and huge magnitudes.
  const std::vector<float> specials = {448.f,
                                       -448.f,
                                       1.f,
                                       std::ldexp(1.f, -9),
                                       std::ldexp(3.f, -9),
                                       -std::ldexp(7.f, -9),
                                       std::ldexp(1.f, -12),
                                       -std::ldexp(1.f, -12),
                                       1e-30f,
                                       -1e-30f,
                                       0.f,
                                       -0.f};
  for (float big : {448.f, 1.f, 1e-4f, 1e-7f, 1.0e38f, std::ldexp(1.f, -120)}) {
    for (size_t i = 0; i < 64; ++i) {
      const float v = specials[i % specials.size()] * (big / 448.f);
      x[i] = (i % 7 == 0) ? big : v;
    }
    for (int i = 64; i < 128; ++i) x[i] = (i % 2 ? -1.f : 1.f) * big * std::ldexp(1.f, -(i % 9));
    const std::vector<float> row = MainRow(x, 64);
    SCOPED_TRACE(big);
    ExpectSameRow(RoundTrip(codec, row), row);
  }
  // NaN, as the simulation leaves it: a NaN in the e4m3 part is ignored by its block's amax and
  // stays NaN; a NaN RoPE value stays NaN; everything else is unchanged.
  std::mt19937 rng(9);
  x = RandomValues(128, &rng, -5, 5);
  x[5] = nan;
  x[70] = -nan;
  const std::vector<float> row = MainRow(x, 64);
  ASSERT_TRUE(std::isnan(row[5]));
  const std::vector<float> back = RoundTrip(codec, row);
  ExpectSameRow(back, row);
  EXPECT_TRUE(std::isnan(back[5]));
  EXPECT_TRUE(std::isnan(back[70]));
}

TEST(DsV4KvRows, IndexerRowEdgeValues) {
  const KvRowCodec codec{KvRowFormat::kMxfp4, 128, 0};
  std::vector<float> x(128, 0.f);
  for (int i = 0; i < 128; i += 5) x[i] = -0.0f;
  Fp4SimInPlace(x.data(), 128);
  ExpectSameRow(RoundTrip(codec, x), x);
  // Block 0: 6 and its neighbours at scale 1; block 1: values at the FP4 amax floor 6 x 2^-126,
  // whose smallest power-of-two scale (2^-129) is below E8M0's range; block 2: a float32
  // subnormal alone; block 3: huge values.
  for (int i = 0; i < 32; ++i) x[i] = kernels::kFp4E2m1Table[i % 16];
  x[0] = 6.f;
  for (int i = 32; i < 64; ++i) x[i] = (i % 2 ? -1.f : 1.f) * std::ldexp(1.f, -127 - i % 3);
  x[64] = std::ldexp(1.f, -140);
  for (int i = 96; i < 128; ++i) x[i] = (i % 3 - 1) * 1.0e30f;
  Fp4SimInPlace(x.data(), 128);
  ASSERT_EQ(x[0], 6.f);
  ExpectSameRow(RoundTrip(codec, x), x);
  // A NaN makes its block NaN (MXFP4 has no NaN code: OCP MX scale 0xFF); other blocks unchanged.
  std::mt19937 rng(10);
  x = RandomValues(128, &rng, -5, 5);
  x[40] = std::numeric_limits<float>::quiet_NaN();
  Fp4SimInPlace(x.data(), 128);
  const std::vector<float> back = RoundTrip(codec, x);
  for (int i = 32; i < 64; ++i) EXPECT_TRUE(std::isnan(back[i])) << i;
  for (int i : {0, 1, 2, 3}) {
    std::vector<float> got(back.begin() + 32 * i, back.begin() + 32 * i + 32);
    std::vector<float> want(x.begin() + 32 * i, x.begin() + 32 * i + 32);
    if (i != 1) ExpectSameRow(got, want);
  }
}

TEST(DsV4KvRows, UnrepresentableValuesFailLoudly) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const KvRowCodec main{KvRowFormat::kFp8Rope, 128, 64};
  const KvRowCodec idx{KvRowFormat::kMxfp4, 128, 0};
  std::vector<uint8_t> out(512);
  std::vector<float> row(128, 0.f);
  row[0] = 448.f;
  row[1] = 1.0625f;  // needs 4 mantissa bits at scale 1 (e4m3 has 3)
  EXPECT_DEATH(main.Encode(row.data(), out.data()), "not an e4m3 value");
  row.assign(128, 0.f);
  row[64] = 1.00390625f;  // 1 + 2^-8: not BF16
  EXPECT_DEATH(main.Encode(row.data(), out.data()), "not BF16");
  row.assign(128, 0.f);
  row[0] = 6.f;
  row[1] = 2.5f;  // between e2m1 values 2 and 3
  EXPECT_DEATH(idx.Encode(row.data(), out.data()), "not an e2m1 value");
  row[1] = std::numeric_limits<float>::infinity();
  EXPECT_DEATH(idx.Encode(row.data(), out.data()), "never produces");
}

// ---------------------------------------------------------------------------------------------
// The model: compact rows against FP32 rows.

std::string TempDir(const std::string& name) {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string d = std::string(DEEPINFER_BINARY_DIR) + "/dsv4_test_models/" + name + "." +
                        info->test_suite_name() + "." + info->name();
  fs::create_directories(d);
  return d;
}

std::unique_ptr<DeepseekV4Model> Open(const std::string& dir, bool fp32_activations,
                                      KvRowStorage rows) {
  std::ifstream in(dir + "/config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  auto config = Config::Parse(ss.str(), dir + "/config.json");
  CHECK(config.ok()) << config.status();
  auto ckpt = Checkpoint::Open(dir, CheckpointOptions{});
  CHECK(ckpt.ok()) << ckpt.status();
  LoadOptions opts;
  opts.fp32_activations = fp32_activations;
  opts.show_progress = false;
  auto m = DeepseekV4Model::Create(*std::move(config), *std::move(ckpt), opts, rows);
  CHECK(m.ok()) << m.status();
  return *std::move(m);
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

int PagedIndex(const KvLayout& L, const std::string& name) {
  for (size_t i = 0; i < L.paged.size(); ++i) {
    if (L.paged[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

TEST(DsV4KvRows, LayoutsAndIds) {
  const std::string dir = TempDir("tiny_rows");
  ASSERT_OK_AND_ASSIGN(Config c, TestModelPreset("tiny"));
  ASSERT_OK(WriteTestModel(c, 3, dir));
  auto compact = Open(dir, false, KvRowStorage::kAuto);
  auto f32 = Open(dir, false, KvRowStorage::kFp32);
  auto tier_b = Open(dir, true, KvRowStorage::kAuto);
  const KvLayout &A = compact->kv_layout(), &F = f32->kv_layout(), &B = tier_b->kv_layout();
  // tiny: compress_ratios {0, 4, 16, 4 | MTP 0}; head_dim 128 / rope 64; indexer 128.
  for (const KvLayout* L : {&A, &F, &B}) {
    ASSERT_EQ(L->paged.size(), 5u);
    EXPECT_EQ(L->paged[PagedIndex(*L, "layers.1.compressed_kv")].rows_per_block, 32);
    EXPECT_EQ(L->paged[PagedIndex(*L, "layers.2.compressed_kv")].rows_per_block, 8);
    EXPECT_EQ(L->paged[PagedIndex(*L, "layers.3.indexer_k")].rows_per_block, 32);
  }
  for (const std::string name : {"layers.1.compressed_kv", "layers.2.compressed_kv"}) {
    EXPECT_EQ(A.paged[PagedIndex(A, name)].row_bytes, 200) << name;
    EXPECT_EQ(F.paged[PagedIndex(F, name)].row_bytes, 512) << name;
    EXPECT_EQ(B.paged[PagedIndex(B, name)].row_bytes, 512) << name;
  }
  EXPECT_EQ(A.paged[PagedIndex(A, "layers.1.indexer_k")].row_bytes, 68);
  EXPECT_EQ(B.paged[PagedIndex(B, "layers.1.indexer_k")].row_bytes, 512);
  // Block bytes: per cache 64-byte aligned. Compact: 32x200 + 32x68 (2176) + 8x200 (1600) +
  // 32x200 + 32x68 = 6400 + 2176 + 1600 + 6400 + 2176; FP32: 512 per row.
  EXPECT_EQ(A.BlockBytes(), 6400 + 2176 + 1600 + 6400 + 2176);
  EXPECT_EQ(F.BlockBytes(), (32 + 32 + 8 + 32 + 32) * 512);
  // The state is the same FP32 state in every layout.
  EXPECT_EQ(A.StateBytes(), F.StateBytes());
  EXPECT_NE(A.layout_id, F.layout_id);
  EXPECT_NE(A.layout_id, B.layout_id);
  EXPECT_NE(F.layout_id, B.layout_id);
  // Deterministic across loads.
  EXPECT_EQ(Open(dir, false, KvRowStorage::kAuto)->kv_layout().layout_id, A.layout_id);
}

// Runs `prompt` as chunks of `chunk` tokens then `decode` single-token steps (fed the prompt's
// continuation), returning every logit row; the block arena is left in *blocks.
std::vector<float> Run(DeepseekV4Model* model, const std::vector<int32_t>& tokens, int64_t chunk,
                       int64_t decode_steps, std::vector<uint8_t>* blocks,
                       std::vector<int32_t>* table) {
  const KvLayout& L = model->kv_layout();
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int64_t nblocks = (T + kBlockTokens - 1) / kBlockTokens;
  blocks->assign(nblocks * L.BlockBytes() + 64, 0);
  std::vector<uint8_t> state(L.StateBytes() + 64, 0);
  table->resize(nblocks);
  for (int64_t i = 0; i < nblocks; ++i) (*table)[i] = static_cast<int32_t>(nblocks - 1 - i);
  KvCacheView kv{blocks->data(), nblocks, state.data(), 1};
  std::vector<float> logits;
  int64_t pos = 0;
  while (pos < T) {
    const int64_t n = pos < T - decode_steps ? std::min(chunk, T - decode_steps - pos) : 1;
    ForwardBatch batch;
    batch.chunks.push_back(
        {pos, std::span<const int32_t>(tokens).subspan(pos, n), *table, 0, LogitsMode::kAll});
    ForwardOutput out;
    CHECK(model->Forward(batch, kv, &out).ok());
    logits.insert(logits.end(), out.logits.begin(), out.logits.end());
    pos += n;
  }
  return logits;
}

void CheckCompactEqualsFp32(const std::string& preset, int64_t T, int64_t decode_steps) {
  const std::string dir = TempDir(preset + "_rows");
  ASSERT_OK_AND_ASSIGN(Config c, TestModelPreset(preset));
  ASSERT_OK(WriteTestModel(c, 5, dir));
  auto compact = Open(dir, false, KvRowStorage::kAuto);
  auto f32 = Open(dir, false, KvRowStorage::kFp32);
  const std::vector<int32_t> tokens = Prompt(T, c.vocab_size, 17);
  for (int64_t chunk : {T, int64_t{37}}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    std::vector<uint8_t> blocks_a, blocks_f;
    std::vector<int32_t> table;
    const std::vector<float> la =
        Run(compact.get(), tokens, chunk, decode_steps, &blocks_a, &table);
    const std::vector<float> lf = Run(f32.get(), tokens, chunk, decode_steps, &blocks_f, &table);
    ASSERT_EQ(la.size(), lf.size());
    int64_t diff = 0;
    for (size_t i = 0; i < la.size(); ++i) diff += Bits(la[i]) != Bits(lf[i]);
    EXPECT_EQ(diff, 0) << "logits differ between compact and FP32 rows (of " << la.size() << ")";
    // Every stored compact row decodes to exactly the FP32 layout's row.
    const KvLayout &A = compact->kv_layout(), &F = f32->kv_layout();
    int64_t rows_checked = 0;
    for (size_t i = 0; i < A.paged.size(); ++i) {
      const bool indexer = A.paged[i].name.ends_with("indexer_k");
      const int64_t dim = indexer ? c.index_head_dim : c.head_dim;
      const KvRowCodec codec{indexer ? KvRowFormat::kMxfp4 : KvRowFormat::kFp8Rope, dim,
                             c.rope_dim};
      ASSERT_EQ(A.paged[i].row_bytes, codec.RowBytes());
      const int64_t rpb = A.paged[i].rows_per_block, ratio = kBlockTokens / rpb;
      for (int64_t r = 0; r < T / ratio; ++r) {
        const int64_t blk = table[r * ratio / kBlockTokens];
        const uint8_t* a = blocks_a.data() + blk * A.BlockBytes() + A.PagedOffset(i) +
                           (r % rpb) * A.paged[i].row_bytes;
        const uint8_t* f = blocks_f.data() + blk * F.BlockBytes() + F.PagedOffset(i) +
                           (r % rpb) * F.paged[i].row_bytes;
        std::vector<float> want(dim), got(dim);
        std::memcpy(want.data(), f, dim * 4);
        codec.Decode(a, got.data());
        SCOPED_TRACE(A.paged[i].name + " row " + std::to_string(r));
        ExpectSameRow(got, want);
        if (::testing::Test::HasFailure()) return;
        ++rows_checked;
      }
    }
    EXPECT_GT(rows_checked, 0);
  }
}

TEST(DsV4KvRows, TinyCompactRowsKeepLogitsBitwise) { CheckCompactEqualsFp32("tiny", 200, 8); }

TEST(DsV4KvRows, Tiny128CompactRowsKeepLogitsBitwise) {
  // Ratio-128 HCA layer: >= 300 tokens crosses two HCA rows.
  CheckCompactEqualsFp32("tiny128", 300, 6);
}

}  // namespace
}  // namespace deepinfer::model::dsv4
