// The rounding mode and trace hook of a DeepSeek-V4 or V4.1 forward, and the four helpers both
// models' Impl use with them everywhere (R, R1, TraceF, TraceI). Both Impls derive from it, so
// "round like the reference" and "show this stage to the tracer" mean one thing in both.
#ifndef DEEPINFER_MODEL_DEEPSEEK_V4_FORWARD_HOOKS_H_
#define DEEPINFER_MODEL_DEEPSEEK_V4_FORWARD_HOOKS_H_

#include <cstdint>
#include <span>
#include <string>

#include "model/deepseek_v4.h"
#include "model/deepseek_v4_numerics.h"

namespace deepinfer::model::dsv4 {

// Base of a model's forward state: the BF16 mode and the tracer of the current forward.
struct ForwardHooks {
  // BF16 activations (tier A): values are rounded to BF16 wherever the reference holds BF16
  // tensors. false: the FP32-activation (tier B) mode, which rounds nothing.
  bool bf16 = true;
  // Trace hook of the current forward; only set for one-chunk forwards (see set_tracer).
  Tracer* tracer = nullptr;

  // Rounds x[0, n) to BF16 in place in BF16 mode.
  void R(float* x, int64_t n) const {
    if (!bf16) return;
    for (int64_t i = 0; i < n; ++i) x[i] = RoundBf16(x[i]);
  }
  // x rounded to BF16 in BF16 mode, else x.
  float R1(float x) const { return bf16 ? RoundBf16(x) : x; }

  // Shows stage `name` (data[0, n)) to the tracer, which may overwrite it (teacher forcing).
  void TraceF(const std::string& name, float* data, int64_t n) const {
    if (tracer != nullptr) tracer->Floats(name, std::span<float>(data, n));
  }
  // Shows integer stage `name` (data[0, n)) to the tracer, which may overwrite it.
  void TraceI(const std::string& name, int32_t* data, int64_t n) const {
    if (tracer != nullptr) tracer->Ints(name, std::span<int32_t>(data, n));
  }
};

}  // namespace deepinfer::model::dsv4

#endif  // DEEPINFER_MODEL_DEEPSEEK_V4_FORWARD_HOOKS_H_
