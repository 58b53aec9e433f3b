// Checked binding of checkpoint tensors, shared by the DeepSeek-V4 and V4.1 weight binders
// (deepseek_v4_weights.cc, deepseek_v41_weights.cc): dtype and shape checks with one error
// format, copies of misaligned tensors, parameter / byte counting, FP32 vectors and the formats
// both checkpoints store the same way (BF16 / F32 matrices, FP8 tiles, MXFP4 experts, mHC
// parameters; FP8 tiles are scanned once for e4m3 NaN codes, WeightMatrix::fp8_nan_free). What
// the models add on top (V4.1: its tile size and BF16 fallback) stays in their binders; both
// repack routed MXFP4 experts into the CPU kernels' lane layout with PackExpertLanes.
#ifndef DEEPINFER_MODEL_DEEPSEEK_V4_TENSOR_BINDER_H_
#define DEEPINFER_MODEL_DEEPSEEK_V4_TENSOR_BINDER_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4_numerics.h"
#include "model/deepseek_v4_weights.h"

namespace deepinfer::model::dsv4 {

// Base of a model's weight binder: reads tensors of `ckpt` and records what it binds into the
// model's weight totals (`num_parameters`, `weight_bytes`) and copy store (`owned`), all owned
// by the caller's Weights and outliving the binder.
class TensorBinder {
 public:
  TensorBinder(const Checkpoint& ckpt, std::vector<std::unique_ptr<uint8_t[]>>* owned,
               int64_t* num_parameters, int64_t* weight_bytes)
      : ckpt_(ckpt), owned_(owned), num_parameters_(num_parameters), weight_bytes_(weight_bytes) {}

  // InvalidArgument naming tensor `t` and its file, which should have been `dtypes` (a
  // "A|B" list) of `shape`.
  absl::Status ShapeError(const TensorView& t, const std::vector<int64_t>& shape,
                          const std::string& dtypes) const;

  // Tensor `name`, which must be one of `dtypes` with exactly `shape`.
  absl::StatusOr<TensorView> Typed(const std::string& name, std::initializer_list<DType> dtypes,
                                   const std::vector<int64_t>& shape) const;

  // t's bytes aligned to `align` (the mapping itself, or a copy kept in `owned` when it is not).
  const uint8_t* Aligned(const TensorView& t, int64_t align);

  // Adds `logical` parameters and t's bytes to the totals.
  void Count(const TensorView& t, int64_t logical);

  // F32 or BF16 tensor of `shape`, widened to FP32 (counted).
  absl::StatusOr<std::vector<float>> Vector(const std::string& name,
                                            const std::vector<int64_t>& shape);

  // BF16 (or F32) matrix [rows, cols] viewed in place (counted).
  absl::StatusOr<WeightMatrix> Plain(const std::string& name, int64_t rows, int64_t cols);

  // MXFP4 matrix: `prefix.weight` I8/U8 [rows, cols/2] packed e2m1 + `prefix.scale` E8M0
  // [rows, cols/32], viewed in place (counted).
  absl::StatusOr<WeightMatrix> Mxfp4(const std::string& prefix, int64_t rows, int64_t cols);

  // FP8 matrix: `prefix.weight` F8_E4M3 [rows, cols] + `prefix.scale` E8M0 or F32
  // [ceil(rows/tile), ceil(cols/tile)], one scale per tile x tile block, viewed in place
  // (counted). V4's tiles are 128; V4.1's come from its config.
  absl::StatusOr<WeightMatrix> Fp8Tiles(const std::string& prefix, int64_t rows, int64_t cols,
                                        int64_t tile);

  // Whether routed MXFP4 experts are repacked at load: `wanted` (the model runs the SIMD
  // kernels, not only the FP64 path), DEEPINFER_REPACK_WEIGHTS not 0, and kernels that use the
  // lane layout (kernels::UsesMxfp4Lanes).
  static bool RepackExperts(bool wanted);

  // MXFP4 matrix `m` copied into the kernels' lane layout (kernels::PackMxfp4Lanes, the
  // checkpoint's bytes left as they are): m's lane_codes / lane_scales point into the copy,
  // which `packs` keeps and `bytes` counts. Leaves `m` alone where the pack refuses its scales.
  static void PackExpertLanes(WeightMatrix* m,
                              std::vector<std::unique_ptr<kernels::Mxfp4LanePack>>* packs,
                              int64_t* bytes);

  // mHC parameters `prefix`hc_`kind`_{fn [mix, width], base [mix], scale [scales]}.
  absl::StatusOr<HcWeights> Hc(const std::string& prefix, const std::string& kind, int64_t mix,
                               int64_t width, int64_t scales);

 protected:
  const Checkpoint& ckpt_;

 private:
  std::vector<std::unique_ptr<uint8_t[]>>* owned_;
  int64_t* num_parameters_;
  int64_t* weight_bytes_;
};

}  // namespace deepinfer::model::dsv4

#endif  // DEEPINFER_MODEL_DEEPSEEK_V4_TENSOR_BINDER_H_
