#include "model/checkpoint.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deepinfer::model {
namespace {

namespace fs = std::filesystem;
using ::deepinfer::testing::IsOk;
using ::deepinfer::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Builds a safetensors image by hand: 8-byte little-endian header length, header, data.
std::string Image(const std::string& header, const std::string& data) {
  std::string out;
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out + header + data;
}

std::string Floats(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), v.begin(), s.size());
  return s;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/deepinfer_ckpt_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = (fs::path(dir_) / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  std::string dir_;
};

// A valid two-tensor file: "a" F32 [2, 3] = 0..5, "b" BF16 [2] = {1.0, -2.0}.
std::string ValidImage() {
  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                             R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[24,28]}})";
  // bf16 1.0 = 0x3F80, -2.0 = 0xC000 (little-endian bytes).
  std::string data = Floats({0, 1, 2, 3, 4, 5}) + std::string("\x80\x3f\x00\xc0", 4);
  return Image(header, data);
}

TEST_F(CheckpointTest, ReadsValidFile) {
  const std::string path = Write("model.safetensors", ValidImage());
  ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpoint::Open(dir_));
  EXPECT_EQ(ckpt->num_tensors(), 2);
  EXPECT_EQ(ckpt->tensor_bytes(), 28);
  EXPECT_THAT(ckpt->TensorNames(), ElementsAre("a", "b"));
  EXPECT_EQ(ckpt->metadata().at("format"), "pt");
  ASSERT_OK_AND_ASSIGN(TensorView a, ckpt->GetTyped("a", DType::kF32, {2, 3}));
  EXPECT_EQ(a.NumElements(), 6);
  EXPECT_EQ(a.file, path);
  std::vector<float> values;
  if (a.IsAligned(4)) {
    auto span = a.As<float>();
    values.assign(span.begin(), span.end());
  } else {
    values.resize(6);
    std::memcpy(values.data(), a.data, 24);
  }
  EXPECT_THAT(values, ElementsAre(0, 1, 2, 3, 4, 5));
  ASSERT_OK_AND_ASSIGN(TensorView b, ckpt->Get("b"));
  EXPECT_EQ(b.dtype, DType::kBF16);
  EXPECT_THAT(b.shape, ElementsAre(2));
  EXPECT_EQ(b.data[0], 0x80);
  EXPECT_EQ(b.data[3], 0xc0);
  // Opening the file directly works too.
  ASSERT_OK_AND_ASSIGN(auto direct, Checkpoint::Open(path));
  EXPECT_EQ(direct->num_tensors(), 2);
}

TEST_F(CheckpointTest, LookupErrorsNameTheTensor) {
  Write("model.safetensors", ValidImage());
  ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpoint::Open(dir_));
  EXPECT_THAT(ckpt->Get("nope"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("'nope'")));
  EXPECT_THAT(ckpt->GetTyped("a", DType::kF32, {3, 2}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'a'"), HasSubstr("F32[2, 3]"), HasSubstr("F32[3, 2]"))));
  EXPECT_THAT(ckpt->GetTyped("b", DType::kF32, {2}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("BF16")));
}

TEST_F(CheckpointTest, DTypesOfTheSpec) {
  // shared/spec/deepseek-v4.md §2.2 plus F16.
  struct Case {
    const char* name;
    DType dtype;
    int64_t size;
  };
  for (const Case& c :
       {Case{"F32", DType::kF32, 4}, Case{"BF16", DType::kBF16, 2}, Case{"F16", DType::kF16, 2},
        Case{"F8_E4M3", DType::kF8E4M3, 1}, Case{"F8_E8M0", DType::kF8E8M0, 1},
        Case{"I8", DType::kI8, 1}, Case{"I64", DType::kI64, 8}, Case{"U8", DType::kU8, 1},
        Case{"I32", DType::kI32, 4}, Case{"BOOL", DType::kBool, 1}}) {
    ASSERT_OK_AND_ASSIGN(DType d, ParseDType(c.name));
    EXPECT_EQ(d, c.dtype) << c.name;
    EXPECT_EQ(DTypeName(d), c.name);
    EXPECT_EQ(DTypeSize(d), c.size) << c.name;
  }
  // Every dtype round-trips through a file: 3 elements each, packed back to back.
  std::string header = "{";
  std::string data;
  int64_t off = 0;
  const char* names[] = {"F32", "BF16", "F16", "F8_E4M3", "F8_E8M0", "I8", "I64"};
  for (const char* n : names) {
    const int64_t bytes = 3 * DTypeSize(*ParseDType(n));
    header += std::string(off ? "," : "") + "\"t_" + n + "\":{\"dtype\":\"" + n +
              "\",\"shape\":[3],\"data_offsets\":[" + std::to_string(off) + "," +
              std::to_string(off + bytes) + "]}";
    data += std::string(bytes, '\x01');
    off += bytes;
  }
  header += "}";
  Write("model.safetensors", Image(header, data));
  ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpoint::Open(dir_));
  for (const char* n : names) {
    ASSERT_OK_AND_ASSIGN(TensorView t, ckpt->Get(std::string("t_") + n));
    EXPECT_EQ(t.byte_size, 3 * DTypeSize(t.dtype));
  }
}

