// Test helpers shared by the kvstore tests (test-only header).
#ifndef DEEPINFER_KVSTORE_TEST_UTIL_H_
#define DEEPINFER_KVSTORE_TEST_UTIL_H_

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "kv/block_record.h"

namespace deepinfer::kvstore::testing {

// A fresh directory under $TMPDIR (or /tmp), removed on destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/deepinfer-kvstore-XXXXXX";
    char* p = mkdtemp(tmpl.data());
    if (p != nullptr) path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Block `i` of a synthetic chain (parent = previous block of the same chain), tokens derived
// from (chain, i); different chains never share keys.
inline kv::BlockMeta ChainBlock(uint64_t chain, int i, const kv::BlockKey& parent,
                                kv::TrafficClass cls = kv::TrafficClass::kChat) {
  std::vector<int32_t> tokens(kv::kKeyBlockTokens);
  for (int t = 0; t < kv::kKeyBlockTokens; ++t) {
    tokens[t] = static_cast<int32_t>(chain * 1000003 + i * 131 + t);
  }
  return kv::MakeBlockMeta(parent, /*cache_salt=*/chain, /*layout_id=*/7, tokens, cls);
}

// The payload written for a key: a deterministic function of it, so a reader can check that it
// got exactly the bytes written for that key.
inline std::string PayloadFor(const kv::BlockKey& key, size_t bytes) {
  std::string p(bytes, '\0');
  uint64_t x = key.lo ^ (key.hi * 0x9E3779B97F4A7C15ull);
  for (size_t i = 0; i < bytes; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    for (size_t j = 0; j < 8 && i + j < bytes; ++j) p[i + j] = static_cast<char>(x >> (8 * j));
  }
  return p;
}

inline size_t CountFiles(const std::string& dir) {
  size_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       it != std::filesystem::recursive_directory_iterator(); ++it) {
    if (it->is_regular_file()) ++n;
  }
  return n;
}

}  // namespace deepinfer::kvstore::testing

#endif  // DEEPINFER_KVSTORE_TEST_UTIL_H_
