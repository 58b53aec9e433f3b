// The BF16-dot Linear (bf16_dot.h): packing, the portable emulations of both orders (the AMX
// tile order and the lane order), the ISA-independent loop nests, the FP32 fallback, the
// self-check and the choice of kernel. Compiled for the baseline ISA; the hardware kernels live
// in bf16_dot_amx.cc / bf16_dot_avx512bf16.cc.
#include "kernels/cpu/bf16_dot.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/check.h"
#include "common/config.h"
#include "common/cpu_features.h"
#include "common/logging.h"
#include "kernels/cpu/bf16_dot_kernels.h"
#include "kernels/cpu/linear_driver.h"
#include "kernels/cpu/reference.h"
#include "kernels/formats.h"
#include "kernels/relative_error.h"
#include "kernels/workspace.h"

namespace deepinfer::kernels::bf16dot {
namespace {

constexpr float kFltMin = std::numeric_limits<float>::min();

// DAZ: a BF16 input with a zero exponent field (zero or denormal) is a zero of its sign.
inline float Daz(uint16_t h) {
  if ((h & 0x7F80) == 0) return (h & 0x8000) != 0 ? -0.0f : 0.0f;
  return Bf16ToFloat(h);
}
// FTZ: a result below FLT_MIN in magnitude (after rounding) becomes a zero of its sign.
inline float Ftz(float v) { return std::fabs(v) < kFltMin ? std::copysign(0.0f, v) : v; }

// Order::kAmx: per K tile, even / odd partial sums of 16 FMAs from +0, then c += (e + o).
void EmulatedAmxProduct(const uint16_t* a, int64_t a_stride, int mt, const uint16_t* b,
                        int64_t b_stride, int nt, int64_t kt, float* c, int64_t ldc) {
  for (int i = 0; i < mt; ++i) {
    for (int j = 0; j < nt; ++j) {
      for (int r = 0; r < kTileM; ++r) {
        float acc[kTileN] = {};
        for (int64_t t = 0; t < kt; ++t) {
          const uint16_t* ar = a + i * a_stride + t * kTileElems + r * kTileK;
          const uint16_t* bt = b + j * b_stride + t * kTileElems;
          float e[kTileN] = {}, o[kTileN] = {};
          for (int p = 0; p < kTileK / 2; ++p) {
            const float a0 = Daz(ar[2 * p]), a1 = Daz(ar[2 * p + 1]);
            const uint16_t* bp = bt + p * 2 * kTileN;
            for (int n = 0; n < kTileN; ++n) {
              e[n] = Ftz(std::fma(a0, Daz(bp[2 * n]), e[n]));
              o[n] = Ftz(std::fma(a1, Daz(bp[2 * n + 1]), o[n]));
            }
          }
          for (int n = 0; n < kTileN; ++n) acc[n] = Ftz(acc[n] + Ftz(e[n] + o[n]));
        }
        std::copy(acc, acc + kTileN, c + (i * kTileM + r) * ldc + j * kTileN);
      }
    }
  }
}

constexpr size_t Align64(size_t bytes) { return (bytes + 63) / 64 * 64; }

// Weight rows per panel: two B tile columns (the AMX kernel's 2 x 2 C tiles).
constexpr int64_t kPanelRows = 2 * kTileN;

// Per-thread scratch: the B panel, its C block and the panel's weight rows decoded to FP32.
size_t PerThreadBytes(int64_t K) {
  return Align64(kPanelRows * PaddedK(K) * sizeof(uint16_t)) +
         Align64(2 * kTileM * kPanelRows * sizeof(float)) + Align64(kPanelRows * K * sizeof(float));
}

}  // namespace

Order OrderOf(Kernel kernel) {
  return kernel == Kernel::kEmulatedAmx || kernel == Kernel::kAmx ? Order::kAmx : Order::kVdp;
}

const char* KernelName(Kernel kernel) {
  switch (kernel) {
    case Kernel::kEmulatedAmx:
      return "amx (emulated)";
    case Kernel::kEmulatedVdp:
      return "avx512bf16 (emulated)";
    case Kernel::kAmx:
      return "amx";
    case Kernel::kAvx512Bf16:
      return "avx512bf16";
  }
  return "?";
}

bool AmxAvailable() {
  static const bool available = [] {
    const CpuFeatures& f = DetectedCpuFeatures();
    return f.amx_tile && f.amx_bf16 && internal::AmxRequestPermission();
  }();
  return available;
}

bool Avx512Bf16Available() {
  const CpuFeatures& f = DetectedCpuFeatures();
  return f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512_bf16 && f.avx512_vbmi;
}

bool KernelRuns(Kernel kernel) {
  switch (kernel) {
    case Kernel::kAmx:
      return AmxAvailable();
    case Kernel::kAvx512Bf16:
      return Avx512Bf16Available();
    default:
      return true;
  }
}

void TileProduct(Kernel kernel, const uint16_t* a, int64_t a_stride, int mt, const uint16_t* b,
                 int64_t b_stride, int nt, int64_t kt, float* c, int64_t ldc) {
  CHECK(mt == 1 || mt == 2) << mt;
  CHECK(nt == 1 || nt == 2) << nt;
  CHECK(OrderOf(kernel) == Order::kAmx) << KernelName(kernel) << " has no tile product";
  if (kernel == Kernel::kEmulatedAmx) {
    return EmulatedAmxProduct(a, a_stride, mt, b, b_stride, nt, kt, c, ldc);
  }
  // Callers outside Linear (tests) get a configured thread for this one product.
  internal::AmxBeginThread();
  internal::AmxTileProduct(a, a_stride, mt, b, b_stride, nt, kt, c, ldc);
  internal::AmxEndThread();
}

int64_t PaddedRows(int64_t M) { return (M + kTileM - 1) / kTileM * kTileM; }
int64_t PaddedK(int64_t K) { return std::max<int64_t>((K + kTileK - 1) / kTileK, 1) * kTileK; }

void PackA(const float* x, int64_t x_stride, int64_t M, int64_t K, uint16_t* a,
           uint8_t* row_exact) {
  const int64_t kp = PaddedK(K), kt = kp / kTileK;
  if (row_exact != nullptr) {
    for (int64_t m = 0; m < M; ++m) {
      bool exact = true;
      for (int64_t k = 0; k < K && exact; ++k) {
        const float v = x[m * x_stride + k];
        exact = Bf16ToFloat(FloatToBf16(v)) == v && (v == 0.0f || std::fabs(v) >= kFltMin);
      }
      row_exact[m] = exact ? 1 : 0;
    }
  }
  for (int64_t m0 = 0; m0 < PaddedRows(M); m0 += kTileM) {
    for (int64_t t = 0; t < kt; ++t) {
      uint16_t* tile = a + m0 * kp + t * kTileElems;
      for (int r = 0; r < kTileM; ++r) {
        const int64_t m = m0 + r;
        for (int kk = 0; kk < kTileK; ++kk) {
          const int64_t k = t * kTileK + kk;
          tile[r * kTileK + kk] = m < M && k < K ? FloatToBf16(x[m * x_stride + k]) : 0;
        }
      }
    }
  }
}

bool PackB(const float* w, int64_t count, int64_t K, uint16_t* b) {
  CHECK(count >= 0 && count <= kTileN);
  const int64_t kt = PaddedK(K) / kTileK;
  bool exact = true;
  std::fill(b, b + kt * kTileElems, uint16_t{0});
  for (int64_t j = 0; j < count; ++j) {
    for (int64_t k = 0; k < K; ++k) {
      const float v = w[j * K + k];
      const uint16_t h = FloatToBf16(v);
      // Exact and not flushed by DAZ (NaN compares unequal: it takes the fallback too).
      exact = exact && Bf16ToFloat(h) == v && (v == 0.0f || std::fabs(v) >= kFltMin);
      const int64_t t = k / kTileK, p = (k % kTileK) / 2, h2 = k % 2;
      b[t * kTileElems + p * 2 * kTileN + 2 * j + h2] = h;
    }
  }
  return exact;
}

namespace {

// Whether internal::Avx512DecodeRowBf16 runs here (AVX-512 F/BW/VL/DQ; every CPU with AMX or
// AVX512_BF16 has them).
bool FastDecodeRuns() {
  static const bool runs = [] {
    const CpuFeatures& f = DetectedCpuFeatures();
    return f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
  }();
  return runs;
}

// One B tile column (weight rows [n0, n0 + count), count <= 16) by the AVX-512 decode: rows
// decoded row-major into `staging` ([16][PaddedK(K)] BF16, K >= 32), then moved to the VNNI
// layout a 32-bit pair at a time. Returns false, with b unspecified, when a value is not
// BF16-exact (the caller then packs the tile the scalar way, which also gives its FP32 rows).
bool PackBFast(const WeightView& w, int64_t n0, int64_t count, int64_t K, uint16_t* staging,
               uint16_t* b) {
  const int64_t kp = PaddedK(K), kt = kp / kTileK;
  for (int64_t r = 0; r < kTileN; ++r) {
    uint16_t* row = staging + r * kp;
    if (r >= count) {
      std::fill(row, row + kp, uint16_t{0});
      continue;
    }
    if (!internal::Avx512DecodeRowBf16(w, n0 + r, row)) return false;
    std::fill(row + K, row + kp, uint16_t{0});
  }
  // b dword [t][p][j] = pair p of K tile t of row j (PackB's layout).
  const int64_t pairs = kp / 2;
  uint32_t* bd = reinterpret_cast<uint32_t*>(b);
  const uint32_t* sd = reinterpret_cast<const uint32_t*>(staging);
  for (int64_t t = 0; t < kt; ++t) {
    for (int p = 0; p < kTileK / 2; ++p) {
      uint32_t* dst = bd + (t * (kTileK / 2) + p) * kTileN;
      const uint32_t* src = sd + t * (kTileK / 2) + p;
      for (int j = 0; j < kTileN; ++j) dst[j] = src[j * pairs];
    }
  }
  return true;
}

}  // namespace

bool Applies(const WeightView& w, const LinearOptions& opt) {
  if (!opt.quantize_activations && !opt.input_is_bf16) return false;
  switch (w.dtype) {
    case WeightDType::kBF16:
    case WeightDType::kMXFP4:
      return true;
    case WeightDType::kFP8Block:
      return w.scale_dtype == ScaleDType::kE8M0;
    default:
      return false;
  }
}

int64_t LaneColumn(WeightDType dtype, int64_t q) {
  const int64_t h = q / 32, word = q % 32;
  switch (dtype) {
    case WeightDType::kFP8Block:
      // VPUNPCK{L,H}BW interleave within 128-bit lanes: zmm h, word 8i + r (i = 128-bit lane,
      // r < 8) holds byte 16i + 8h + r.
      return 16 * (word / 8) + 8 * h + word % 8;
    case WeightDType::kMXFP4:
      // Word w of zmm h: byte w % 16 of block w / 16, its low (h = 0) or high (h = 1) nibble.
      return 32 * (word / 16) + 2 * (word % 16) + h;
    default:
      return q;
  }
}

void PackLaneX(const float* x, int64_t x_stride, int64_t M, int64_t K, WeightDType dtype,
               uint16_t* out, uint8_t* row_exact) {
  const int64_t kp = internal::LanePaddedK(K);
  int64_t column[internal::kLaneStep];
  for (int64_t q = 0; q < internal::kLaneStep; ++q) column[q] = LaneColumn(dtype, q);
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * x_stride;
    // Integer tests the compiler vectorises (a decode step's activations are packed in a few
    // microseconds, which a small expert's matrix-vector product would otherwise pay per call):
    // BF16-exact = low half zero; not flushed by DAZ = a nonzero exponent, or zero.
    uint32_t inexact = 0;
    for (int64_t k = 0; k < K; ++k) {
      uint32_t bits;
      std::memcpy(&bits, xr + k, sizeof(bits));
      const uint32_t mag = bits & 0x7FFFFFFFu;
      inexact |= (bits & 0xFFFFu) | static_cast<uint32_t>(mag != 0 && (mag & 0x7F800000u) == 0);
    }
    if (row_exact != nullptr) row_exact[m] = inexact == 0 ? 1 : 0;
    // An exact value's BF16 is its high half; an inexact row's values are not used (its outputs
    // come from the FP32 fallback).
    uint16_t* o = out + m * kp;
    for (int64_t k0 = 0; k0 < kp; k0 += internal::kLaneStep) {
      for (int64_t q = 0; q < internal::kLaneStep; ++q) {
        const int64_t k = k0 + column[q];
        uint32_t bits = 0;
        if (k < K) std::memcpy(&bits, xr + k, sizeof(bits));
        o[k0 + q] = static_cast<uint16_t>(bits >> 16);
      }
    }
  }
}

