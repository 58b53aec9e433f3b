#include "common/cpu_features.h"

#include <cpuid.h>

#include <vector>

#include "absl/strings/str_join.h"

namespace deepinfer {
namespace {

CpuFeatures Detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  // Vendor string: EBX, EDX, ECX = "Auth" "enti" "cAMD" / "Hygo" "nGen" "uine".
  f.fast_subnormal_fma = (b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163) ||
                         (b == 0x6f677948 && d == 0x6e65476e && c == 0x656e6975);
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1;
  f.fma = (c >> 12) & 1;
  f.f16c = (c >> 29) & 1;
  bool ymm_ok = false, zmm_ok = false, tile_ok = false;
  if (osxsave) {
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    ymm_ok = (lo & 0x6) == 0x6;
    zmm_ok = (lo & 0xE6) == 0xE6;
    tile_ok = (lo & 0x60000) == 0x60000;  // XTILECFG (bit 17) and XTILEDATA (bit 18)
  }
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = ymm_ok && ((b >> 5) & 1);
    f.avx512f = zmm_ok && ((b >> 16) & 1);
    f.avx512dq = zmm_ok && ((b >> 17) & 1);
    f.avx512bw = zmm_ok && ((b >> 30) & 1);
    f.avx512vl = zmm_ok && ((b >> 31) & 1);
    f.avx512_vbmi = zmm_ok && ((c >> 1) & 1);
    f.avx512_vnni = zmm_ok && ((c >> 11) & 1);
    f.amx_bf16 = tile_ok && ((d >> 22) & 1);
    f.amx_tile = tile_ok && ((d >> 24) & 1);
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) {
    f.avx512_bf16 = zmm_ok && ((a >> 5) & 1);
  }
  if (!ymm_ok) f.fma = f.f16c = false;
  return f;
}

}  // namespace

const CpuFeatures& DetectedCpuFeatures() {
  static const CpuFeatures features = Detect();
  return features;
}

IsaLevel ActiveIsa() {
  const CpuFeatures& f = DetectedCpuFeatures();
  IsaLevel best = IsaLevel::kScalar;
  if (f.avx2 && f.fma) best = IsaLevel::kAvx2;
  if (best == IsaLevel::kAvx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq) {
    best = IsaLevel::kAvx512;
  }
  if (best == IsaLevel::kAvx512 && f.avx512_bf16 && f.avx512_vbmi) best = IsaLevel::kAvx512Bf16;
  if (best == IsaLevel::kAvx512Bf16 && f.amx_tile && f.amx_bf16) best = IsaLevel::kAmx;
  IsaLevel cap = Env().force_isa;
  if (cap == IsaLevel::kAuto) cap = IsaLevel::kAvx512Bf16;
  return static_cast<int>(cap) < static_cast<int>(best) ? cap : best;
}

const char* IsaName(IsaLevel isa) {
  switch (isa) {
    case IsaLevel::kAuto:
      return "auto";
    case IsaLevel::kScalar:
      return "scalar";
    case IsaLevel::kAvx2:
      return "avx2";
    case IsaLevel::kAvx512:
      return "avx512";
    case IsaLevel::kAvx512Bf16:
      return "avx512bf16";
    case IsaLevel::kAmx:
      return "amx";
  }
  return "?";
}

std::string CpuFeaturesString() {
  const CpuFeatures& f = DetectedCpuFeatures();
  std::vector<std::string> names;
  if (f.avx2) names.push_back("avx2");
  if (f.fma) names.push_back("fma");
  if (f.f16c) names.push_back("f16c");
  if (f.avx512f) names.push_back("avx512f");
  if (f.avx512bw) names.push_back("avx512bw");
  if (f.avx512vl) names.push_back("avx512vl");
  if (f.avx512dq) names.push_back("avx512dq");
  if (f.avx512_bf16) names.push_back("avx512_bf16");
  if (f.avx512_vnni) names.push_back("avx512_vnni");
  if (f.avx512_vbmi) names.push_back("avx512_vbmi");
  if (f.amx_tile) names.push_back("amx_tile");
  if (f.amx_bf16) names.push_back("amx_bf16");
  return names.empty() ? "none" : absl::StrJoin(names, " ");
}

}  // namespace deepinfer
