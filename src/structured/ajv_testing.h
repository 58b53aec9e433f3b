// Test-only harness: validates JSON documents against JSON schemas with ajv (the npm package, an
// implementation independent of ours) under node. Used by the conformance tests of the JSON
// schema and DSML tool-call grammars. Needs DEEPINFER_SOURCE_DIR (set by deepinfer_test()).
#ifndef DEEPINFER_STRUCTURED_AJV_TESTING_H_
#define DEEPINFER_STRUCTURED_AJV_TESTING_H_

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace deepinfer::structured::testing {

// True when node and the ajv / ajv-formats packages of the checkout are available.
inline bool HaveNodeAndAjv() {
  const std::filesystem::path source = DEEPINFER_SOURCE_DIR;
  return std::system("node --version > /dev/null 2>&1") == 0 &&
         std::filesystem::exists(source / "node_modules/ajv") &&
         std::filesystem::exists(source / "node_modules/ajv-formats");
}

// Runs src/structured/testdata/validate_with_ajv.mjs on {"schemas": schemas, "docs": docs};
// returns its output, one "ok" / "bad ..." line per document (empty if node could not run).
inline std::vector<std::string> ValidateWithAjv(const nlohmann::json& schemas,
                                                const nlohmann::json& docs) {
  const std::filesystem::path source = DEEPINFER_SOURCE_DIR;
  const std::filesystem::path tmp = std::filesystem::temp_directory_path() /
                                    ("deepinfer_ajv_" + std::to_string(getpid()) + ".json");
  std::ofstream(tmp) << nlohmann::json{{"schemas", schemas}, {"docs", docs}}.dump();
  const std::string cmd = "DEEPINFER_NODE_MODULES='" + (source / "node_modules").string() +
                          "' node '" +
                          (source / "src/structured/testdata/validate_with_ajv.mjs").string() +
                          "' '" + tmp.string() + "'";
  std::vector<std::string> lines;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return lines;
  char buf[65536];
  while (fgets(buf, sizeof(buf), f)) {
    std::string line(buf);
    if (!line.empty() && line.back() == '\n') line.pop_back();
    lines.push_back(line);
  }
  pclose(f);
  std::filesystem::remove(tmp);
  return lines;
}

}  // namespace deepinfer::structured::testing

#endif  // DEEPINFER_STRUCTURED_AJV_TESTING_H_