bool DecodeLaneRow(const WeightView& w, int64_t n, uint16_t* out) {
  const int64_t K = w.cols, kp = internal::LanePaddedK(K);
  bool ok = true;
  int64_t column[internal::kLaneStep];
  for (int64_t q = 0; q < internal::kLaneStep; ++q) column[q] = LaneColumn(w.dtype, q);
  for (int64_t k0 = 0; k0 < kp; k0 += internal::kLaneStep) {
    for (int64_t q = 0; q < internal::kLaneStep; ++q) {
      const int64_t k = k0 + column[q];
      uint16_t bits = 0;
      if (k < K) {
        switch (w.dtype) {
          case WeightDType::kFP8Block: {
            const uint8_t s = static_cast<const uint8_t*>(
                w.scales)[(n / 128 + w.scale_row_offset) * ((K + 127) / 128) + k / 128];
            ok = ok && internal::LaneFp8ScaleOk(s);
            bits = internal::LaneFp8Bf16(static_cast<const uint8_t*>(w.data)[n * K + k], s);
            break;
          }
          case WeightDType::kMXFP4: {
            const uint8_t s = static_cast<const uint8_t*>(w.scales)[n * (K / 32) + k / 32];
            ok = ok && internal::LaneFp4ScaleOk(s);
            const uint8_t byte = static_cast<const uint8_t*>(w.data)[n * (K / 2) + k / 2];
            bits = internal::LaneFp4Bf16(k % 2 == 0 ? byte & 0xF : byte >> 4, s);
            break;
          }
          default:
            bits = static_cast<const uint16_t*>(w.data)[n * K + k];
            ok = ok && !((bits & 0x7F80) == 0 && (bits & 0x7F) != 0);
            break;
        }
      }
      out[k0 + q] = bits;
    }
  }
  return ok;
}

