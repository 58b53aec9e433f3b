// Exact BF16 dot-product GEMM for linears whose two operands are both BF16-exact (issue #30,
// KERNELS.md "Exactness comes cheap with BF16 dot products"): FP8 / MXFP4 / BF16 weights times
// e4m3-quantised activations (LinearOptions::quantize_activations) or activations the caller
// promises are BF16 already (LinearOptions::input_is_bf16). Every e4m3 activation, e4m3
// or e2m1 weight times its E8M0 scale, and BF16 weight is a BF16 number, and the product of two
// BF16 numbers is exact in FP32, so these products are the reference's; only the FP32 summation
// order differs from the FP32 kernels.
//
// Two arithmetic orders, each fixed per output element and independent of M (rows never mix,
// every M runs through the same steps), of the output's position in the batch, of blocking and
// of the thread count; the bias, if any, is added after the sum. Every value is FP32 with
// round-to-nearest-even; inputs with a zero BF16 exponent (denormals) count as zero; results of
// the dot-product instructions whose magnitude is below FLT_MIN become a zero of their sign
// (DAZ / FTZ, as Intel documents both instructions; MXCSR is not used).
//
// Order::kAmx (AMX tiles, TDPBF16PS, Intel SDM pseudo-code). Per output element y[m][n] and per
// K tile t (32 columns, K zero padded to whole tiles), two partial sums start at +0:
// e = fma(x[m][32t + 2p], w[n][32t + 2p], e) and o = fma(x[m][32t + 2p + 1], w[n][32t + 2p + 1],
// o) for p = 0..15; then c = c + (e + o). c starts at +0 and takes the tiles in increasing t.
// The Linear gives the tiles the weights as first operand (16 weight rows x 32 consecutive
// columns, DecodeAmxRow) and the activations as second, in the VNNI layout (PackAmxX), so the
// weights are decoded in registers straight from the checkpoint layout; TileProduct / PackA /
// PackB (activations first, VNNI weights second: the same products in the same order) are the
// tile-level layouts the tests exercise. Real TDPBF16PS matched this order bitwise on an Intel Xeon
// with AMX (bf16_dot_test, 512,000 outputs of a separate probe).
//
// Order::kVdp, the lane order (VDPBF16PS): the weights stay in their checkpoint layout and are
// decoded to BF16 in registers, 64 columns (a "step", two vectors of 16 BF16 pairs) at a time, so
// a matrix-vector product reads each weight byte once (the tiles' VNNI layout would need a
// transposition per call). Activation rows are packed once per call in the same order
// (PackLaneX): position q of step t holds column 64t + LaneColumn(dtype, q) (K padded with zeros
// to whole steps). Each output has 16 lane accumulators from +0; per step, per vector v = 0, 1,
// lane l takes the pair at positions 32v + 2l, 2l + 1: acc = fma(a[odd], b[odd], acc), then
// acc = fma(a[even], b[even], acc) (VDPBF16PS's pseudo-code; real VDPBF16PS matched it bitwise
// on AMD Zen 4, in an earlier tile order, and on Zen 5 in this one). The result is the sum of the
// lanes: l + (l + 8), then + 4, + 2, + 1.
//
// Weights that do not decode to BF16-exact normal numbers would not give the reference's
// products under DAZ. Both orders check each weight row: FP8 / MXFP4 rows whose E8M0 scales all lie
// in LaneFp8ScaleOk / LaneFp4ScaleOk (bf16_dot_kernels.h) and BF16 rows without denormals take the
// BF16 products. Failing tiles / rows, and activation rows that are not BF16-exact normals, are
// computed instead by FP32 FMAs in increasing k (acc = fma(x, w, acc) from +0; a different but
// equally fixed order, chosen by the values alone). NaN payloads are not part of the contract; e4m3
// NaN codes decode to a zero of their sign in the lane order.
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
  kAvx512Bf16,   // VDPBF16PS in the lane order; needs Avx512Bf16Available()
};
Order OrderOf(Kernel kernel);
const char* KernelName(Kernel kernel);

// Whether this CPU and OS run AMX-BF16 tiles: CPUID AMX-TILE + AMX-BF16, XCR0 tile state, and
// Linux granting this process the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, requested
// once, on first call). Thread-safe.
bool AmxAvailable();
// Whether the CPU has AVX512_BF16 with AVX-512 F/BW/VL/DQ and VBMI (the FP8 decode's VPERMT2B).
bool Avx512Bf16Available();
// Whether `kernel` can run on this machine (emulations: always).
bool KernelRuns(Kernel kernel);

// C (rows [0, 16·mt), columns [0, 16·nt), row stride ldc floats) = the product of mt packed A
// tile rows (a, the next one a_stride BF16 further) and nt packed B tile columns (b, b_stride),
// over kt K tiles each. mt, nt in {1, 2}. Order::kAmx kernels only: the innermost step of their
// Linear; exposed for tests.
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

// The lane order's layout (Order::kVdp): the column (within its step of 64) that position q of
// a packed step holds. FP8: VPUNPCK{L,H}BW's interleave; MXFP4: the low nibbles of the step's
// two blocks, then their high nibbles; BF16: q itself.
int64_t LaneColumn(WeightDType dtype, int64_t q);
// x [M, K] (row stride x_stride) as BF16 in the lane layout for weights of `dtype`: M rows of
// LanePaddedK(K) (bf16_dot_kernels.h), zero padded. row_exact[m] (if not null) as PackA's; the
// packed values of a row that is not exact are unspecified.
void PackLaneX(const float* x, int64_t x_stride, int64_t M, int64_t K, WeightDType dtype,
               uint16_t* out, uint8_t* row_exact);
// Row n of a BF16 / FP8Block (E8M0) / MXFP4 weight as the lane order's BF16 bits, in the layout
// of PackLaneX (LanePaddedK(K) values). Returns whether the row takes the BF16 products (file
// comment); the bits of a row that does not are unspecified.
bool DecodeLaneRow(const WeightView& w, int64_t n, uint16_t* out);

// The AMX order's layouts (Order::kAmx). Activations are the tiles' second operand, in the
// VNNI layout: PackAmxX writes x [M, K] (row stride x_stride) as PaddedRows(M) / 16 x
// PaddedK(K) / 32 tiles of 16 "pair rows" x 16 columns x 2 BF16, zero padded; AmxXIndex gives
// the position of x[m][k] (tile (m / 16, k / 32), pair row (k % 32) / 2, column m % 16, half
// k % 2). row_exact as PackLaneX's. Weights are the first operand, 16 rows x 32 consecutive
// columns per tile; DecodeAmxRow writes row n as BF16 bits in column order (LanePaddedK(K)
// values, zero padded) and returns DecodeLaneRow's check.
void PackAmxX(const float* x, int64_t x_stride, int64_t M, int64_t K, uint16_t* out,
              uint8_t* row_exact);
int64_t AmxXIndex(int64_t K, int64_t m, int64_t k);
bool DecodeAmxRow(const WeightView& w, int64_t n, uint16_t* out);

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
