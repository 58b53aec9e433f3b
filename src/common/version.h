// deepinfer's version string (from the top-level CMake project version).
#ifndef DEEPINFER_COMMON_VERSION_H_
#define DEEPINFER_COMMON_VERSION_H_

namespace deepinfer {
inline constexpr const char kVersion[] = "0.1.0";
}  // namespace deepinfer

#endif  // DEEPINFER_COMMON_VERSION_H_