namespace {

// Order::kVdp in portable code: Kernel::kEmulatedVdp's version of internal::Avx512Bf16LaneRows.
void EmulatedLaneRows(const uint16_t* xp, int64_t M, int64_t kp, const WeightView& w, int64_t n0,
                      int64_t n1, float* y, int64_t y_stride, uint16_t* decoded, uint8_t* row_ok) {
  for (int64_t n = n0; n < n1; ++n) {
    row_ok[n - n0] = DecodeLaneRow(w, n, decoded) ? 1 : 0;
    for (int64_t m = 0; m < M; ++m) {
      const uint16_t* xr = xp + m * kp;
      float acc[16] = {};
      for (int64_t v = 0; v < kp; v += 32) {  // one VDPBF16PS per 32 columns
        for (int l = 0; l < 16; ++l) {
          const int64_t q = v + 2 * l;
          acc[l] = Ftz(std::fma(Daz(xr[q + 1]), Daz(decoded[q + 1]), acc[l]));
          acc[l] = Ftz(std::fma(Daz(xr[q]), Daz(decoded[q]), acc[l]));
        }
      }
      float s8[8], s4[4];
      for (int l = 0; l < 8; ++l) s8[l] = acc[l] + acc[l + 8];
      for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
      const float s2[2] = {s4[0] + s4[2], s4[1] + s4[3]};
      y[m * y_stride + n] = s2[0] + s2[1];
    }
  }
}

// The activations the products take, [M, K] with row stride *x_stride: x itself, or with
// quantize_activations a copy at *next (M x K floats; *next moves past it) quantised as every
// other Linear does (all ActQuantFp8Sim versions are bitwise the reference's).
const float* ProductInput(const float* x, int64_t M, int64_t K, const LinearOptions& opt,
                          uint8_t** next, int64_t* x_stride) {
  *x_stride = opt.x_stride != 0 ? opt.x_stride : K;
  if (!opt.quantize_activations) return x;
  auto* xq = reinterpret_cast<float*>(*next);
  for (int64_t m = 0; m < M; ++m) {
    std::copy(x + m * *x_stride, x + m * *x_stride + K, xq + m * K);
  }
  ActQuantFp8Sim(xq, M, K, 128);
  *x_stride = K;
  *next += Align64(M * K * sizeof(float));
  return xq;
}

// Per-thread scratch of the lane order: the decoded panel with its accumulators (M above the
// streamed path's) or the emulation's decoded row, then one weight row in FP32 for the fallback.
size_t LaneScratchBytes(int64_t M, int64_t K) {
  const int64_t kp = internal::LanePaddedK(K);
  return Align64(M > internal::kLaneStreamMaxM ? internal::LanePanelBytes(kp)
                                               : kp * sizeof(uint16_t));
}
size_t LanePerThreadBytes(int64_t M, int64_t K) {
  return LaneScratchBytes(M, K) + Align64(K * sizeof(float));
}

size_t LaneWorkspaceBytes(int64_t M, const WeightView& w, const LinearOptions& opt,
                          int num_threads) {
  const int64_t K = w.cols;
  size_t bytes =
      Align64(M * internal::LanePaddedK(K) * sizeof(uint16_t)) + Align64(M) + Align64(w.rows);
  if (opt.quantize_activations) bytes += Align64(M * K * sizeof(float));
  return bytes + static_cast<size_t>(std::max(num_threads, 1)) * LanePerThreadBytes(M, K);
}

// Linear in the lane order (Kernel::kEmulatedVdp, Kernel::kAvx512Bf16).
void LaneLinear(Kernel kernel, const float* x, int64_t M, const WeightView& w, float* y,
                const LinearOptions& opt, ThreadPool* pool, void* workspace, int threads) {
  const int64_t K = w.cols, N = w.rows, kp = internal::LanePaddedK(K);
  const int64_t y_stride = opt.y_stride != 0 ? opt.y_stride : N;
  auto* next = static_cast<uint8_t*>(workspace);
  int64_t x_stride = 0;
  const float* xin = ProductInput(x, M, K, opt, &next, &x_stride);
  auto* xp = reinterpret_cast<uint16_t*>(next);
  next += Align64(M * kp * sizeof(uint16_t));
  uint8_t* row_exact = next;
  next += Align64(M);
  uint8_t* row_ok = next;
  next += Align64(N);
  PackLaneX(xin, x_stride, M, K, w.dtype, xp, row_exact);
  uint8_t* scratch = next;
  const size_t per_thread = LanePerThreadBytes(M, K);
  cpu::ForEachThreadRange(N, 16, pool, threads, [&](int64_t n0, int64_t n1, int slot) {
    uint8_t* mine = scratch + slot * per_thread;
    auto* panel = reinterpret_cast<uint16_t*>(mine);
    auto* wrow = reinterpret_cast<float*>(mine + LaneScratchBytes(M, K));
    if (kernel == Kernel::kAvx512Bf16) {
      internal::Avx512Bf16LaneRows(xp, M, kp, w, n0, n1, y, y_stride, panel, row_ok + n0);
    } else {
      EmulatedLaneRows(xp, M, kp, w, n0, n1, y, y_stride, panel, row_ok + n0);
    }
    // Weight rows or activation rows that are not BF16-exact normals: FP32 FMAs in increasing
    // k. Then the bias.
    for (int64_t n = n0; n < n1; ++n) {
      bool decoded = false;
      for (int64_t m = 0; m < M; ++m) {
        float& out = y[m * y_stride + n];
        if (row_ok[n] == 0 || row_exact[m] == 0) {
          if (!decoded) ref::DecodeWeightRow(w, n, wrow);
          decoded = true;
          const float* xr = xin + m * x_stride;
          float acc = 0.0f;
          for (int64_t k = 0; k < K; ++k) acc = std::fma(xr[k], wrow[k], acc);
          out = acc;
        }
        if (opt.bias != nullptr) out += opt.bias[n];
      }
    }
  });
}

}  // namespace

