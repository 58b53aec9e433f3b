// Exact BF16 dot-product GEMM for linears whose two operands are both BF16-exact (issue #30,
// KERNELS.md "Exactness comes cheap with BF16 dot products"): FP8 / MXFP4 / BF16 weights times
// e4m3-quantised activations (LinearOptions::quantize_activations) or activations the caller
// promises are BF16 already (LinearOptions::input_is_bf16). Every e4m3 activation, e4m3
// or e2m1 weight times its E8M0 scale, and BF16 weight is a BF16 number, and the product of two
// BF16 numbers is exact in FP32, so these products are the reference's; only the FP32 summation
// order differs from the FP32 kernels.
//
// Tile abstraction (the AMX layout, shared by every implementation):
// - A (activations) is packed as [Mp/16][Kp/32] tiles of 16 rows x 32 BF16 (one 64-byte row per
//   activation row): Mp = M rounded up to 16, Kp = K rounded up to 32, zero padded.
// - B (weights, decoded to BF16) is packed per 16 weight rows (output features) as [Kp/32] tiles
//   of 16 "pair rows" x 16 columns x 2 BF16 (VNNI): element [p][2j + h] of tile t is W[n0 + j]
//   [32t + 2p + h].
// - A tile product C[16][16] += A_t · B_t is one TDPBF16PS (AMX) or 16 VDPBF16PS per row.
// Arithmetic (every value is FP32 with round-to-nearest-even; inputs with a zero BF16 exponent
// (denormals) count as zero; results whose magnitude is below FLT_MIN become a zero of their
// sign: DAZ / FTZ, as Intel documents both instructions; MXCSR is not used):
// - Order::kAmx (TDPBF16PS, Intel SDM pseudo-code): per K tile t, per output element, two
//   partial sums start at +0: e = fma(a[2p], b[2p], e) and o = fma(a[2p+1], b[2p+1], o) for
//   p = 0..15; then c = c + (e + o). c starts at +0 and takes the tiles in increasing t.
// - Order::kVdp (VDPBF16PS, Intel SDM pseudo-code): c starts at +0; per BF16 pair p of K in
//   increasing order, c = fma(a[2p+1], b[2p+1], c) then c = fma(a[2p], b[2p], c).
// Both are fixed per output element and independent of M (rows of a tile never mix, every M is
// padded to whole tiles and run through the same K order), of the output's position in the
// batch, of N blocking and of the thread count. The bias, if any, is added after the sum.
// VDPBF16PS was checked bitwise against Order::kVdp's emulation on AMD Zen 4 (kernels_test,
// 2026-12-02); TDPBF16PS against Order::kAmx is assumed until a CPU with AMX runs
// Bf16Dot.AmxMatchesItsEmulationBitwise. kernels_test compares the real kernels bitwise against
// the emulation wherever the CPU has them. NaN payloads are not part of the contract.
//
// Weight rows that are not BF16-exact normal numbers after decoding (an extreme E8M0 scale that
// makes e4m3 · 2^(e-127) subnormal, or BF16 weights that are subnormal) would not give the
// reference's products under DAZ, so each 16-row weight tile is checked when it is packed, and
// a tile that fails is computed instead by FP32 FMAs in increasing k (acc = fma(x, w, acc) from
// +0; a different but equally fixed order, chosen by the weights alone).
#ifndef DEEPINFER_KERNELS_CPU_BF16_DOT_H_
#define DEEPINFER_KERNELS_CPU_BF16_DOT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/thread_pool.h"
#include "kernels/ops.h"

