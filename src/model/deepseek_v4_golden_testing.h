// Test helper for the DeepSeek-V4 and V4.1 golden tests (deepseek_v4_golden_test.cc,
// deepseek_v41_test.cc; not used by the engine): reading the shared goldens' JSON, the README
// "How to compare" logit statistics, which both models' goldens are judged by, and the lookups
// of the teacher-forcing tracers into a reference trace; and the lane-layout check of repacked
// MXFP4 experts.
#ifndef DEEPINFER_MODEL_DEEPSEEK_V4_GOLDEN_TESTING_H_
#define DEEPINFER_MODEL_DEEPSEEK_V4_GOLDEN_TESTING_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "common/check.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4_numerics.h"
#include "model/deepseek_v4_reference.h"
#include "nlohmann/json.hpp"

namespace deepinfer::model::dsv4 {

// The whole text of the file at `path` ("" when it cannot be read).
inline std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The JSON document at `path`.
inline nlohmann::json ReadJson(const std::string& path) {
  return nlohmann::json::parse(ReadText(path));
}

// A JSON array of integers as int32 values.
inline std::vector<int32_t> Ints(const nlohmann::json& j) {
  std::vector<int32_t> v;
  for (const auto& e : j) v.push_back(e.get<int32_t>());
  return v;
}

// A JSON array of numbers, or of rows of numbers, flattened row-major into floats.
inline std::vector<float> Flat(const nlohmann::json& j) {
  std::vector<float> v;
  for (const auto& row : j) {
    if (row.is_array()) {
      for (const auto& e : row) v.push_back(e.get<float>());
    } else {
      v.push_back(row.get<float>());
    }
  }
  return v;
}

// README "How to compare" statistics over rows of `vocab` logits.
struct LogitStats {
  double mean_abs = 0, p50_max = 0, p90_max = 0, argmax_agree = 0;
  int64_t rows = 0;
};

// The golden JSON stores floats rounded to 6 significant digits, i.e. with an error of up to
// 0.5e-5 x 10^floor(log10|v|) (5e-6 for |logit| in [1, 10)). That is above tier B's median
// max-abs threshold (3.79e-6, measured by the README's authors on unrounded values), so the
// per-position max-abs statistics deduct each value's own rounding bound before taking the max;
// the mean abs difference and argmax agreement use the raw values.
inline double JsonRounding(float v) {
  const double a = std::fabs(static_cast<double>(v));
  if (a == 0) return 0;
  return 0.5 * std::pow(10.0, std::floor(std::log10(a)) - 5);
}

// Statistics of `got` against the golden `want` (same size, rows of `vocab` logits): mean abs
// difference, median and 90th percentile (numpy linear interpolation) of the per-row max abs
// difference beyond the JSON rounding, and the fraction of rows with the same argmax.
inline LogitStats CompareLogits(const std::vector<float>& got, const std::vector<float>& want,
                                int64_t vocab) {
  CHECK_EQ(got.size(), want.size());
  LogitStats s;
  s.rows = static_cast<int64_t>(got.size()) / vocab;
  std::vector<double> maxes;
  double sum = 0;
  int64_t agree = 0;
  for (int64_t r = 0; r < s.rows; ++r) {
    double mx = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      const double d = std::fabs(static_cast<double>(got[r * vocab + i]) - want[r * vocab + i]);
      sum += d;
      mx = std::max(mx, std::max(0.0, d - JsonRounding(want[r * vocab + i])));
    }
    maxes.push_back(mx);
    agree += ArgMax(std::span<const float>(got).subspan(r * vocab, vocab)) ==
             ArgMax(std::span<const float>(want).subspan(r * vocab, vocab));
  }
  s.mean_abs = sum / got.size();
  std::sort(maxes.begin(), maxes.end());
  auto pct = [&](double q) {
    const double pos = q * (maxes.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(maxes.size() - 1, lo + 1);
    return maxes[lo] + (maxes[hi] - maxes[lo]) * (pos - lo);
  };
  s.p50_max = pct(0.5);
  s.p90_max = pct(0.9);
  s.argmax_agree = static_cast<double>(agree) / s.rows;
  return s;
}

// Stage `name` of a reference trace for a traced array of `n` values, or null after recording
// why in `missing`: `name` when the trace has no such tensor, `name` + " (shape)" when it holds
// another number of values (or, with `f32`, is not F32).
inline const TensorView* FindTraceStage(const SafetensorsFile& trace, const std::string& name,
                                        size_t n, bool f32, std::set<std::string>* missing) {
  auto it = trace.tensors().find(name);
  if (it == trace.tensors().end()) {
    missing->insert(name);
    return nullptr;
  }
  const TensorView& t = it->second;
  if ((f32 && t.dtype != DType::kF32) || t.NumElements() != static_cast<int64_t>(n)) {
    missing->insert(name + " (shape)");
    return nullptr;
  }
  return &t;
}

// Value i of an F32 tensor.
inline float F32At(const TensorView& t, size_t i) {
  float v;
  std::memcpy(&v, t.data + 4 * i, 4);
  return v;
}

// One BF16 ulp (2^-7 of the binade) of the larger magnitude of a and b: the traces' tolerance
// unit.
inline double Bf16UlpOfLarger(float a, float b) {
  const float mag = std::max(std::fabs(a), std::fabs(b));
  int e;
  std::frexp(mag, &e);
  return std::ldexp(1.0, e - 8);
}

// Relative L2 errors, over 3 x rows of a fixed signal, of Linear on `m` (lane layout where it
// has one) and on `m` in its checkpoint layout against the FP64 product of the checkpoint layout
// (`quantize`: activation quantisation as the model applies it). Both should be ~1e-7.
struct LaneLayoutErrors {
  double lanes = 0, plain = 0;
};
inline LaneLayoutErrors CompareLaneLayout(const WeightMatrix& m, bool quantize) {
  WeightMatrix plain = m;
  plain.lane_codes = nullptr;
  plain.lane_scales = nullptr;
  const int64_t M = 3;
  std::vector<float> x(M * m.cols);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  std::vector<float> y(M * m.rows), y_plain(M * m.rows), y_oracle(M * m.rows);
  Linear(m, x.data(), M, y.data(), quantize);
  Linear(plain, x.data(), M, y_plain.data(), quantize);
  Linear(plain, x.data(), M, y_oracle.data(), quantize, /*precise=*/true);
  double err = 0, err_plain = 0, norm = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    err += (y[i] - y_oracle[i]) * (y[i] - y_oracle[i]);
    err_plain += (y[i] - y_plain[i]) * (y[i] - y_plain[i]);
    norm += y_oracle[i] * y_oracle[i];
  }
  CHECK_GT(norm, 0);
  return {std::sqrt(err / norm), std::sqrt(err_plain / norm)};
}

}  // namespace deepinfer::model::dsv4

#endif  // DEEPINFER_MODEL_DEEPSEEK_V4_GOLDEN_TESTING_H_