size_t LinearWorkspaceBytes(int64_t M, const WeightView& w, const LinearOptions& opt,
                            int num_threads) {
  const int64_t K = w.cols;
  size_t bytes = Align64(PaddedRows(M) * PaddedK(K) * sizeof(uint16_t)) + Align64(M);
  if (opt.quantize_activations) bytes += Align64(M * K * sizeof(float));
  bytes += static_cast<size_t>(std::max(num_threads, 1)) * PerThreadBytes(K);
  // Enough for either order (the caller does not say which kernel runs).
  return std::max(bytes, LaneWorkspaceBytes(M, w, opt, num_threads));
}

void Linear(Kernel kernel, const float* x, int64_t M, const WeightView& w, float* y,
            const LinearOptions& opt, ThreadPool* pool, void* workspace, size_t workspace_bytes) {
  CHECK(Applies(w, opt)) << "the BF16-dot Linear needs BF16-exact operands";
  const int threads = pool != nullptr ? pool->num_threads() : 1;
  CHECK_GE(workspace_bytes, LinearWorkspaceBytes(M, w, opt, threads));
  CHECK(reinterpret_cast<uintptr_t>(workspace) % 64 == 0) << "workspace must be 64-byte aligned";
  if (M == 0 || w.rows == 0) return;
  if (OrderOf(kernel) == Order::kVdp) {
    return LaneLinear(kernel, x, M, w, y, opt, pool, workspace, threads);
  }
  const int64_t K = w.cols, N = w.rows, kp = PaddedK(K), kt = kp / kTileK;
  const int64_t m_tiles = PaddedRows(M) / kTileM;
  const int64_t y_stride = opt.y_stride != 0 ? opt.y_stride : N;
  auto* next = static_cast<uint8_t*>(workspace);
  int64_t x_stride = 0;
  const float* xin = ProductInput(x, M, K, opt, &next, &x_stride);
  auto* a = reinterpret_cast<uint16_t*>(next);
  next += Align64(PaddedRows(M) * kp * sizeof(uint16_t));
  // Quantised rows are BF16-exact by construction; promised ones are checked.
  uint8_t* row_exact = opt.quantize_activations ? nullptr : next;
  next += Align64(M);
  PackA(xin, x_stride, M, K, a, row_exact);
  auto exact_row = [&](int64_t m) { return row_exact == nullptr || row_exact[m] != 0; };
  uint8_t* scratch = next;
  const size_t per_thread = PerThreadBytes(K);
  const bool fast_decode =
      FastDecodeRuns() && K >= kTileK &&
      (row_exact == nullptr || std::all_of(row_exact, row_exact + M, [](uint8_t e) { return e; }));
  const int64_t tile_stride = kTileM * kp;  // BF16 between consecutive A (or B) tile rows

  cpu::ForEachThreadRange(N, kPanelRows, pool, threads, [&](int64_t n0, int64_t n1, int slot) {
    uint8_t* mine = scratch + slot * per_thread;
    auto* panel = reinterpret_cast<uint16_t*>(mine);
    mine += Align64(kPanelRows * kp * sizeof(uint16_t));
    auto* cbuf = reinterpret_cast<float*>(mine);
    mine += Align64(2 * kTileM * kPanelRows * sizeof(float));
    auto* wrows = reinterpret_cast<float*>(mine);
    if (kernel == Kernel::kAmx) internal::AmxBeginThread();
    for (int64_t nb = n0; nb < n1; nb += kPanelRows) {
      const int64_t nc = std::min(kPanelRows, n1 - nb);
      const int nt = static_cast<int>((nc + kTileN - 1) / kTileN);
      bool exact[2] = {true, true};
      for (int j = 0; j < nt; ++j) {
        const int64_t count = std::min<int64_t>(kTileN, nc - j * kTileN);
        float* rows = wrows + j * kTileN * K;
        // The AVX-512 decode when every x row takes the tiles (the FP32 rows are then needed
        // only by a tile that is not exact, which is decoded again the scalar way).
        if (fast_decode && PackBFast(w, nb + j * kTileN, count, K,
                                     reinterpret_cast<uint16_t*>(rows), panel + j * tile_stride)) {
          continue;
        }
        for (int64_t r = 0; r < count; ++r)
          ref::DecodeWeightRow(w, nb + j * kTileN + r, rows + r * K);
        exact[j] = PackB(rows, count, K, panel + j * tile_stride);
      }
      for (int64_t mi = 0; mi < m_tiles; mi += 2) {
        const int mt = static_cast<int>(std::min<int64_t>(2, m_tiles - mi));
        const uint16_t* at = a + mi * tile_stride;
        if (kernel == Kernel::kAmx) {
          internal::AmxTileProduct(at, tile_stride, mt, panel, tile_stride, nt, kt, cbuf,
                                   kPanelRows);
        } else {
          EmulatedAmxProduct(at, tile_stride, mt, panel, tile_stride, nt, kt, cbuf, kPanelRows);
        }
        for (int64_t r = 0; r < mt * kTileM && mi * kTileM + r < M; ++r) {
          if (!exact_row(mi * kTileM + r)) continue;
          float* yr = y + (mi * kTileM + r) * y_stride + nb;
          for (int64_t n = 0; n < nc; ++n) {
            if (!exact[n / kTileN]) continue;
            const float v = cbuf[r * kPanelRows + n];
            yr[n] = opt.bias != nullptr ? v + opt.bias[nb + n] : v;
          }
        }
      }
      // Tiles whose weights, or rows whose activations, are not BF16-exact normals: FP32 FMAs
      // in increasing k.
      for (int j = 0; j < nt; ++j) {
        const int64_t count = std::min<int64_t>(kTileN, nc - j * kTileN);
        for (int64_t r = 0; r < count; ++r) {
          const float* wr = wrows + (j * kTileN + r) * K;
          const int64_t n = nb + j * kTileN + r;
          for (int64_t m = 0; m < M; ++m) {
            if (exact[j] && exact_row(m)) continue;
            const float* xr = xin + m * x_stride;
            float acc = 0.0f;
            for (int64_t k = 0; k < K; ++k) acc = std::fma(xr[k], wr[k], acc);
            y[m * y_stride + n] = opt.bias != nullptr ? acc + opt.bias[n] : acc;
          }
        }
      }
    }
    if (kernel == Kernel::kAmx) internal::AmxEndThread();
  });
}

