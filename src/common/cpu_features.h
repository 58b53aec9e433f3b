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
  // AMX tiles with BF16 dot products: CPUID AMX-TILE and AMX-BF16, and XCR0 enabling the tile
  // config and tile data state. (Linux also wants a per-process permission request before
  // the first tile instruction: kernels/cpu/bf16_dot.h AmxAvailable.)
  bool amx_tile = false;
  bool amx_bf16 = false;
  // AMD (and Hygon) cores multiply FP32 subnormal inputs at full speed; Intel cores take a
  // microcode assist for each such FMA (about 100x slower), so kernels that would feed
  // subnormals to FMAs (the AVX2 FP8 bit-placement decoder) are used on AMD only.
  bool fast_subnormal_fma = false;
};

// Features reported by this CPU (detected once; thread-safe).
const CpuFeatures& DetectedCpuFeatures();

// The ISA level kernels should use: the best the CPU supports, capped by DEEPINFER_FORCE_ISA
// (auto caps at kAvx512Bf16: AMX tiles are opt-in until measured on hardware, issue #30; their
// decode-time products, which read the weights through VNNI tiles, would be slower there).
// kAvx2 requires AVX2 and FMA; kAvx512 F, BW, VL and DQ; kAvx512Bf16 also AVX512_BF16 and VBMI;
// kAmx also AMX-TILE and AMX-BF16 (the OS permission is checked where tiles are used).
IsaLevel ActiveIsa();

// "avx2 fma f16c avx512f ..." for logs and `deepinfer version`.
std::string CpuFeaturesString();
const char* IsaName(IsaLevel isa);

}  // namespace deepinfer

#endif  // DEEPINFER_COMMON_CPU_FEATURES_H_
