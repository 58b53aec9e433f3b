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

namespace {

// Row n in BF16 bits, kp columns (a multiple of 64, zero past K), position q of each step of 64
// holding column LaneColumn(q) (lane order) or q (natural order); returns the row's check.
bool DecodeRowBits(const WeightView& w, int64_t n, int64_t kp, bool natural, uint16_t* out) {
  const int64_t K = w.cols;
  bool ok = true;
  int64_t column[internal::kLaneStep];
  for (int64_t q = 0; q < internal::kLaneStep; ++q)
    column[q] = natural ? q : LaneColumn(w.dtype, q);
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

}  // namespace

bool DecodeLaneRow(const WeightView& w, int64_t n, uint16_t* out) {
  return DecodeRowBits(w, n, internal::LanePaddedK(w.cols), /*natural=*/false, out);
}

bool DecodeAmxRow(const WeightView& w, int64_t n, uint16_t* out) {
  return DecodeRowBits(w, n, internal::LanePaddedK(w.cols), /*natural=*/true, out);
}

int64_t AmxXIndex(int64_t K, int64_t m, int64_t k) {
  const int64_t kt = PaddedK(K) / kTileK;
  return (m / kTileM * kt + k / kTileK) * kTileElems + (k % kTileK) / 2 * (2 * kTileN) +
         (m % kTileM) * 2 + k % 2;
}

void PackAmxX(const float* x, int64_t x_stride, int64_t M, int64_t K, uint16_t* out,
              uint8_t* row_exact) {
  const int64_t kt = PaddedK(K) / kTileK;
  std::fill(out, out + PaddedRows(M) * kt * kTileK, uint16_t{0});
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * x_stride;
    uint32_t inexact = 0;  // PackLaneX's test
    for (int64_t k = 0; k < K; ++k) {
      uint32_t bits;
      std::memcpy(&bits, xr + k, sizeof(bits));
      const uint32_t mag = bits & 0x7FFFFFFFu;
      inexact |= (bits & 0xFFFFu) | static_cast<uint32_t>(mag != 0 && (mag & 0x7F800000u) == 0);
    }
    if (row_exact != nullptr) row_exact[m] = inexact == 0 ? 1 : 0;
    // Pair p of K tile t goes to dword (m % 16) of row p of tile (m / 16, t).
    uint32_t* tiles = reinterpret_cast<uint32_t*>(out + m / kTileM * kt * kTileElems) + m % kTileM;
    for (int64_t k = 0; k < K; k += 2) {
      uint32_t lo, hi = 0;
      std::memcpy(&lo, xr + k, sizeof(lo));
      if (k + 1 < K) std::memcpy(&hi, xr + k + 1, sizeof(hi));
      tiles[k / kTileK * (kTileElems / 2) + (k % kTileK) / 2 * kTileN] =
          (lo >> 16) | (hi & 0xFFFF0000u);
    }
  }
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

// Order::kAmx in portable code on the packed activations: Kernel::kEmulatedAmx's version of
// internal::AmxRows (per K tile, even / odd partial sums of 16 FMAs from +0, then c += e + o).
void EmulatedAmxRows(const uint16_t* xb, int64_t M, const WeightView& w, int64_t n0, int64_t n1,
                     float* y, int64_t y_stride, uint16_t* decoded, uint8_t* row_ok) {
  const int64_t K = w.cols, kt = PaddedK(K) / kTileK;
  for (int64_t n = n0; n < n1; ++n) {
    row_ok[n - n0] = DecodeAmxRow(w, n, decoded) ? 1 : 0;
    for (int64_t m = 0; m < M; ++m) {
      float c = 0.0f;
      for (int64_t t = 0; t < kt; ++t) {
        float e = 0.0f, o = 0.0f;
        for (int64_t p = 0; p < kTileK / 2; ++p) {
          const int64_t k = t * kTileK + 2 * p;
          e = Ftz(std::fma(Daz(xb[AmxXIndex(K, m, k)]), Daz(decoded[k]), e));
          o = Ftz(std::fma(Daz(xb[AmxXIndex(K, m, k + 1)]), Daz(decoded[k + 1]), o));
        }
        c = Ftz(c + Ftz(e + o));
      }
      y[m * y_stride + n] = c;
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

// Per-thread scratch: the order's weight scratch (the lane order's decoded panel with its
// accumulators, M above the streamed path's; the AMX panel with its C tiles; an emulation's
// decoded row), then one weight row in FP32 for the fallback.
size_t ScratchBytes(Order order, int64_t M, int64_t K) {
  const int64_t kp = internal::LanePaddedK(K);
  if (order == Order::kAmx) return Align64(internal::AmxPanelBytes(K));
  return Align64(M > internal::kLaneStreamMaxM ? internal::LanePanelBytes(kp)
                                               : kp * sizeof(uint16_t));
}
size_t PerThreadBytes(Order order, int64_t M, int64_t K) {
  return ScratchBytes(order, M, K) + Align64(K * sizeof(float));
}
// The packed activations of `order`.
size_t PackedXBytes(Order order, int64_t M, int64_t K) {
  return Align64(order == Order::kAmx ? PaddedRows(M) * PaddedK(K) * sizeof(uint16_t)
                                      : M * internal::LanePaddedK(K) * sizeof(uint16_t));
}

size_t WorkspaceBytes(Order order, int64_t M, const WeightView& w, const LinearOptions& opt,
                      int num_threads) {
  const int64_t K = w.cols;
  size_t bytes = PackedXBytes(order, M, K) + Align64(M) + Align64(w.rows);
  if (opt.quantize_activations) bytes += Align64(M * K * sizeof(float));
  return bytes + static_cast<size_t>(std::max(num_threads, 1)) * PerThreadBytes(order, M, K);
}

}  // namespace

size_t LinearWorkspaceBytes(int64_t M, const WeightView& w, const LinearOptions& opt,
                            int num_threads) {
  // Enough for either order (the caller does not say which kernel runs).
  return std::max(WorkspaceBytes(Order::kAmx, M, w, opt, num_threads),
                  WorkspaceBytes(Order::kVdp, M, w, opt, num_threads));
}

void Linear(Kernel kernel, const float* x, int64_t M, const WeightView& w, float* y,
            const LinearOptions& opt, ThreadPool* pool, void* workspace, size_t workspace_bytes) {
  CHECK(Applies(w, opt)) << "the BF16-dot Linear needs BF16-exact operands";
  const int threads = pool != nullptr ? pool->num_threads() : 1;
  CHECK_GE(workspace_bytes, LinearWorkspaceBytes(M, w, opt, threads));
  CHECK(reinterpret_cast<uintptr_t>(workspace) % 64 == 0) << "workspace must be 64-byte aligned";
  if (M == 0 || w.rows == 0) return;
  const Order order = OrderOf(kernel);
  const int64_t K = w.cols, N = w.rows;
  const int64_t y_stride = opt.y_stride != 0 ? opt.y_stride : N;
  auto* next = static_cast<uint8_t*>(workspace);
  int64_t x_stride = 0;
  const float* xin = ProductInput(x, M, K, opt, &next, &x_stride);
  auto* xp = reinterpret_cast<uint16_t*>(next);
  next += PackedXBytes(order, M, K);
  uint8_t* row_exact = next;
  next += Align64(M);
  uint8_t* row_ok = next;
  next += Align64(N);
  if (order == Order::kAmx) {
    PackAmxX(xin, x_stride, M, K, xp, row_exact);
  } else {
    PackLaneX(xin, x_stride, M, K, w.dtype, xp, row_exact);
  }
  const int64_t kp = internal::LanePaddedK(K);
  uint8_t* scratch = next;
  const size_t per_thread = PerThreadBytes(order, M, K);
  // The AMX kernel's panels are 32 rows; 16 keeps the lane order's split as it was.
  const int64_t grain = order == Order::kAmx ? 32 : 16;
  cpu::ForEachThreadRange(N, grain, pool, threads, [&](int64_t n0, int64_t n1, int slot) {
    uint8_t* mine = scratch + slot * per_thread;
    auto* panel = reinterpret_cast<uint16_t*>(mine);
    auto* wrow = reinterpret_cast<float*>(mine + ScratchBytes(order, M, K));
    switch (kernel) {
      case Kernel::kAmx:
        internal::AmxRows(xp, M, w, n0, n1, y, y_stride, panel, row_ok + n0);
        break;
      case Kernel::kEmulatedAmx:
        EmulatedAmxRows(xp, M, w, n0, n1, y, y_stride, panel, row_ok + n0);
        break;
      case Kernel::kAvx512Bf16:
        internal::Avx512Bf16LaneRows(xp, M, kp, w, n0, n1, y, y_stride, panel, row_ok + n0);
        break;
      case Kernel::kEmulatedVdp:
        EmulatedLaneRows(xp, M, kp, w, n0, n1, y, y_stride, panel, row_ok + n0);
        break;
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