namespace {

// One weight format: M = 37 (three M tiles, a 2 + 1 tile pairing) against the reference, and
// each row alone bitwise against the batch.
bool CheckFormat(Kernel kernel, WeightDType dtype, int64_t N, int64_t K, std::mt19937& rng,
                 std::string* failure) {
  const int64_t M = 37;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255), exponent(118, 127);
  std::vector<uint8_t> data(WeightDataBytes(dtype, N, K));
  std::vector<uint8_t> scales(WeightScaleCount(dtype, N, K));
  for (uint8_t& d : data) d = static_cast<uint8_t>(byte(rng));
  if (dtype == WeightDType::kBF16) {
    for (int64_t i = 0; i < N * K; ++i) {
      const uint16_t h = FloatToBf16(normal(rng));
      std::memcpy(data.data() + 2 * i, &h, 2);
    }
  }
  for (uint8_t& s : scales) s = static_cast<uint8_t>(exponent(rng));
  const WeightView w{dtype, data.data(), scales.data(), ScaleDType::kE8M0, N, K};
  std::vector<float> x(M * K), bias(N);
  for (float& v : x) v = normal(rng);
  for (float& v : bias) v = normal(rng);
  LinearOptions opt;
  opt.bias = bias.data();
  opt.quantize_activations = true;
  Workspace ws;
  std::vector<float> ref_y(M * N), batch(M * N), row(N);
  size_t bytes = ref::LinearWorkspaceBytes(M, w, opt);
  ref::Linear(x.data(), M, w, ref_y.data(), opt, ws.Get(bytes), bytes);
  bytes = LinearWorkspaceBytes(M, w, opt, 1);
  Linear(kernel, x.data(), M, w, batch.data(), opt, nullptr, ws.Get(bytes), bytes);
  const std::string what =
      std::string(KernelName(kernel)) + ", weight dtype " + std::to_string(static_cast<int>(dtype));
  if (!(RelativeError(batch, ref_y) <= 1e-5)) {
    *failure = "Linear differs from the reference (" + what + ")";
    return false;
  }
  bytes = LinearWorkspaceBytes(1, w, opt, 1);
  for (int64_t m = 0; m < M; ++m) {
    Linear(kernel, x.data() + m * K, 1, w, row.data(), opt, nullptr, ws.Get(bytes), bytes);
    if (std::memcmp(row.data(), batch.data() + m * N, N * sizeof(float)) != 0) {
      *failure = "a row alone differs from the same row in a batch (" + what + ")";
      return false;
    }
  }
  return true;
}

}  // namespace

