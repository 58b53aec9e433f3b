// The ISA-independent loop nests of the CPU Linear kernels (avx2.cc, avx512.cc): row groups of the
// streamed path, the blocking of the packed path and the split along N over the thread pool.
// The register tiles and decoders they call are each ISA's own. Templates only: every
// instantiation belongs to the file that makes it, and avx512.cc includes this header before
// its `#pragma GCC target`, so these loops are compiled for the baseline ISA there and call the
// AVX-512 tiles (the tiles, not the loops, are where the time goes).
#ifndef DEEPINFER_KERNELS_CPU_LINEAR_DRIVER_H_
#define DEEPINFER_KERNELS_CPU_LINEAR_DRIVER_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "common/thread_pool.h"

namespace deepinfer::kernels::cpu {

// How far ahead (bytes) the streamed FP8 and MXFP4 tiles of every ISA prefetch each weight-row
// stream. Their decode keeps the core busy, and the hardware prefetchers alone (which also stop
// at 4 KiB pages) left them short of the read bandwidth; 2 KiB ahead, past a row's end, is the
// stream's next row, which follows it in memory. Measured per kernel in docs/performance.md
// (AVX2 MXFP4 2026-12-02; the others 2026-12-04, Zen 5).
constexpr int64_t kStreamPrefetchBytes = 2048;

// The most x rows one streamed tile takes (the decode path's register tiles have MR = 1..4).
constexpr int64_t kStreamMaxM = 4;

// Calls run.template operator()<MR>(xr, yr) for each group of up to kMaxM rows of x / y (MR = the
// group's size, a compile-time constant for the register tiles; xr / yr hold MR row pointers).
// kMaxM is the ISA's own (avx512.cc streams up to 8 rows, with twice AVX2's registers).
template <int64_t kMaxM = kStreamMaxM, class Run>
void ForEachRowGroup(const float* x, int64_t x_stride, int64_t M, float* y, int64_t y_stride,
                     const Run& run) {
  static_assert(kMaxM >= 1);
  for (int64_t m = 0; m < M; m += kMaxM) {
    const int64_t mr = std::min(kMaxM, M - m);
    const float* xr[kMaxM];
    float* yr[kMaxM];
    for (int64_t i = 0; i < mr; ++i) {
      xr[i] = x + (m + i) * x_stride;
      yr[i] = y + (m + i) * y_stride;
    }
    [&]<int... I>(std::integer_sequence<int, I...>) {
      // The one MR = mr among 1 .. kMaxM.
      ((mr == I + 1 ? (run.template operator()<I + 1>(xr, yr), true) : false) || ...);
    }
    (std::make_integer_sequence<int, static_cast<int>(kMaxM)>());
  }
}

// Weight rows [n0, n1) as NR interleaved streams over consecutive parts of the range, then the
// leftover rows singly: tile(rows) takes NR row indices (far apart, so each is a long sequential
// read, which the hardware prefetchers serve better than NR adjacent rows: ~1.3x measured on Zen
// 3), tile_one(rows) one.
template <int NR, class Tile, class TileOne>
void ForEachRowStream(int64_t n0, int64_t n1, const Tile& tile, const TileOne& tile_one) {
  const int64_t per_stream = (n1 - n0) / NR;
  for (int64_t r = 0; r < per_stream; ++r) {
    int64_t rows[NR];
    for (int j = 0; j < NR; ++j) rows[j] = n0 + j * per_stream + r;
    tile(rows);
  }
  for (int64_t n = n0 + NR * per_stream; n < n1; ++n) tile_one(&n);
}

// Runs fn(n0, n1, slot) over the output features [0, N): in fixed chunks starting on multiples
// of `align`, handed out dynamically over the pool's threads (ThreadPool::ParallelForChunks:
// about kChunksPerThread per thread, so a thread slowed down by other work takes fewer instead
// of making everyone wait), slot = the running thread's index (its scratch slot, < threads), or
// over [0, N) on the calling thread when threads == 1. A row is still computed by one thread in
// one order, so results do not depend on the chunking. threads == pool->num_threads() when > 1.
constexpr int64_t kChunksPerThread = 4;
template <class Fn>
void ForEachThreadRange(int64_t N, int64_t align, ThreadPool* pool, int threads, const Fn& fn) {
  if (threads <= 1) {
    fn(int64_t{0}, N, 0);
    return;
  }
  const int64_t units = (N + align - 1) / align;
  const int64_t chunk = std::max<int64_t>(1, units / (int64_t{threads} * kChunksPerThread)) * align;
  pool->ParallelForChunks(N, chunk,
                          [&](int64_t n0, int64_t n1, int thread) { fn(n0, n1, thread); });
}

// Blocking of the packed (prefill) path, in weight rows, columns and x rows, with the register
// tile (kMR x rows x kNR weight rows, kAcc accumulators of kLanes floats per output element).
template <int64_t kNC_, int64_t kKC_, int64_t kMC_, int kMR_, int kNR_, int kAcc_, int kLanes_>
struct PackedBlocking {
  static constexpr int64_t kNC = kNC_;  // weight rows per panel (a multiple of kNR)
  static constexpr int64_t kKC = kKC_;  // columns per panel
  static constexpr int64_t kMC = kMC_;  // x rows per accumulator block (a multiple of kMR)
  static constexpr int kMR = kMR_;
  static constexpr int kNR = kNR_;
  static constexpr int kAcc = kAcc_;
  static constexpr int kLanes = kLanes_;
  static constexpr int64_t kPanelFloats = kNC * kKC;
  // Columns of a K chunk rounded up to whole accumulator steps.
  static int64_t StepCols(int64_t kc) {
    return (kc + kLanes * kAcc - 1) / (kLanes * kAcc) * (kLanes * kAcc);
  }
};

// The packed path's loop nest for weight rows [n0, n1) and all M rows of x, packed in groups of
// kMR rows (row stride of a group kp floats per row). Per panel of kNC weight rows x kKC columns,
// pack_panel(nb, nc, kb, kc, panel) decodes the weights (panel = scratch[0, kPanelFloats)); then,
// per kNR-row group of the panel (kept in L1) and kMR-row group of x,
// tile(xt, xt_next, kcv, j0, accbuf, first, last, out) runs the register tile: xt = the tile's
// packed x at column kb, xt_next the next tile's (to prefetch), kcv = B::StepCols(kc), accbuf its
// partial accumulators across K chunks (in scratch after the panel), first / last whether this is
// the first / last K chunk, out[kMR][kNR] its results on the last chunk. Rows past nc or M are
// padding: computed, never stored. y gets out + bias.
template <class B, class PackPanel, class Tile>
void PackedRowsLoop(const float* xpk, int64_t kp, int64_t M, int64_t K, int64_t n0, int64_t n1,
                    const float* bias, float* y, int64_t y_stride, float* scratch,
                    const PackPanel& pack_panel, const Tile& tile) {
  constexpr int kMR = B::kMR, kNR = B::kNR;
  float* panel = scratch;
  float* accbuf = scratch + B::kPanelFloats;
  for (int64_t nb = n0; nb < n1; nb += B::kNC) {
    const int64_t nc = std::min(B::kNC, n1 - nb);
    for (int64_t mb = 0; mb < M; mb += B::kMC) {
      const int64_t mc = std::min(B::kMC, M - mb);
      // One chunk at least: with K = 0 every output is the empty sum (+0, plus the bias).
      for (int64_t kb = 0; kb < std::max<int64_t>(K, 1); kb += B::kKC) {
        const int64_t kc = std::min(B::kKC, K - kb);
        const int64_t kcv = B::StepCols(kc);
        const bool first = kb == 0, last = kb + kc >= K;
        pack_panel(nb, nc, kb, kc, panel);
        for (int64_t j0 = 0; j0 < nc; j0 += kNR) {
          for (int64_t m = mb; m < mb + mc; m += kMR) {
            float* ab = accbuf + (((m - mb) / kMR) * (B::kNC / kNR) + j0 / kNR) *
                                     (kMR * kNR * B::kAcc * B::kLanes);
            float out[kMR][kNR];
            const float* xt = xpk + m * kp + kb * kMR;
            tile(xt, m + kMR < mb + mc ? xt + kMR * kp : xpk + mb * kp + kb * kMR, kcv, j0, ab,
                 first, last, out);
            if (!last) continue;
            const int64_t valid = std::min<int64_t>(kNR, nc - j0);
            for (int64_t i = 0; i < kMR && m + i < M; ++i) {
              float* yr = y + (m + i) * y_stride + nb + j0;
              for (int64_t j = 0; j < valid; ++j) {
                yr[j] = bias != nullptr ? out[i][j] + bias[nb + j0 + j] : out[i][j];
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace deepinfer::kernels::cpu

#endif  // DEEPINFER_KERNELS_CPU_LINEAR_DRIVER_H_
