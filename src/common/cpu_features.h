// Run-time CPU feature detection (CPUID) for kernel dispatch. The build baseline is x86-64-v3;
// AVX-512 paths are compiled with per-function target attributes and selected only when the
// CPU reports them and DEEPINFER_FORCE_ISA does not cap them.
#ifndef DEEPINFER_COMMON_CPU_FEATURES_H_
#define DEEPINFER_COMMON_CPU_FEATURES_H_

#include <string>

#include "common/config.h"

namespace deepinfer {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512_bf16 = false;
  bool avx512_vnni = false;
  bool avx512_vbmi = false;
  // AMD (and Hygon) cores multiply FP32 subnormal inputs at full speed; Intel cores take a
  // microcode assist for each such FMA (about 100x slower), so kernels that would feed
  // subnormals to FMAs (the AVX2 FP8 bit-placement decoder) are used on AMD only.
  bool fast_subnormal_fma = false;
};

// Features reported by this CPU (detected once; thread-safe).
const CpuFeatures& DetectedCpuFeatures();

// The ISA level kernels should use: the best the CPU supports, capped by DEEPINFER_FORCE_ISA.
// kAvx512 requires F, BW, VL and DQ; kAvx2 requires AVX2 and FMA.
IsaLevel ActiveIsa();

// "avx2 fma f16c avx512f ..." for logs and `deepinfer version`.
std::string CpuFeaturesString();
const char* IsaName(IsaLevel isa);

}  // namespace deepinfer

#endif  // DEEPINFER_COMMON_CPU_FEATURES_H_