bool SelfCheck(Kernel kernel, std::string* failure) {
  if (!KernelRuns(kernel)) {
    *failure = std::string(KernelName(kernel)) + " does not run on this CPU";
    return false;
  }
  std::mt19937 rng(20261202);
  return CheckFormat(kernel, WeightDType::kBF16, 40, 200, rng, failure) &&
         CheckFormat(kernel, WeightDType::kFP8Block, 150, 300, rng, failure) &&
         CheckFormat(kernel, WeightDType::kMXFP4, 50, 320, rng, failure);
}

const Kernel* ActiveKernel() {
  static const Kernel* const active = []() -> const Kernel* {
    static Kernel chosen;
    switch (Env().bf16_dot_emulation) {
      case Bf16DotEmulation::kAmx:
        chosen = Kernel::kEmulatedAmx;
        return &chosen;
      case Bf16DotEmulation::kVdp:
        chosen = Kernel::kEmulatedVdp;
        return &chosen;
      case Bf16DotEmulation::kNone:
        break;
    }
    const IsaLevel isa = ActiveIsa();
    for (const auto& [level, kernel] : {std::pair{IsaLevel::kAmx, Kernel::kAmx},
                                        std::pair{IsaLevel::kAvx512Bf16, Kernel::kAvx512Bf16}}) {
      if (static_cast<int>(isa) < static_cast<int>(level)) continue;
      std::string failure;
      if (SelfCheck(kernel, &failure)) {
        chosen = kernel;
        return &chosen;
      }
      LOG(ERROR) << "BF16-dot kernel " << KernelName(kernel) << " failed its self-check ("
                 << failure << "); trying the next level down";
    }
    return nullptr;
  }();
  return active;
}

}  // namespace deepinfer::kernels::bf16dot
