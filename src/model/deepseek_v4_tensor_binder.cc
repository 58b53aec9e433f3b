#include "model/deepseek_v4_tensor_binder.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/status.h"
#include "common/thread_pool.h"
#include "kernels/ops.h"

namespace deepinfer::model::dsv4 {

absl::Status TensorBinder::ShapeError(const TensorView& t, const std::vector<int64_t>& shape,
                                      const std::string& dtypes) const {
  std::string want = "[";
  for (size_t i = 0; i < shape.size(); ++i) absl::StrAppend(&want, i ? ", " : "", shape[i]);
  want += "]";
  return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name, " in ", t.file, ": expected ",
                                                 dtypes, want, ", got ", t.DebugString()));
}

absl::StatusOr<TensorView> TensorBinder::Typed(const std::string& name,
                                               std::initializer_list<DType> dtypes,
                                               const std::vector<int64_t>& shape) const {
  ASSIGN_OR_RETURN(TensorView t, ckpt_.Get(name));
  bool ok = false;
  std::string names;
  for (DType d : dtypes) {
    ok |= t.dtype == d;
    absl::StrAppend(&names, names.empty() ? "" : "|", std::string(DTypeName(d)));
  }
  if (!ok || t.shape != shape) return ShapeError(t, shape, names);
  return t;
}

const uint8_t* TensorBinder::Aligned(const TensorView& t, int64_t align) {
  if (t.IsAligned(align)) return t.data;
  // new[] memory is aligned for every fundamental type, so the copy suits any `align` asked.
  auto buf = std::make_unique<uint8_t[]>(t.byte_size);
  std::memcpy(buf.get(), t.data, t.byte_size);
  const uint8_t* p = buf.get();
  owned_->push_back(std::move(buf));
  return p;
}

void TensorBinder::Count(const TensorView& t, int64_t logical) {
  *num_parameters_ += logical;
  *weight_bytes_ += t.byte_size;
}

absl::StatusOr<std::vector<float>> TensorBinder::Vector(const std::string& name,
                                                        const std::vector<int64_t>& shape) {
  ASSIGN_OR_RETURN(TensorView t, Typed(name, {DType::kF32, DType::kBF16}, shape));
  Count(t, t.NumElements());
  std::vector<float> out(t.NumElements());
  if (t.dtype == DType::kF32) {
    std::memcpy(out.data(), t.data, t.byte_size);
  } else {
    for (int64_t i = 0; i < t.NumElements(); ++i) {
      uint16_t b;
      std::memcpy(&b, t.data + 2 * i, 2);
      out[i] = Bf16ToF32(b);
    }
  }
  return out;
}

absl::StatusOr<WeightMatrix> TensorBinder::Plain(const std::string& name, int64_t rows,
                                                 int64_t cols) {
  ASSIGN_OR_RETURN(TensorView t, Typed(name, {DType::kBF16, DType::kF32}, {rows, cols}));
  Count(t, rows * cols);
  WeightMatrix m;
  m.format = t.dtype == DType::kBF16 ? WeightFormat::kBf16 : WeightFormat::kF32;
  m.rows = rows;
  m.cols = cols;
  m.data = Aligned(t, t.dtype == DType::kBF16 ? 2 : 4);
  return m;
}

absl::StatusOr<WeightMatrix> TensorBinder::Fp8Tiles(const std::string& prefix, int64_t rows,
                                                    int64_t cols, int64_t tile) {
  ASSIGN_OR_RETURN(TensorView t, Typed(prefix + ".weight", {DType::kF8E4M3}, {rows, cols}));
  const int64_t sr = (rows + tile - 1) / tile, sc = (cols + tile - 1) / tile;
  ASSIGN_OR_RETURN(TensorView s, Typed(prefix + ".scale", {DType::kF8E8M0, DType::kF32}, {sr, sc}));
  Count(t, rows * cols);
  *weight_bytes_ += s.byte_size;
  WeightMatrix m;
  m.format = WeightFormat::kFp8Block;
  m.rows = rows;
  m.cols = cols;
  m.data = t.data;
  m.scale_cols = sc;
  m.fp8_nan_free = !kernels::Fp8HasNanCodes(static_cast<const uint8_t*>(t.data), rows * cols);
  if (s.dtype == DType::kF32) {
    m.scale_f32 = reinterpret_cast<const float*>(Aligned(s, 4));
  } else {
    m.scale = s.data;
  }
  return m;
}

absl::StatusOr<WeightMatrix> TensorBinder::Mxfp4(const std::string& prefix, int64_t rows,
                                                 int64_t cols) {
  ASSIGN_OR_RETURN(TensorView t,
                   Typed(prefix + ".weight", {DType::kI8, DType::kU8}, {rows, cols / 2}));
  ASSIGN_OR_RETURN(TensorView s, Typed(prefix + ".scale", {DType::kF8E8M0}, {rows, cols / 32}));
  Count(t, rows * cols);
  *weight_bytes_ += s.byte_size;
  WeightMatrix m;
  m.format = WeightFormat::kMxFp4;
  m.rows = rows;
  m.cols = cols;
  m.data = t.data;
  m.scale = s.data;
  m.scale_cols = cols / 32;
  return m;
}

absl::StatusOr<HcWeights> TensorBinder::Hc(const std::string& prefix, const std::string& kind,
                                           int64_t mix, int64_t width, int64_t scales) {
  HcWeights h;
  ASSIGN_OR_RETURN(h.fn, Vector(prefix + "hc_" + kind + "_fn", {mix, width}));
  ASSIGN_OR_RETURN(h.base, Vector(prefix + "hc_" + kind + "_base", {mix}));
  ASSIGN_OR_RETURN(h.scale, Vector(prefix + "hc_" + kind + "_scale", {scales}));
  return h;
}

bool TensorBinder::RepackExperts(bool wanted) {
  return wanted && Env().repack_weights && kernels::UsesMxfp4Lanes();
}

void TensorBinder::PackExpertLanes(WeightMatrix* m,
                                   std::vector<std::unique_ptr<kernels::Mxfp4LanePack>>* packs,
                                   int64_t* bytes) {
  const kernels::WeightView view{kernels::WeightDType::kMXFP4, m->data, m->scale,
                                 kernels::ScaleDType::kE8M0,   m->rows, m->cols};
  auto pack = std::make_unique<kernels::Mxfp4LanePack>();
  if (!kernels::PackMxfp4Lanes(view, pack.get(), ThreadPool::Default())) return;
  m->lane_codes = pack->codes.data();
  m->lane_scales = pack->scales.data();
  *bytes += static_cast<int64_t>(pack->codes.size() + pack->scales.size());
  packs->push_back(std::move(pack));
}

}  // namespace deepinfer::model::dsv4
