// Installs the tokenizer-based DeepSeek-V4.1 Engram token map source at startup of the deepinfer
// binary (model/deepseek_v41_engram.h: the model layer cannot include the tokenizer; tools may
// link any layer, ARCHITECTURE.md §2). A checkpoint without engram_tables.json then derives its
// map from DIR/tokenizer.json as the official code does (tokenizer/engram_token_map.h).
#include <memory>
#include <string>

#include "model/deepseek_v41_engram.h"
#include "tokenizer/engram_token_map.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::cli {
namespace {

absl::StatusOr<model::dsv41::EngramTokenMap> FromTokenizerDir(const std::string& dir) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromDirectory(dir);
  if (!tok.ok()) return tok.status();
  absl::StatusOr<tokenizer::CompressedTokenMap> m = tokenizer::BuildEngramTokenMap(**tok);
  if (!m.ok()) return m.status();
  return model::dsv41::EngramTokenMap{std::move(m->map), m->num_keys};
}

const bool kInstalled = [] {
  model::dsv41::SetEngramTokenMapSource(FromTokenizerDir);
  return true;
}();

}  // namespace
}  // namespace deepinfer::cli
