// The error measure of the kernel tests and the AVX-512 self-check: ‖out − ref‖₂ / ‖ref‖₂ over
// float arrays, accumulated in double (issue #3: "error measured as ‖out − ref‖/‖ref‖").
#ifndef DEEPINFER_KERNELS_RELATIVE_ERROR_H_
#define DEEPINFER_KERNELS_RELATIVE_ERROR_H_

#include <cmath>
#include <cstddef>
#include <vector>

namespace deepinfer::kernels {

// ‖out − ref‖ / ‖ref‖ (the absolute L2 error when ref is all zero; NaN if either holds a NaN).
// out and ref must have the same size.
inline double RelativeError(const std::vector<float>& out, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double d = static_cast<double>(out[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

}  // namespace deepinfer::kernels

#endif  // DEEPINFER_KERNELS_RELATIVE_ERROR_H_
