#include "sim/workload.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace deepinfer::sim {

namespace {

void FillTokens(uint64_t seed, int64_t block, std::array<int32_t, kv::kKeyBlockTokens>& t) {
  const uint64_t base = cluster::Mix64(seed ^ cluster::Mix64(static_cast<uint64_t>(block)));
  for (int j = 0; j < kv::kKeyBlockTokens; ++j) {
    t[j] = static_cast<int32_t>(cluster::Mix64(base + j) % 129280);  // DeepSeek-V4 vocabulary
  }
}

}  // namespace

std::span<const kv::BlockKey> StreamKeys(TokenStream& s, int64_t num_blocks) {
  std::array<int32_t, kv::kKeyBlockTokens> tokens;
  while (static_cast<int64_t>(s.keys.size()) < num_blocks) {
    const int64_t i = static_cast<int64_t>(s.keys.size());
    const bool in_template = (i + 1) * kv::kKeyBlockTokens <= s.template_tokens;
    FillTokens(in_template ? s.template_seed : s.seed, i, tokens);
    const kv::BlockKey parent = i == 0 ? kv::kRootBlockKey : s.keys.back();
    s.keys.push_back(kv::ComputeBlockKey(parent, 0, kSimLayoutId, tokens));
  }
  return std::span<const kv::BlockKey>(s.keys.data(), static_cast<size_t>(num_blocks));
}

std::vector<kv::BlockKey> MooncakeKeys(std::span<const int64_t> hash_ids, int64_t input_length) {
  const int64_t n = std::min<int64_t>(input_length / kv::kKeyBlockTokens,
                                      4 * static_cast<int64_t>(hash_ids.size()));
  std::vector<kv::BlockKey> keys;
  keys.reserve(n);
  std::array<int32_t, kv::kKeyBlockTokens> tokens;
  for (int64_t i = 0; i < n; ++i) {
    FillTokens(0x4D4F4F4E43414B45ull ^ static_cast<uint64_t>(hash_ids[i / 4]), i % 4, tokens);
    keys.push_back(
        kv::ComputeBlockKey(i == 0 ? kv::kRootBlockKey : keys.back(), 0, kSimLayoutId, tokens));
  }
  return keys;
}

ZipfTable::ZipfTable(int n, double s) {
  cdf_.resize(std::max(1, n));
  double sum = 0;
  for (int i = 0; i < static_cast<int>(cdf_.size()); ++i) {
    sum += 1.0 / std::pow(i + 1.0, s);
    cdf_[i] = sum;
  }
  for (double& c : cdf_) c /= sum;
}

int ZipfTable::Sample(cluster::Rng& rng) const {
  const double u = rng.Uniform();
  return static_cast<int>(std::upper_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin()) %
         static_cast<int>(cdf_.size());
}

absl::StatusOr<std::vector<TraceRequest>> ReadMooncakeTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("trace file not found: ", path));
  std::vector<TraceRequest> out;
  std::string line;
  int64_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    auto bad = [&](const char* field) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", lineno, ": field '", field, "' missing or of the wrong type"));
    };
    if (j.is_discarded() || !j.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", lineno, ": not a JSON object"));
    }
    TraceRequest r;
    if (!j.contains("timestamp") || !j["timestamp"].is_number()) return bad("timestamp");
    if (!j.contains("input_length") || !j["input_length"].is_number_integer()) {
      return bad("input_length");
    }
    if (!j.contains("output_length") || !j["output_length"].is_number_integer()) {
      return bad("output_length");
    }
    if (!j.contains("hash_ids") || !j["hash_ids"].is_array()) return bad("hash_ids");
    r.arrival_ns = static_cast<int64_t>(std::llround(j["timestamp"].get<double>() * 1e6));
    r.input_length = j["input_length"].get<int64_t>();
    r.output_length = j["output_length"].get<int64_t>();
    if (r.input_length < 0) return bad("input_length");
    if (r.output_length < 0) return bad("output_length");
    for (const auto& h : j["hash_ids"]) {
      if (!h.is_number_integer()) return bad("hash_ids");
      r.hash_ids.push_back(h.get<int64_t>());
    }
    if (j.contains("class")) {
      if (!j["class"].is_string()) return bad("class");
      const std::string c = j["class"].get<std::string>();
      if (c == "agent") r.cls = 1;
      else if (c == "chat") r.cls = 0;
      else return bad("class");
    }
    if (!out.empty() && r.arrival_ns < out.back().arrival_ns) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", lineno, ": field 'timestamp' decreases"));
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace deepinfer::sim
