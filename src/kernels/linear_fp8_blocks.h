// FP8 e4m3 weights with one scale per tile of any size (block_rows x block_cols), multiplied in
// place: DeepSeek-V4.1 stores its dense weights in 32x32 tiles (shared/spec/deepseek-v41.md §2.2),
// while WeightDType::kFP8Block (ops.h) is V4's fixed 128x128. Added beside ops.h rather than into
// WeightView so the existing kernels and their callers stay as they are.
//
// LinearFp8Blocks decodes panels of weight rows into FP32 scratch (fl(e4m3 · scale), exact for
// E8M0 scales; NaN codes 0x7F/0xFF decode to 0 as in DequantizeWeight) and runs the F32 Linear of
// ops.h on each panel. The F32 Linear's order is fixed per output element and independent of M,
// of the rows around it and of the thread count, so the result is bitwise the result of Linear on
// the whole dequantised matrix, batch-invariant in the same sense, at 1 byte per weight in memory
// instead of 4. With block 128 it equals Linear on the same bytes as a kFP8Block view.
// Decode-sized calls (M <= 4) on the AVX2 kernels skip the panels: the FP8 bytes are streamed
// once through the F32 Linear's own streaming loop with a tile-scale row decoder
// (avx2::LinearFp8TilesSmallM), which gives the same bits. On AVX-512 and the scalar kernels
// every M still goes through the panels.
#ifndef DEEPINFER_KERNELS_LINEAR_FP8_BLOCKS_H_
#define DEEPINFER_KERNELS_LINEAR_FP8_BLOCKS_H_

#include <cstddef>
#include <cstdint>

#include "common/thread_pool.h"
#include "kernels/ops.h"

namespace deepinfer::kernels {

// A non-owning view of e4m3 bytes [rows, cols] (row-major) and their tile scales
// [ceil(rows/block_rows), ceil(cols/block_cols)] (row-major, E8M0 bytes or F32).
struct Fp8BlocksView {
  const uint8_t* data = nullptr;
  const void* scales = nullptr;
  ScaleDType scale_dtype = ScaleDType::kE8M0;
  int64_t rows = 0, cols = 0;
  int64_t block_rows = 32, block_cols = 32;
  // No byte is an e4m3 NaN code (checked at load, kernels::Fp8HasNanCodes): the decode kernel
  // may skip its NaN masking (WeightView::fp8_nan_free).
  bool nan_free = false;
  int64_t scale_cols() const { return (cols + block_cols - 1) / block_cols; }
  // Value of tile scale (row block rb, column block cb).
  float Scale(int64_t rb, int64_t cb) const;
};

// Number of tile scales of a [rows, cols] matrix in tiles of br x bc.
int64_t Fp8BlocksScaleCount(int64_t rows, int64_t cols, int64_t br, int64_t bc);

// Rows [row_begin, row_begin + count) as a view; row_begin must be a multiple of block_rows
// (CHECKed).
Fp8BlocksView SliceFp8BlocksRows(const Fp8BlocksView& w, int64_t row_begin, int64_t count);

// Dequantises rows [row_begin, row_end) into out [(row_end - row_begin), cols] float32.
void DequantizeFp8BlocksRows(const Fp8BlocksView& w, int64_t row_begin, int64_t row_end,
                             float* out);

// Workspace bytes of LinearFp8Blocks for this call (pass the same pool).
size_t LinearFp8BlocksWorkspaceBytes(int64_t M, const Fp8BlocksView& w, const LinearOptions& opt,
                                     const ThreadPool* pool);

// y[M, N] = x[M, K] · W^T (+ bias), options as for Linear (ops.h), the same order and results as
// Linear on DequantizeFp8BlocksRows(w) (see the file comment). Splits N over `pool` (null: the
// calling thread). `workspace`: LinearFp8BlocksWorkspaceBytes bytes, 64-byte aligned (CHECKed).
void LinearFp8Blocks(const float* x, int64_t M, const Fp8BlocksView& w, float* y,
                     const LinearOptions& opt, ThreadPool* pool, void* workspace,
                     size_t workspace_bytes);

}  // namespace deepinfer::kernels

#endif  // DEEPINFER_KERNELS_LINEAR_FP8_BLOCKS_H_