TEST_F(CheckpointTest, EmptyTensorsDoNotOverlap) {
  Write("model.safetensors", Image(R"({"e":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]},)"
                                   R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                                   Floats({7})));
  ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpoint::Open(dir_));
  ASSERT_OK_AND_ASSIGN(TensorView e, ckpt->Get("e"));
  EXPECT_EQ(e.NumElements(), 0);
}

// ---- corruption: each malformed file gives its specific code and names the file/tensor.

struct Corruption {
  const char* what;
  std::string bytes;
  absl::StatusCode code;
  const char* message_part;  // must appear in the message (besides the file name)
};

TEST_F(CheckpointTest, CorruptFilesGiveSpecificErrors) {
  const std::string valid = ValidImage();
  std::string huge_len(8, '\xff');  // header length 2^64-1
  std::string len_past_end = Image(std::string(10, ' '), "");
  len_past_end[0] = 100;  // claims a 100-byte header, file has 10
  const std::vector<Corruption> cases = {
      {"empty file", "", absl::StatusCode::kDataLoss, "truncated"},
      {"shorter than the length field", "\x05\x00\x00", absl::StatusCode::kDataLoss, "truncated"},
      {"truncated data", valid.substr(0, valid.size() - 3), absl::StatusCode::kDataLoss, "'b'"},
      {"header length overflow", huge_len + "{}", absl::StatusCode::kDataLoss, "overflows"},
      {"header length past end", len_past_end, absl::StatusCode::kDataLoss, "overflows"},
      {"header not JSON", Image("{not json", ""), absl::StatusCode::kDataLoss, "JSON"},
      {"header not an object", Image("[1,2]", ""), absl::StatusCode::kDataLoss, "JSON object"},
      {"offsets outside file",
       Image(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", Floats({1, 2})),
       absl::StatusCode::kDataLoss, "outside the file"},
      {"begin after end",
       Image(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", Floats({1, 2})),
       absl::StatusCode::kDataLoss, "'w'"},
      {"overlapping tensors",
       Image(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
             R"("y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
             Floats({1, 2, 3})),
       absl::StatusCode::kDataLoss, "overlap"},
      {"unknown dtype",
       Image(R"({"w":{"dtype":"F12","shape":[1],"data_offsets":[0,4]}})", Floats({1})),
       absl::StatusCode::kInvalidArgument, "unknown dtype 'F12'"},
      {"shape/byte-count mismatch",
       Image(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", Floats({1, 2})),
       absl::StatusCode::kDataLoss, "needs 12 bytes"},
      {"shape overflow",
       Image(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
             Floats({1})),
       absl::StatusCode::kDataLoss, "'w'"},
      {"negative dim",
       Image(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", Floats({1})),
       absl::StatusCode::kDataLoss, "non-negative"},
      {"missing data_offsets", Image(R"({"w":{"dtype":"F32","shape":[1]}})", Floats({1})),
       absl::StatusCode::kDataLoss, "data_offsets"},
      {"metadata not strings", Image(R"({"__metadata__":{"a":1}})", ""),
       absl::StatusCode::kDataLoss, "__metadata__"},
  };
  for (const Corruption& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string path = Write("bad.safetensors", c.bytes);
    auto file = SafetensorsFile::Open(path);
    EXPECT_THAT(file, StatusIs(c.code, AllOf(HasSubstr(path), HasSubstr(c.message_part))));
    // The same bytes in memory give the same answer.
    auto mem = SafetensorsFile::FromBytes(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(c.bytes.data()), c.bytes.size()),
        "mem");
    EXPECT_THAT(mem, StatusIs(c.code, HasSubstr(c.message_part)));
  }
}

TEST_F(CheckpointTest, MissingFilesAreNotFound) {
  EXPECT_THAT(Checkpoint::Open(dir_), StatusIs(absl::StatusCode::kNotFound, HasSubstr(dir_)));
  EXPECT_THAT(Checkpoint::Open(dir_ + "/nothing"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(CheckpointTest, ShardedCheckpoint) {
  Write("model-00001-of-00002.safetensors",
        Image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", Floats({1, 2})));
  Write("model-00002-of-00002.safetensors",
        Image(R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", Floats({3})));
  Write("model.safetensors.index.json",
        R"({"metadata":{"total_size":12},"weight_map":{)"
        R"("a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}})");
  std::vector<std::pair<int64_t, int64_t>> progress;
  CheckpointOptions opt;
  opt.progress = [&](int64_t done, int64_t total) { progress.emplace_back(done, total); };
  ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpoint::Open(dir_, opt));
  EXPECT_THAT(ckpt->TensorNames(), ElementsAre("a", "b"));
  EXPECT_EQ(ckpt->files().size(), 2u);
  ASSERT_OK_AND_ASSIGN(TensorView b, ckpt->Get("b"));
  EXPECT_THAT(b.file, HasSubstr("model-00002-of-00002.safetensors"));
  float v;
  std::memcpy(&v, b.data, 4);
  EXPECT_EQ(v, 3.0f);
  // One progress call per shard, ending at the total file size.
  ASSERT_EQ(progress.size(), 2u);
  EXPECT_EQ(progress.back().first, ckpt->file_bytes());
  EXPECT_EQ(progress.back().second, ckpt->file_bytes());
  EXPECT_LT(progress.front().first, progress.back().first);
}

TEST_F(CheckpointTest, MissingShardIsNotFound) {
  Write("model-00001-of-00002.safetensors",
        Image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", Floats({1, 2})));
  Write("model.safetensors.index.json", R"({"weight_map":{"a":"model-00001-of-00002.safetensors",)"
                                        R"("b":"model-00002-of-00002.safetensors"}})");
  EXPECT_THAT(Checkpoint::Open(dir_), StatusIs(absl::StatusCode::kNotFound,
                                               AllOf(HasSubstr("model-00002-of-00002.safetensors"),
                                                     HasSubstr("does not exist"))));
}

TEST_F(CheckpointTest, IndexErrors) {
  Write("s1.safetensors",
        Image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", Floats({1, 2})));
  // Tensor mapped to a shard that lacks it.
  Write("model.safetensors.index.json",
        R"({"weight_map":{"a":"s1.safetensors","zz":"s1.safetensors"}})");
  EXPECT_THAT(Checkpoint::Open(dir_), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("'zz'")));
  // Paths that leave the directory.
  Write("model.safetensors.index.json", R"({"weight_map":{"a":"../s1.safetensors"}})");
  EXPECT_THAT(Checkpoint::Open(dir_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("../s1.safetensors")));
  // Not JSON / no weight_map.
  Write("model.safetensors.index.json", R"({"metadata":{}})");
  EXPECT_THAT(Checkpoint::Open(dir_),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("weight_map")));
  Write("model.safetensors.index.json", "{oops");
  EXPECT_THAT(Checkpoint::Open(dir_), StatusIs(absl::StatusCode::kDataLoss));
}

TEST_F(CheckpointTest, CorruptShardNamesTheShard) {
  Write("s1.safetensors",
        Image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,99]}})", Floats({1, 2})));
  Write("model.safetensors.index.json", R"({"weight_map":{"a":"s1.safetensors"}})");
  EXPECT_THAT(
      Checkpoint::Open(dir_),
      StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr("s1.safetensors"), HasSubstr("'a'"))));
}

// ---- the real checkpoint in ../shared.

TEST(CheckpointSharedTest, OpensStories260K) {
  const std::string dir = std::string(DEEPINFER_SHARED_DIR) + "/models/stories260K";
  if (!fs::exists(dir + "/model.safetensors")) GTEST_SKIP() << dir << " is absent";
  ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpoint::Open(dir));
  // shared/models/README.md: 47 F32 tensors, __metadata__ {"format":"pt"}, no lm_head.
  EXPECT_EQ(ckpt->num_tensors(), 47);
  EXPECT_EQ(ckpt->metadata().at("format"), "pt");
  EXPECT_FALSE(ckpt->Has("lm_head.weight"));
  EXPECT_THAT(ckpt->GetTyped("model.embed_tokens.weight", DType::kF32, {512, 64}), IsOk());
  EXPECT_THAT(ckpt->GetTyped("model.layers.4.self_attn.k_proj.weight", DType::kF32, {32, 64}),
              IsOk());
  for (const std::string& name : ckpt->TensorNames()) {
    EXPECT_EQ(ckpt->Get(name)->dtype, DType::kF32) << name;
  }
}

}  // namespace
}  // namespace deepinfer::model