namespace deepinfer::kernels::bf16dot {

inline constexpr int kTileM = 16;                   // rows of an A / C tile
inline constexpr int kTileN = 16;                   // FP32 columns of a C tile (64 bytes)
inline constexpr int kTileK = 32;                   // BF16 per A-tile row: the K of one tile step
inline constexpr int kTileElems = kTileM * kTileK;  // BF16 per A or B tile (1 KiB)

// The arithmetic order of a tile product (file comment).
enum class Order { kAmx, kVdp };

// The implementations. The emulations run on any CPU (portable C++, std::fma) and are the
// oracle the hardware kernels are tested against bitwise.
enum class Kernel {
  kEmulatedAmx,  // Order::kAmx in portable code
  kEmulatedVdp,  // Order::kVdp in portable code
  kAmx,          // AMX-BF16 tiles (TDPBF16PS); needs AmxAvailable()
  kAvx512Bf16,   // AVX512_BF16 VDPBF16PS; needs the CPU feature
};
Order OrderOf(Kernel kernel);
const char* KernelName(Kernel kernel);

// Whether this CPU and OS run AMX-BF16 tiles: CPUID AMX-TILE + AMX-BF16, XCR0 tile state, and
// Linux granting this process the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, requested
// once, on first call). Thread-safe.
bool AmxAvailable();
// Whether the CPU has AVX512_BF16 (with AVX-512 F/BW/VL/DQ).
bool Avx512Bf16Available();
// Whether `kernel` can run on this machine (emulations: always).
bool KernelRuns(Kernel kernel);

// C (rows [0, 16·mt), columns [0, 16·nt), row stride ldc floats) = the product of mt packed A
// tile rows (a, the next one a_stride BF16 further) and nt packed B tile columns (b, b_stride),
// over kt K tiles each. mt, nt in {1, 2}. The innermost step of Linear; exposed for tests.
void TileProduct(Kernel kernel, const uint16_t* a, int64_t a_stride, int mt, const uint16_t* b,
                 int64_t b_stride, int nt, int64_t kt, float* c, int64_t ldc);

// Packing. PackA: x [M, K] (row stride x_stride floats, values BF16-exact: they are converted
// with round-to-nearest-even) into a [PaddedRows(M) · PaddedK(K)] BF16 in the A layout.
// PackB: rows [n0, n0 + count) (count <= 16) of a weight already decoded to FP32 (w rows of K
// floats, row stride K) into one B tile column b [PaddedK(K) · 16] BF16; returns false if a
// value is not a BF16-exact normal number or zero (the tile then needs the FP32 fallback).
int64_t PaddedRows(int64_t M);
int64_t PaddedK(int64_t K);
// If row_exact is not null, row_exact[m] (m < M) says whether row m held only BF16-exact
// normal numbers or zeros (the rows whose products the tiles compute exactly).
void PackA(const float* x, int64_t x_stride, int64_t M, int64_t K, uint16_t* a,
           uint8_t* row_exact = nullptr);
bool PackB(const float* w, int64_t count, int64_t K, uint16_t* b);

// Whether Linear below applies to this weight and these options: quantize_activations or
// input_is_bf16 with BF16, FP8Block (E8M0 scales) or MXFP4 weights. F32 weights, F32-scaled FP8
// and FP32 activations keep the FP32 kernels (the reference computes those products in FP32).
// With input_is_bf16, an x row that is not BF16-exact normals is computed by the FP32 fallback
// of the file comment (chosen by that row's values alone, so batch invariance holds).
bool Applies(const WeightView& w, const LinearOptions& opt);

// Linear (ops.h contract, the order of the file comment) with `kernel`. Applies(w, opt) must
// hold. The workspace must hold LinearWorkspaceBytes(M, w, opt, threads) bytes, threads = the
// pool's thread count (1 if null).
size_t LinearWorkspaceBytes(int64_t M, const WeightView& w, const LinearOptions& opt,
                            int num_threads);
void Linear(Kernel kernel, const float* x, int64_t M, const WeightView& w, float* y,
            const LinearOptions& opt, ThreadPool* pool, void* workspace, size_t workspace_bytes);

// Runs `kernel` on small random BF16 / FP8 / MXFP4 problems against the scalar reference
// (relative error <= 1e-5) and checks that each row computed alone equals, bitwise, the same row
// computed in a batch of 37 (about a millisecond). Returns false and describes the first
// mismatch in *failure. The dispatcher runs it once before it first selects a hardware kernel.
bool SelfCheck(Kernel kernel, std::string* failure);

// The kernel the dispatcher (ops.cc) uses for eligible linears, or nullptr for none:
// DEEPINFER_FORCE_ISA=amxemu / avx512bf16emu select the emulations (tests: every golden can
// run through the tile code on any machine); ActiveIsa() kAmx / kAvx512Bf16 select the
// hardware kernels once they pass SelfCheck (a failure is logged, and the next level down is
// used). Decided once per process.
const Kernel* ActiveKernel();

}  // namespace deepinfer::kernels::bf16dot

#endif  // DEEPINFER_KERNELS_CPU_BF16_DOT_H_
