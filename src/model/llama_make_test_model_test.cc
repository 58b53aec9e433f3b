// make-test-model --arch llama: the "tiny" preset goes through the same writer as "1b" (which is
// 2 GB and never generated here); the result must load as a Llama and run.
#include "model/llama_make_test_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "gtest/gtest.h"
#include "model/kv_layout.h"
#include "model/model.h"
#include "nlohmann/json.hpp"

namespace deepinfer::model {
namespace {

namespace fs = std::filesystem;
using llama_test_model::LlamaTestConfig;
using llama_test_model::LlamaTestPreset;
using llama_test_model::WriteLlamaTestModel;

const std::string kStories = std::string(DEEPINFER_SHARED_DIR) + "/models/stories260K";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class LlamaMakeTestModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() /
            ("llama_mtm_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST(LlamaTestPresetTest, OneBillionPresetHasTheIssueShape) {
  absl::StatusOr<LlamaTestConfig> c = LlamaTestPreset("1b");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->hidden_size, 2048);
  EXPECT_EQ(c->num_hidden_layers, 22);
  EXPECT_EQ(c->num_attention_heads, 32);
  EXPECT_EQ(c->num_key_value_heads, 4);
  EXPECT_EQ(c->intermediate_size, 5632);
  EXPECT_EQ(c->head_dim(), 64);
  EXPECT_EQ(c->vocab_size, 512);  // stories260K's tokenizer
  // Per layer: q,o 2*2048*2048 + k,v 2*2048*256 + mlp 3*2048*5632 + 2 norms.
  const int64_t layer = 2 * 2048 * 2048 + 2 * 2048 * 256 + 3 * 2048 * 5632 + 2 * 2048;
  EXPECT_EQ(c->NumParameters(), 22 * layer + 2 * 512 * 2048 + 2048);
  const nlohmann::json j = nlohmann::json::parse(c->ToJson());
  EXPECT_EQ(j["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(j["torch_dtype"], "bfloat16");
  EXPECT_EQ(j["num_key_value_heads"], 4);
  EXPECT_FALSE(LlamaTestPreset("2b").ok());
}

TEST_F(LlamaMakeTestModelTest, TinyLoadsAndRuns) {
  if (!fs::exists(kStories + "/tokenizer.json")) GTEST_SKIP() << kStories << " is absent";
  absl::StatusOr<LlamaTestConfig> c = LlamaTestPreset("tiny");
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(WriteLlamaTestModel(*c, 7, kStories, dir_).ok());
  EXPECT_TRUE(fs::exists(dir_ + "/tokenizer.json"));
  EXPECT_TRUE(fs::exists(dir_ + "/tokenizer_config.json"));
  // Every weight is BF16 and the file holds exactly the parameters.
  EXPECT_GE(static_cast<int64_t>(fs::file_size(dir_ + "/model.safetensors")),
            2 * c->NumParameters());

  LoadOptions opt;
  opt.show_progress = false;
  absl::StatusOr<std::unique_ptr<CausalLM>> m = LoadModel(dir_, opt);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelInfo& info = (*m)->info();
  EXPECT_EQ(info.architecture, "LlamaForCausalLM");
  EXPECT_EQ(info.vocab_size, c->vocab_size);
  EXPECT_EQ(info.num_layers, c->num_hidden_layers);
  EXPECT_EQ(info.hidden_size, c->hidden_size);

  // Whole prefill vs the same tokens in two chunks: the KV cache the model wrote must give the
  // same last-token logits (tolerance: chunking may change summation order).
  const KvLayout& layout = (*m)->kv_layout();
  const int64_t blocks = (12 + kBlockTokens - 1) / kBlockTokens;
  std::vector<uint8_t> storage(layout.BlockBytes() * blocks * 2 + 64);
  uint8_t* base = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
  std::vector<int32_t> tokens = {1, 45, 300, 7, 99, 12, 480, 3, 256, 77, 5, 400};
  auto run = [&](const std::vector<int64_t>& sizes, int32_t first_block) {
    std::vector<int32_t> table;
    for (int64_t b = 0; b < blocks; ++b) table.push_back(static_cast<int32_t>(first_block + b));
    KvCacheView kv;
    kv.block_base = base;
    kv.num_blocks = blocks * 2;
    int64_t pos = 0;
    std::vector<float> last;
    for (int64_t n : sizes) {
      ForwardBatch batch;
      SequenceChunk ch;
      ch.start_pos = pos;
      ch.tokens = std::span<const int32_t>(tokens.data() + pos, n);
      ch.block_table = table;
      ch.logits = LogitsMode::kLast;
      batch.chunks.push_back(ch);
      ForwardOutput out;
      absl::Status s = (*m)->Forward(batch, kv, &out);
      EXPECT_TRUE(s.ok()) << s;
      last = out.logits;
      pos += n;
    }
    return last;
  };
  const std::vector<float> whole = run({12}, 0);
  const std::vector<float> chunked = run({8, 4}, static_cast<int32_t>(blocks));
  ASSERT_EQ(whole.size(), static_cast<size_t>(c->vocab_size));
  ASSERT_EQ(chunked.size(), whole.size());
  float lo = whole[0], hi = whole[0];
  for (size_t i = 0; i < whole.size(); ++i) {
    ASSERT_TRUE(std::isfinite(whole[i])) << i;
    EXPECT_NEAR(whole[i], chunked[i], 1e-3f + 1e-3f * std::fabs(whole[i])) << i;
    lo = std::min(lo, whole[i]);
    hi = std::max(hi, whole[i]);
  }
  EXPECT_GT(hi - lo, 0.1f);  // random weights give a non-degenerate distribution
}

TEST_F(LlamaMakeTestModelTest, BytesIndependentOfThreadsAndSeeded) {
  absl::StatusOr<LlamaTestConfig> c = LlamaTestPreset("tiny");
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(WriteLlamaTestModel(*c, 3, "", dir_ + "/a", 1).ok());
  ASSERT_TRUE(WriteLlamaTestModel(*c, 3, "", dir_ + "/b", 4).ok());
  ASSERT_TRUE(WriteLlamaTestModel(*c, 4, "", dir_ + "/c", 4).ok());
  const std::string a = ReadAll(dir_ + "/a/model.safetensors");
  EXPECT_EQ(a, ReadAll(dir_ + "/b/model.safetensors"));
  EXPECT_NE(a, ReadAll(dir_ + "/c/model.safetensors"));
  LlamaTestConfig bad = *c;
  bad.num_key_value_heads = 3;
  EXPECT_FALSE(WriteLlamaTestModel(bad, 3, "", dir_ + "/d").ok());
  EXPECT_FALSE(WriteLlamaTestModel(*c, 3, dir_ + "/nowhere", dir_ + "/e").ok());
}

}  // namespace
}  // namespace deepinfer::model
