#include "model/deepseek_v4.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <numeric>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/step_trace.h"
#include "common/thread_pool.h"
#include "model/deepseek_v4_chunk_check.h"
#include "model/deepseek_v4_forward_hooks.h"
#include "model/deepseek_v4_kv_rows.h"
#include "model/deepseek_v4_loading.h"
#include "model/deepseek_v4_mhc.h"
#include "model/deepseek_v4_moe.h"
#include "model/deepseek_v4_numerics.h"
#include "model/deepseek_v4_rows.h"
#include "model/deepseek_v4_softmax.h"

namespace deepinfer::model {
namespace dsv4 {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Layout version mixed into KvLayout::layout_id: 1 = FP32 rows everywhere; 2 = the row formats
// of deepseek_v4_kv_rows.h, chosen at load (compact with BF16 activations, FP32 otherwise);
// 3 = position-indexed state with speculative spare slots (window rings of window + 6 slots,
// overlap compressor rings of 2m + 6 entries), so snapshots of version 2 never match.
constexpr int64_t kLayoutVersion = 3;

// Slots of a window ring: the window plus the anchor and the drafts a verify writes past the
// committed frontier (spec speculative.md §4.6.1; the seed's 128 + 6). Position p is slot p % R.
int64_t WindowRingSlots(int64_t window) { return window + kSpeculativeRollbackTokens; }

// Per-token (a, g + ape) entries of a compressor with ratio m (spec speculative.md §4.6.2
// option (b)): a position-indexed ring (position p is entry p % slots) covering the positions the
// next pool reads — the current block and, for the overlap compressor (m = 4, coff 2), the
// previous one — plus the anchor and drafts a verify may write past the committed frontier:
// 2m + 6 (overlap) or m + 6 entries. Pooling reads the ring in place, so a rejected draft never
// moves or overwrites an entry a committed pool still needs. (m entries would not do for the
// non-overlap compressor: a rejected draft past the block's end wraps onto the entries of the
// block its rejected completion left open.)
int64_t CompressorSlots(int64_t ratio, int64_t coff) {
  return coff * ratio + kSpeculativeRollbackTokens;
}

// Bound on the indexer keys one layer decodes at a time (sequences are scored in groups whose
// decoded keys fit; one sequence alone may exceed it).
constexpr int64_t kIndexerScratchBytes = int64_t{64} << 20;

// One sequence's chunk inside a forward: rows [row0, row0 + T) of the batch's row arrays hold
// its tokens at positions [p0, p0 + T).
struct SeqCtx {
  int64_t p0 = 0;    // first position
  int64_t T = 0;     // tokens in the chunk
  int64_t row0 = 0;  // first row of the chunk in the batch's row arrays
  std::span<const int32_t> block_table;
  uint8_t* state = nullptr;  // this sequence's state slot
  const KvCacheView* kv = nullptr;
  // Bounded replay (model.h SequenceChunk): window keys start at `floor`; compressed rows that
  // complete before `keep_until` are already cached and are not written.
  int64_t floor = 0;
  int64_t keep_until = 0;
};

// The rows of one forward: every chunk's tokens concatenated in batch order. Token-wise work
// (embedding, mHC, norms, every Linear, the router and the MoE) runs once over all rows, so a
// step reads each weight once whatever the number of sequences; only attention and the
// compressor / indexer state (positions, window ring, compressed KV) loop over `seqs`. Every
// row's arithmetic is independent of the other rows (the kernels' Linear is row-invariant, and
// nothing here reduces across rows), so a sequence's logits do not depend on its batch.
struct RowBatch {
  std::vector<SeqCtx> seqs;
  int64_t rows = 0;
  std::vector<int64_t> pos;     // [rows] absolute position of each row
  std::vector<int32_t> seq_of;  // [rows] index into seqs
};

}  // namespace

// Cache/state indices and per-block constants.
struct DeepseekV4Model::Impl : ForwardHooks {
  struct BlockInfo {
    int paged_kv = -1;  // index into layout.paged
    int paged_idx = -1;
    int state_window = -1;  // index into layout.state
    int state_comp = -1;
    int state_idx_comp = -1;
    std::vector<double> freqs;
  };
  std::vector<BlockInfo> blocks;  // main layers then MTP
  const Config* cfg = nullptr;
  const KvLayout* layout = nullptr;
  // Row formats of the paged caches: "compressed_kv" (head_dim values) and "indexer_k"
  // (index_head_dim values).
  KvRowCodec kv_codec, idx_codec;
  // Debug hook of the current forward; only set for one-chunk forwards (see set_debug).
  std::vector<BlockDebug>* debug = nullptr;

  // ---------- small helpers ----------
  // Linear with FP64 accumulation in the FP32-activation (tier B) mode, whose goldens come from
  // a float64 oracle; FP32 accumulation otherwise.
  void Lin(const WeightMatrix& w, const float* x, int64_t M, float* y, bool quantize_act) const {
    Linear(w, x, M, y, quantize_act, /*precise=*/!bf16);
  }
  // A product the reference runs in BF16 on BF16 activations (spec §2.5: wo_a, indexer
  // weights_proj): in the BF16 tier x is BF16, so the kernels' exact BF16 dot products apply.
  void LinBf16(const WeightMatrix& w, const float* x, int64_t M, float* y) const {
    Linear(w, x, M, y, /*quantize_act=*/false, /*precise=*/!bf16, /*input_is_bf16=*/bf16);
  }

  // Weighted RMSNorm of one row (FP32 math, output rounded).
  void RmsNormRow(const float* xr, const std::vector<float>& w, int64_t dim, float* yr) const {
    WeightedRmsNormRow(xr, w.data(), dim, static_cast<float>(cfg->rms_eps), bf16, yr);
  }
  void RmsNorm(const float* x, const std::vector<float>& w, int64_t rows, int64_t dim,
               float* y) const {
    ForRows(rows, 3 * dim, [&](int64_t r) { RmsNormRow(x + r * dim, w, dim, y + r * dim); });
  }

  float* StateAt(const SeqCtx& s, int index) const {
    return reinterpret_cast<float*>(s.state + layout->StateOffset(index));
  }
  // Bytes of row `b` of paged cache `index` whose rows cover `ratio` tokens each.
  uint8_t* PagedRow(const SeqCtx& s, int index, int64_t b, int64_t ratio) const {
    const PagedCacheSpec& spec = layout->paged[index];
    const int64_t pos = b * ratio;
    const int64_t blk = s.block_table[pos / kBlockTokens];
    const int64_t row = b % spec.rows_per_block;
    return s.kv->block_base + blk * layout->BlockBytes() + layout->PagedOffset(index) +
           row * spec.row_bytes;
  }
  // Decodes rows[i] = (sequence, compressed row) of paged cache `index` into
  // dst[i * codec.dim, (i + 1) * codec.dim).
  void DecodeRows(const RowBatch& b, int index, const KvRowCodec& codec, int64_t ratio,
                  const std::vector<std::pair<int32_t, int64_t>>& rows, float* dst) const {
    ForRows(static_cast<int64_t>(rows.size()), 2 * codec.dim, [&](int64_t i) {
      codec.Decode(PagedRow(b.seqs[rows[i].first], index, rows[i].second, ratio),
                   dst + i * codec.dim);
    });
  }

  // ---------- mHC (spec §3.2, §3.3, §3.8) ----------
  // X: [T, hc_mult, hidden] streams -> x [T, hidden] (rounded), pre/post [T, hc_mult],
  // comb [T, hc_mult, hc_mult]. V4 collapses the streams with this site's own pre.
  void HcPre(const HcWeights& hw, const float* X, int64_t T, float* x, float* pre, float* post,
             float* comb) const {
    const HcDims h = HcDimsOf(*cfg);
    HcMixes(hw, h, X, T, pre, post, comb);
    HcCollapse(h, X, pre, T, bf16, x);
  }

  void HcPost(float* X, const float* y, const float* post, const float* comb, int64_t T) const {
    dsv4::HcPost(HcDimsOf(*cfg), X, y, post, comb, T, bf16);
  }

  // HC head + final norm + head (spec §3.8) for the rows listed in `rows`, one head Linear over
  // all of them.
  void Logits(const Weights& w, const HcWeights& hc, const std::vector<float>& norm, const float* X,
              const std::vector<int64_t>& rows, float* logits) const {
    const int64_t n = cfg->hc_mult, D = cfg->hidden_size, nD = n * D;
    const int64_t M = static_cast<int64_t>(rows.size());
    if (M == 0) return;
    std::vector<float> h(M * D), hn(M * D);
    ForRows(M, (n + 2) * nD, [&](int64_t r) {
      const float* v = X + rows[r] * nD;
      double ss = 0;
      for (int64_t i = 0; i < nD; ++i) ss += static_cast<double>(v[i]) * v[i];
      const float rs =
          1.0f / std::sqrt(static_cast<float>(ss / nD) + static_cast<float>(cfg->rms_eps));
      std::vector<float> pre(n);
      for (int64_t i = 0; i < n; ++i) {
        const float mixv = static_cast<float>(DotF64(hc.fn.data() + i * nD, v, nD)) * rs;
        pre[i] = Sigmoid(mixv * hc.scale[0] + hc.base[i]) + static_cast<float>(cfg->hc_eps);
      }
      for (int64_t k = 0; k < D; ++k) {
        float acc = 0;
        for (int64_t s = 0; s < n; ++s) acc += pre[s] * v[s * D + k];
        h[r * D + k] = acc;
      }
      R(h.data() + r * D, D);
    });
    RmsNorm(h.data(), norm, M, D, hn.data());
    Lin(w.head, hn.data(), M, logits, /*quantize_act=*/false);
  }

  // ---------- compressor (spec §3.6.1, §4) ----------
  // Projects all rows of the batch (xn: [rows, hidden]) once, then feeds each sequence's tokens
  // through its compressor state; completed rows are finished (norm, RoPE, FP8 or Hadamard+FP4
  // simulation), traced (all sequences' completed rows, in batch order) and written to paged
  // cache `paged`.
  void Compress(const CompressorWeights& cw, const float* xn, const RowBatch& b, int state_index,
                int paged, bool indexer, const std::vector<double>& freqs,
                const std::string& trace_name) const {
    const int64_t m = cw.ratio, c = cw.width, co = cw.coff * c;
    const bool overlap = cw.coff == 2;
    std::vector<float> a(b.rows * co), g(b.rows * co);
    Lin(cw.wkv, xn, b.rows, a.data(), false);
    Lin(cw.wgate, xn, b.rows, g.data(), false);
    std::vector<float> rows;
    std::vector<std::pair<int32_t, int64_t>> row_ids;  // (sequence, compressed row)
    std::vector<float> gates(2 * m), vals(2 * m), pooled(c), row(c);
    const int64_t nslots = CompressorSlots(m, cw.coff);
    for (int32_t si = 0; si < static_cast<int32_t>(b.seqs.size()); ++si) {
      const SeqCtx& s = b.seqs[si];
      float* st = StateAt(s, state_index);  // [slots][2][co]
      // Entry of position q (q may be negative: the block before position 0, or before a
      // replay's floor, holds the reset values).
      auto entry = [&](int64_t q) { return ((q % nslots) + nslots) % nslots; };
      auto slot_a = [&](int64_t q) { return st + entry(q) * 2 * co; };
      auto slot_g = [&](int64_t q) { return st + entry(q) * 2 * co + co; };
      for (int64_t t = 0; t < s.T; ++t) {
        const int64_t p = s.p0 + t, r = s.row0 + t;
        std::memcpy(slot_a(p), a.data() + r * co, co * 4);
        const float* ape = cw.ape.data() + (p % m) * co;
        for (int64_t k = 0; k < co; ++k) slot_g(p)[k] = g[r * co + k] + ape[k];
        if ((p + 1) % m != 0) continue;
        const int64_t first = p + 1 - m;  // the completed block's first position
        for (int64_t k = 0; k < c; ++k) {
          int64_t nv = 0;
          if (overlap) {
            // A-halves of the previous block, then B-halves of this one.
            for (int64_t i = 0; i < m; ++i) {
              gates[nv] = slot_g(first - m + i)[k];
              vals[nv++] = slot_a(first - m + i)[k];
            }
            for (int64_t i = 0; i < m; ++i) {
              gates[nv] = slot_g(first + i)[c + k];
              vals[nv++] = slot_a(first + i)[c + k];
            }
          } else {
            for (int64_t i = 0; i < m; ++i) {
              gates[nv] = slot_g(first + i)[k];
              vals[nv++] = slot_a(first + i)[k];
            }
          }
          pooled[k] = SoftmaxPool(gates.data(), vals.data(), nv);
        }
        R(pooled.data(), c);
        RmsNormRow(pooled.data(), cw.norm, c, row.data());
        const int64_t rd = cfg->rope_dim;
        ApplyRope(row.data() + c - rd, static_cast<int>(rd), freqs, p + 1 - m, false);
        R(row.data() + c - rd, rd);
        if (indexer) {
          Hadamard128InPlace(row.data());
          R(row.data(), c);
          Fp4SimInPlace(row.data(), c);
        } else {
          Fp8SimInPlace(row.data(), c - rd, 64);
        }
        if (p < s.keep_until) continue;  // replay: the cached row stays as it is
        rows.insert(rows.end(), row.begin(), row.end());
        row_ids.push_back({si, p / m});
      }
    }
    if (rows.empty()) return;
    TraceF(trace_name, rows.data(), static_cast<int64_t>(rows.size()));
    const KvRowCodec& codec = indexer ? idx_codec : kv_codec;
    for (size_t i = 0; i < row_ids.size(); ++i) {
      codec.Encode(rows.data() + i * c,
                   PagedRow(b.seqs[row_ids[i].first], paged, row_ids[i].second, m));
    }
  }

  void ResetCompressorState(const SeqCtx& s, int state_index, const CompressorWeights& cw) const {
    float* st = StateAt(s, state_index);
    const int64_t co = cw.coff * cw.width, slots = CompressorSlots(cw.ratio, cw.coff);
    for (int64_t i = 0; i < slots; ++i) {
      std::fill(st + i * 2 * co, st + i * 2 * co + co, 0.f);
      std::fill(st + i * 2 * co + co, st + (i + 1) * 2 * co, kNegInf);
    }
  }

  // ---------- attention (spec §3.5, §3.6) ----------
  // xn: [rows, hidden] -> out [rows, hidden]. Projections run over all rows; the indexer's
  // scores and the attention itself read each row's own sequence's cache.
  void Attention(const BlockWeights& bw, const BlockInfo& bi, const std::string& pfx,
                 const float* xn, const RowBatch& b, float* out, BlockDebug* dbg) const {
    const Config& c = *cfg;
    const AttentionWeights& aw = bw.attn;
    // Blocks swapped in during this forward: this layer's caches must be in place before any
    // of its rows is read (paged indices grow with the layer).
    if (!b.seqs.empty() && bi.paged_kv >= 0) {
      const KvCacheView& kv = *b.seqs[0].kv;
      if (bi.paged_idx >= 0 && bi.paged_idx < bi.paged_kv) kv.BeforeRead(bi.paged_idx);
      kv.BeforeRead(bi.paged_kv);
      if (bi.paged_idx > bi.paged_kv) kv.BeforeRead(bi.paged_idx);
    }
    const int64_t T = b.rows, D = c.hidden_size, H = c.num_heads, d = c.head_dim, rd = c.rope_dim;
    const int64_t W = c.window, RS = WindowRingSlots(W), m = bw.ratio;
    const float eps = static_cast<float>(c.rms_eps);
    // q
    std::vector<float> qa(T * c.q_lora_rank), qr(T * c.q_lora_rank), q(T * H * d);
    Lin(aw.wq_a, xn, T, qa.data(), true);
    R(qa.data(), qa.size());
    RmsNorm(qa.data(), aw.q_norm, T, c.q_lora_rank, qr.data());
    TraceF(pfx + "attn.qr", qr.data(), qr.size());
    Lin(aw.wq_b, qr.data(), T, q.data(), true);
    R(q.data(), q.size());
    ForRows(T, 8 * H * d, [&](int64_t t) {
      for (int64_t h = 0; h < H; ++h) {
        float* qh = q.data() + (t * H + h) * d;
        // Per-head unweighted RMSNorm, done on BF16 tensors in the reference:
        // square (rounded), mean (rounded), + eps (rounded), rsqrt (rounded), product (rounded).
        float ss = 0;
        for (int64_t i = 0; i < d; ++i) ss += R1(qh[i] * qh[i]);
        const float var = R1(ss / d);
        const float rs = R1(1.0f / std::sqrt(R1(var + eps)));
        for (int64_t i = 0; i < d; ++i) qh[i] = R1(qh[i] * rs);
        ApplyRope(qh + d - rd, static_cast<int>(rd), bi.freqs, b.pos[t], false);
        R(qh + d - rd, rd);
      }
    });
    // (The trace's attn.q holds the final query: per-head normed and RoPE'd.)
    TraceF(pfx + "attn.q", q.data(), q.size());
    // window kv
    std::vector<float> kva(T * d), kv(T * d);
    Lin(aw.wkv, xn, T, kva.data(), true);
    R(kva.data(), kva.size());
    RmsNorm(kva.data(), aw.kv_norm, T, d, kv.data());
    ForRows(T, 8 * d, [&](int64_t t) {
      float* k = kv.data() + t * d;
      ApplyRope(k + d - rd, static_cast<int>(rd), bi.freqs, b.pos[t], false);
      R(k + d - rd, rd);
      Fp8SimInPlace(k, d - rd, 64);
    });
    TraceF(pfx + "attn.kv", kv.data(), kv.size());

    // compressed rows and the indexer
    std::vector<std::vector<int32_t>> selected;  // CSA: per row
    if (m > 0) {
      if (aw.has_indexer) {
        const int64_t IH = c.index_n_heads, ID = c.index_head_dim;
        std::vector<float> qi(T * IH * ID), wts(T * IH);
        Lin(aw.idx_wq_b, qr.data(), T, qi.data(), true);
        R(qi.data(), qi.size());
        ForRows(T, 16 * IH * ID, [&](int64_t t) {
          for (int64_t h = 0; h < IH; ++h) {
            float* qh = qi.data() + (t * IH + h) * ID;
            ApplyRope(qh + ID - rd, static_cast<int>(rd), bi.freqs, b.pos[t], false);
            R(qh + ID - rd, rd);
            Hadamard128InPlace(qh);
            R(qh, ID);
            Fp4SimInPlace(qh, ID);
          }
        });
        TraceF(pfx + "attn.indexer.q", qi.data(), qi.size());
        Compress(aw.idx_compressor, xn, b, bi.state_idx_comp, bi.paged_idx, true, bi.freqs,
                 pfx + "attn.indexer.rows");
        LinBf16(aw.idx_weights_proj, xn, T, wts.data());
        R(wts.data(), wts.size());
        const float wscale = static_cast<float>(std::pow(static_cast<double>(ID), -0.5) *
                                                std::pow(static_cast<double>(IH), -0.5));
        for (auto& v : wts) v = R1(v * wscale);
        TraceF(pfx + "attn.indexer.weights", wts.data(), wts.size());
        // scores and top-k, per row against its own sequence's indexer keys
        const int64_t K = c.index_topk;
        selected.resize(T);
        std::vector<int32_t> sel_flat(T * K, -1);
        // Tracing (one-chunk forwards only) scores every row of the chunk, as the reference does.
        std::vector<float> all_scores;
        int64_t end_rows = 0;
        if (tracer != nullptr) {
          CHECK_EQ(b.seqs.size(), 1u);
          end_rows = (b.seqs[0].p0 + b.seqs[0].T) / m;
          all_scores.assign(T * end_rows, 0.f);
        }
        // Each sequence's keys are decoded once for all its query rows; sequences go in groups
        // whose decoded keys fit kIndexerScratchBytes. A sequence's rows score the keys of rows
        // [0, (p0 + T) / m), the rows visible to its last query (and to the trace).
        std::vector<std::pair<int32_t, int64_t>> need;
        std::vector<int64_t> first_key(b.seqs.size());
        std::vector<float> keys;
        for (int32_t g0 = 0, g1 = 0; g0 < static_cast<int32_t>(b.seqs.size()); g0 = g1) {
          need.clear();
          for (g1 = g0; g1 < static_cast<int32_t>(b.seqs.size()); ++g1) {
            const SeqCtx& s = b.seqs[g1];
            const int64_t nrows = (s.p0 + s.T) / m;
            if (g1 > g0 &&
                static_cast<int64_t>(need.size() + nrows) * ID * 4 > kIndexerScratchBytes) {
              break;
            }
            first_key[g1] = static_cast<int64_t>(need.size());
            for (int64_t r = 0; r < nrows; ++r) need.push_back({g1, r});
          }
          keys.resize(need.size() * ID);
          DecodeRows(b, bi.paged_idx, idx_codec, m, need, keys.data());
          const int64_t t0 = b.seqs[g0].row0, t1 = b.seqs[g1 - 1].row0 + b.seqs[g1 - 1].T;
          // Scores first, as (row, block of kScoreBlock keys) items on the pool, so that a decode
          // step (one row against every key) is split over the threads too; then each row's
          // top-k. Every score is one row's own FP64 sum: bitwise the same for any split. Rows
          // go in groups of at most kScoreGroup scores (bounded scratch for long prompts).
          constexpr int64_t kScoreBlock = 32, kScoreGroup = int64_t{1} << 20;
          for (int64_t ra = t0, rb = t0; ra < t1; ra = rb) {
            std::vector<int64_t> item_start(1, 0);
            std::vector<std::vector<std::pair<float, int32_t>>> row_scores;
            int64_t total = 0;
            for (rb = ra; rb < t1 && (rb == ra || total < kScoreGroup); ++rb) {
              const int64_t nscore = tracer != nullptr ? end_rows : (b.pos[rb] + 1) / m;
              total += nscore;
              item_start.push_back(item_start.back() + (nscore + kScoreBlock - 1) / kScoreBlock);
              row_scores.emplace_back(nscore);
            }
            ForRows(item_start.back(), 2 * kScoreBlock * IH * ID, [&](int64_t item) {
              const int64_t i = std::upper_bound(item_start.begin(), item_start.end(), item) -
                                item_start.begin() - 1;
              const int64_t t = ra + i;
              const float* seq_keys = keys.data() + first_key[b.seq_of[t]] * ID;
              std::vector<std::pair<float, int32_t>>& sc = row_scores[i];
              const int64_t r0 = (item - item_start[i]) * kScoreBlock;
              const int64_t r1 = std::min<int64_t>(r0 + kScoreBlock, sc.size());
              for (int64_t r = r0; r < r1; ++r) {
                const double acc = IndexerScoreF64(qi.data() + t * IH * ID, wts.data() + t * IH, IH,
                                                   seq_keys + r * ID, ID);
                // Selection uses the unrounded score (the oracle's order on BF16 near-ties).
                sc[r] = {static_cast<float>(acc), static_cast<int32_t>(r)};
                if (tracer != nullptr) all_scores[t * end_rows + r] = R1(sc[r].first);
              }
            });
            ForRows(rb - ra, 16 * static_cast<int64_t>(row_scores[0].size()) + 16 * K,
                    [&](int64_t i) {
                      const int64_t t = ra + i;
                      const int64_t nvis = (b.pos[t] + 1) / m;
                      std::vector<std::pair<float, int32_t>>& sc = row_scores[i];
                      // Rows not yet visible to p were scored only for the trace.
                      const int64_t k = std::min<int64_t>(K, nvis);
                      sc.resize(nvis);
                      std::partial_sort(
                          sc.begin(), sc.begin() + k, sc.end(), [](const auto& x, const auto& y) {
                            return x.first > y.first || (x.first == y.first && x.second < y.second);
                          });
                      for (int64_t j = 0; j < k; ++j) sel_flat[t * K + j] = sc[j].second;
                    });
          }
        }
        if (tracer != nullptr) {
          TraceF(pfx + "index_scores", all_scores.data(), all_scores.size());
          TraceI(pfx + "attn.indexer.selected", sel_flat.data(), sel_flat.size());
        }
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t j = 0; j < K; ++j) {
            if (sel_flat[t * K + j] >= 0) selected[t].push_back(sel_flat[t * K + j]);
          }
        }
        if (dbg != nullptr) dbg->indexer_rows = selected[T - 1];
      }
      Compress(aw.compressor, xn, b, bi.state_comp, bi.paged_kv, false, bi.freqs,
               pfx + "attn.compressor.rows");
    }

    // Compressed keys, decoded once per chunk per sequence into `comp`: HCA every row visible
    // to the sequence's last query (rows first_comp[s] + r), CSA the union of its query rows'
    // selections (row r at comp_of[s][r]).
    std::vector<float> comp;
    std::vector<int64_t> first_comp(b.seqs.size());
    std::vector<std::vector<int64_t>> comp_of(b.seqs.size());
    if (m > 0) {
      std::vector<std::pair<int32_t, int64_t>> need;
      for (int32_t si = 0; si < static_cast<int32_t>(b.seqs.size()); ++si) {
        const SeqCtx& s = b.seqs[si];
        const int64_t nrows = (s.p0 + s.T) / m;
        if (aw.has_indexer) {
          comp_of[si].assign(nrows, -1);
          for (int64_t t = s.row0; t < s.row0 + s.T; ++t) {
            for (int32_t r : selected[t]) {
              CHECK_LT(r, nrows);
              if (comp_of[si][r] < 0) {
                comp_of[si][r] = static_cast<int64_t>(need.size());
                need.push_back({si, r});
              }
            }
          }
        } else {
          first_comp[si] = static_cast<int64_t>(need.size());
          for (int64_t r = 0; r < nrows; ++r) need.push_back({si, r});
        }
      }
      comp.resize(need.size() * d);
      DecodeRows(b, bi.paged_kv, kv_codec, m, need, comp.data());
    }

    // attention: each row over its own sequence's window (this chunk's rows + the ring) and
    // compressed rows. The key lists are built per row first; the heads then run on the pool
    // as (row, head) items, so a decode step (one row) spreads its heads over the threads.
    // Each head is computed whole by one thread in one order: bitwise the same for any split.
    std::vector<std::vector<const float*>> row_keys(T);
    for (int64_t t = 0; t < T; ++t) {
      const SeqCtx& s = b.seqs[b.seq_of[t]];
      const float* ring = StateAt(s, bi.state_window);
      const float* chunk_kv = kv.data() + s.row0 * d;
      const int64_t p = b.pos[t];
      std::vector<const float*>& keys = row_keys[t];
      for (int64_t j = std::max<int64_t>(s.floor, p - W + 1); j <= p; ++j) {
        keys.push_back(j >= s.p0 ? chunk_kv + (j - s.p0) * d : ring + (j % RS) * d);
      }
      if (m > 0) {
        const int32_t si = b.seq_of[t];
        if (aw.has_indexer) {
          for (int32_t r : selected[t]) keys.push_back(comp.data() + comp_of[si][r] * d);
        } else {
          for (int64_t r = 0; r < (p + 1) / m; ++r)
            keys.push_back(comp.data() + (first_comp[si] + r) * d);
        }
      }
    }
    std::vector<float> o(T * H * d);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    ThreadPool::Default()->ParallelFor(T * H, [&](int64_t ib, int64_t ie) {
      std::vector<float> scores;
      std::vector<double> acc;
      for (int64_t i = ib; i < ie; ++i) {
        const int64_t t = i / H, h = i % H;
        float* oh = o.data() + i * d;
        SinkAttentionHead(q.data() + i * d, row_keys[t], d, scale, aw.sink[h], bf16, &scores, &acc,
                          oh);
        ApplyRope(oh + d - rd, static_cast<int>(rd), bi.freqs, b.pos[t], true);
        R(oh + d - rd, rd);
      }
    });
    TraceF(pfx + "attn.o", o.data(), o.size());

    // window ring update (after every query of the chunk read the old contents). A query at p
    // reads positions [p - W + 1, p] only, so the RS - W spare slots hold positions past the
    // committed frontier (verified drafts, MTP chain rows) without evicting a visible one.
    for (const SeqCtx& s : b.seqs) {
      float* ring_w = StateAt(s, bi.state_window);
      for (int64_t t = std::max<int64_t>(0, s.T - RS); t < s.T; ++t) {
        std::memcpy(ring_w + ((s.p0 + t) % RS) * d, kv.data() + (s.row0 + t) * d, d * 4);
      }
    }

    // grouped output projection
    const int64_t G = c.o_groups, L = c.o_lora_rank, gin = H * d / G;
    std::vector<float> z(T * G * L), og(T * gin), zg(T * L);
    for (int64_t g = 0; g < G; ++g) {
      for (int64_t t = 0; t < T; ++t) {
        std::memcpy(og.data() + t * gin, o.data() + t * H * d + g * gin, gin * 4);
      }
      WeightMatrix slice = aw.wo_a;
      slice.rows = L;
      slice.data = static_cast<const uint8_t*>(aw.wo_a.data) + g * L * aw.wo_a.cols;
      if (slice.scale != nullptr) slice.scale += (g * L / 128) * slice.scale_cols;
      if (slice.scale_f32 != nullptr) slice.scale_f32 += (g * L / 128) * slice.scale_cols;
      LinBf16(slice, og.data(), T, zg.data());
      for (int64_t t = 0; t < T; ++t) {
        std::memcpy(z.data() + t * G * L + g * L, zg.data() + t * L, L * 4);
      }
    }
    R(z.data(), z.size());
    TraceF(pfx + "attn.z", z.data(), z.size());
    Lin(aw.wo_b, z.data(), T, out, true);
    R(out, T * D);
    TraceF(pfx + "attn.out", out, T * D);
  }

  // ---------- MoE (spec §3.7) ----------
  void Swiglu(const ExpertWeights& ew, const float* x, int64_t M, const float* row_weights,
              float* y) const {
    const int64_t I = ew.w1.rows, D = ew.w2.rows;
    std::vector<float> gate(M * I), up(M * I);
    Lin(ew.w1, x, M, gate.data(), true);
    Lin(ew.w3, x, M, up.data(), true);
    R(gate.data(), gate.size());
    R(up.data(), up.size());
    SwigluGateInPlace(gate.data(), up.data(), M, I, static_cast<float>(cfg->swiglu_limit),
                      row_weights, bf16);
    Lin(ew.w2, gate.data(), M, y, true);
    R(y, M * D);
  }

  // xn: [T, hidden] (all rows of the batch) -> out [T, hidden]. Tokens are grouped by routed
  // expert over the whole batch, so each expert's weights are read once per step with M = the
  // tokens routed to it; every token still sums its experts in expert-id order, so its result
  // does not depend on the other tokens.
  void Moe(const BlockWeights& bw, const std::string& pfx, const float* xn, int64_t T,
           std::span<const int32_t> route_tokens, float* out, BlockDebug* dbg) const {
    const Config& c = *cfg;
    const MoeWeights& mw = bw.ffn;
    const int64_t D = c.hidden_size, E = c.n_routed_experts, K = c.n_active_experts;
    std::vector<float> logits(T * E);
    Lin(mw.gate, xn, T, logits.data(), false);
    for (auto& l : logits) {
      const float sp = l > 20.f ? l : std::log1p(std::exp(l));
      l = std::sqrt(sp);
    }
    TraceF(pfx + "ffn.scores", logits.data(), logits.size());
    std::vector<int32_t> idx(T * K);
    std::vector<float> wts(T * K);
    for (int64_t t = 0; t < T; ++t) {
      const float* sc = logits.data() + t * E;
      if (mw.hash) {
        for (int64_t j = 0; j < K; ++j) idx[t * K + j] = mw.tid2eid[route_tokens[t] * K + j];
      } else {
        TopKBiasedExperts(sc, mw.bias.data(), E, K, idx.data() + t * K);
      }
    }
    TraceI(pfx + "ffn.experts", idx.data(), idx.size());
    for (int64_t t = 0; t < T; ++t) {
      const float* sc = logits.data() + t * E;
      float sum = 0;
      for (int64_t j = 0; j < K; ++j) sum += sc[idx[t * K + j]];
      for (int64_t j = 0; j < K; ++j) {
        wts[t * K + j] = sc[idx[t * K + j]] / sum * static_cast<float>(c.route_scale);
      }
    }
    TraceF(pfx + "ffn.expert_weights", wts.data(), wts.size());
    if (dbg != nullptr) {
      dbg->experts.assign(idx.end() - K, idx.end());
      dbg->expert_weights.assign(wts.end() - K, wts.end());
    }
    // Group tokens by expert; accumulate in expert-id order (as the reference loop does).
    std::vector<float> y(T * D);
    RunRoutedExperts(
        xn, T, D, E, K, idx.data(), wts.data(),
        [&](int64_t e, const float* xg, int64_t M, const float* rw, float* yg) {
          Swiglu(mw.experts[e], xg, M, rw, yg);
        },
        y.data(), ThreadPool::Default());
    std::vector<float> sh(T * D);
    Swiglu(mw.shared, xn, T, nullptr, sh.data());
    for (int64_t i = 0; i < T * D; ++i) out[i] = R1(y[i] + sh[i]);
    TraceF(pfx + "ffn.out", out, T * D);
  }

  // ---------- block (spec §3.4) ----------
  // X: [rows, hc_mult, hidden] streams of every row of the batch, updated in place.
  // route_tokens: [rows] token ids for hash routing.
  void Block(const BlockWeights& bw, const BlockInfo& bi, const std::string& pfx, float* X,
             const RowBatch& b, std::span<const int32_t> route_tokens) const {
    const Config& c = *cfg;
    const int64_t T = b.rows, n = c.hc_mult, D = c.hidden_size;
    BlockDebug* dbg = nullptr;
    if (debug != nullptr) {
      debug->emplace_back();
      dbg = &debug->back();
    }
    if (bw.ratio > 0) {
      for (const SeqCtx& s : b.seqs) {
        if (s.p0 != s.floor) continue;  // a sequence (or a replay) starts here
        ResetCompressorState(s, bi.state_comp, bw.attn.compressor);
        if (bw.attn.has_indexer) ResetCompressorState(s, bi.state_idx_comp, bw.attn.idx_compressor);
      }
    }
    TraceF(pfx + "X_in", X, T * n * D);
    std::vector<float> x(T * D), xn(T * D), y(T * D), pre(T * n), post(T * n), comb(T * n * n);
    for (int site = 0; site < 2; ++site) {
      const std::string hp = pfx + (site == 0 ? "hc_attn." : "hc_ffn.");
      HcPre(site == 0 ? bw.hc_attn : bw.hc_ffn, X, T, x.data(), pre.data(), post.data(),
            comb.data());
      TraceF(hp + "pre", pre.data(), pre.size());
      TraceF(hp + "post", post.data(), post.size());
      TraceF(hp + "comb", comb.data(), comb.size());
      TraceF(hp + "x", x.data(), x.size());
      if (site == 0) {
        RmsNorm(x.data(), bw.attn_norm, T, D, xn.data());
        TraceF(pfx + "attn_norm.out", xn.data(), xn.size());
        TraceSpan span("attention");  // `deepinfer bench --trace`, inside the layer's span
        Attention(bw, bi, pfx, xn.data(), b, y.data(), dbg);
      } else {
        RmsNorm(x.data(), bw.ffn_norm, T, D, xn.data());
        TraceF(pfx + "ffn_norm.out", xn.data(), xn.size());
        TraceSpan span("moe");
        Moe(bw, pfx, xn.data(), T, route_tokens, y.data(), dbg);
      }
      HcPost(X, y.data(), post.data(), comb.data(), T);
      TraceF(pfx + (site == 0 ? "X_mid" : "X"), X, T * n * D);
    }
    if (dbg != nullptr) {
      LastRowStreamStats(HcDimsOf(c), X, T, &dbg->stream_rms, &dbg->stream0_first8);
    }
  }
};

// ---------------------------------------------------------------------------------------------

DeepseekV4Model::~DeepseekV4Model() = default;

absl::StatusOr<std::unique_ptr<DeepseekV4Model>> DeepseekV4Model::Create(
    Config config, std::unique_ptr<Checkpoint> ckpt, const LoadOptions& options,
    KvRowStorage row_storage) {
  std::unique_ptr<DeepseekV4Model> m(new DeepseekV4Model());
  m->cfg_ = std::move(config);
  m->ckpt_ = std::move(ckpt);
  m->bf16_ = !options.fp32_activations;
  const Config& c = m->cfg_;
  if (c.o_lora_rank % 128 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(m->ckpt_->path(), "/config.json: o_lora_rank must be a multiple of 128"));
  }
  // The FP32-activation mode runs every Linear on the FP64 path, which reads the originals.
  ASSIGN_OR_RETURN(m->w_, BindWeights(c, *m->ckpt_, /*repack_experts=*/!options.fp32_activations));

  // KV layout.
  auto impl = std::make_unique<Impl>();
  impl->cfg = &m->cfg_;
  impl->layout = &m->layout_;
  impl->bf16 = m->bf16_;
  // Compact rows need BF16 RoPE values; the FP32-activation mode's are not (deepseek_v4_kv_rows.h).
  const bool compact = m->bf16_ && row_storage == KvRowStorage::kAuto;
  impl->kv_codec = {compact ? KvRowFormat::kFp8Rope : KvRowFormat::kF32, c.head_dim, c.rope_dim};
  impl->idx_codec = {compact ? KvRowFormat::kMxfp4 : KvRowFormat::kF32, c.index_head_dim, 0};
  KvLayout& L = m->layout_;
  uint64_t id = 1469598103934665603ull;
  auto mixin = [&](int64_t v) {
    id ^= static_cast<uint64_t>(v);
    id *= 1099511628211ull;
  };
  mixin(0x44535634);  // "DSV4"
  mixin(kLayoutVersion);
  mixin(static_cast<int64_t>(impl->kv_codec.format));
  mixin(static_cast<int64_t>(impl->idx_codec.format));
  for (int64_t v : {c.hidden_size, c.num_layers, c.head_dim, c.rope_dim, c.window, c.index_head_dim,
                    c.vocab_size}) {
    mixin(v);
  }
  for (int64_t r : c.compress_ratios) mixin(r);
  mixin(m->bf16_ ? 1 : 0);
  impl->blocks.resize(c.TotalBlocks());
  for (int64_t b = 0; b < c.TotalBlocks(); ++b) {
    Impl::BlockInfo& bi = impl->blocks[b];
    const int64_t r = c.Ratio(b);
    const std::string name = b < c.num_layers ? absl::StrCat("layers.", b, ".")
                                              : absl::StrCat("mtp.", b - c.num_layers, ".");
    bi.state_window = static_cast<int>(L.state.size());
    L.state.push_back({name + "window", WindowRingSlots(c.window) * c.head_dim * 4});
    if (r > 0) {
      const int64_t coff = r == 4 ? 2 : 1;
      bi.paged_kv = static_cast<int>(L.paged.size());
      L.paged.push_back({name + "compressed_kv", impl->kv_codec.RowBytes(), kBlockTokens / r});
      bi.state_comp = static_cast<int>(L.state.size());
      L.state.push_back(
          {name + "compressor", CompressorSlots(r, coff) * 2 * coff * c.head_dim * 4});
      if (r == 4) {
        bi.paged_idx = static_cast<int>(L.paged.size());
        L.paged.push_back({name + "indexer_k", impl->idx_codec.RowBytes(), kBlockTokens / r});
        bi.state_idx_comp = static_cast<int>(L.state.size());
        L.state.push_back({name + "indexer_compressor",
                           CompressorSlots(r, coff) * 2 * coff * c.index_head_dim * 4});
      }
      bi.freqs =
          RopeFrequencies(static_cast<int>(c.rope_dim), c.compress_rope_theta, c.yarn_original_len,
                          c.yarn_factor, c.yarn_beta_fast, c.yarn_beta_slow);
    } else {
      bi.freqs = RopeFrequencies(static_cast<int>(c.rope_dim), c.rope_theta, 0, 1, 0, 0);
    }
  }
  L.layout_id = id;
  L.window_tokens = c.window;
  L.frontier_rollback = true;
  m->impl_ = std::move(impl);

  FillModelInfo("DeepseekV4ForCausalLM", "deepseek_v4", c, *m->w_, &m->info_);
  return m;
}

absl::Status DeepseekV4Model::ValidateChunk(const SequenceChunk& chunk,
                                            const KvCacheView& kv) const {
  return ValidateForwardChunk("DeepSeek-V4", chunk, kv, layout_, cfg_.max_position_embeddings,
                              cfg_.vocab_size);
}

absl::Status DeepseekV4Model::Run(std::span<const SequenceChunk> chunks, const KvCacheView& kv,
                                  ForwardOutput* out, std::vector<float>* final_streams) {
  const Config& c = cfg_;
  if (chunks.empty()) return absl::InvalidArgumentError("DeepSeek-V4 forward: empty batch");
  // Validate the whole batch before anything is written.
  std::vector<int32_t> slots;
  for (const SequenceChunk& chunk : chunks) {
    RETURN_IF_ERROR(ValidateChunk(chunk, kv));
    slots.push_back(chunk.state_slot);
  }
  RETURN_IF_ERROR(CheckDistinctStateSlots("DeepSeek-V4", std::move(slots)));

  Impl& im = *impl_;
  // The hooks observe [chunk tokens, ...] arrays of one chunk; a multi-chunk batch skips them.
  const bool hooks = chunks.size() == 1;
  im.tracer = hooks ? tracer_ : nullptr;
  im.debug = hooks ? debug_ : nullptr;

  RowBatch b;
  std::vector<int32_t> tokens;
  for (const SequenceChunk& chunk : chunks) {
    SeqCtx s;
    s.p0 = chunk.start_pos;
    s.T = static_cast<int64_t>(chunk.tokens.size());
    s.row0 = b.rows;
    s.block_table = chunk.block_table;
    s.state = kv.state_base + static_cast<int64_t>(chunk.state_slot) * layout_.StateBytes();
    s.kv = &kv;
    s.floor = chunk.replay_start;
    s.keep_until = chunk.replay_until;
    for (int64_t t = 0; t < s.T; ++t) {
      b.pos.push_back(s.p0 + t);
      b.seq_of.push_back(static_cast<int32_t>(b.seqs.size()));
    }
    tokens.insert(tokens.end(), chunk.tokens.begin(), chunk.tokens.end());
    b.rows += s.T;
    b.seqs.push_back(s);
  }
  const int64_t T = b.rows, n = c.hc_mult, D = c.hidden_size;
  std::vector<float> X(T * n * D);
  ForRows(T, n * D, [&](int64_t t) {
    float* x0 = X.data() + t * n * D;
    for (int64_t k = 0; k < D; ++k) x0[k] = w_->embed.At(tokens[t], k);
    for (int64_t st = 1; st < n; ++st) std::memcpy(x0 + st * D, x0, D * 4);
  });
  for (int64_t l = 0; l < c.num_layers; ++l) {
    TraceSpan layer_span("layer");  // `deepinfer bench --trace`: one span per layer
    im.Block(w_->blocks[l], im.blocks[l], absl::StrCat("layers.", l, "."), X.data(), b, tokens);
  }
  if (im.tracer != nullptr) im.tracer->Floats("X_final", std::span<float>(X));
  std::vector<int64_t> rows;
  out->chunk_row_begin.assign(1, 0);
  for (size_t i = 0; i < chunks.size(); ++i) {
    const SeqCtx& s = b.seqs[i];
    if (chunks[i].logits == LogitsMode::kLast) {
      rows.push_back(s.row0 + s.T - 1);
    } else if (chunks[i].logits == LogitsMode::kAll) {
      for (int64_t t = 0; t < s.T; ++t) rows.push_back(s.row0 + t);
    }
    out->chunk_row_begin.push_back(static_cast<int64_t>(rows.size()));
  }
  out->logits.assign(rows.size() * c.vocab_size, 0.f);
  im.Logits(*w_, w_->hc_head, w_->norm, X.data(), rows, out->logits.data());
  if (im.tracer != nullptr && chunks[0].logits == LogitsMode::kAll) {
    im.tracer->Floats("logits", std::span<float>(out->logits));
  }
  if (final_streams != nullptr) *final_streams = std::move(X);
  return absl::OkStatus();
}

absl::Status DeepseekV4Model::ForwardChunk(const SequenceChunk& chunk, const KvCacheView& kv,
                                           std::vector<float>* logits,
                                           std::vector<float>* final_streams) {
  ForwardOutput out;
  RETURN_IF_ERROR(Run(std::span<const SequenceChunk>(&chunk, 1), kv, &out, final_streams));
  *logits = std::move(out.logits);
  return absl::OkStatus();
}

absl::Status DeepseekV4Model::Forward(const ForwardBatch& batch, const KvCacheView& kv,
                                      ForwardOutput* out) {
  out->logits.clear();
  out->chunk_row_begin.assign(1, 0);
  if (batch.chunks.empty()) return absl::OkStatus();
  absl::Status status = Run(batch.chunks, kv, out, nullptr);
  if (!status.ok()) {
    out->logits.clear();
    out->chunk_row_begin.assign(1, 0);
  }
  return status;
}

int64_t DeepseekV4Model::mtp_stream_floats() const {
  return cfg_.num_mtp_layers > 0 ? cfg_.hc_mult * cfg_.hidden_size : 0;
}

absl::Status DeepseekV4Model::ForwardWithStreams(const ForwardBatch& batch, const KvCacheView& kv,
                                                 ForwardOutput* out, std::vector<float>* streams) {
  out->logits.clear();
  out->chunk_row_begin.assign(1, 0);
  streams->clear();
  if (batch.chunks.empty()) return absl::OkStatus();
  absl::Status status = Run(batch.chunks, kv, out, streams);
  if (!status.ok()) {
    out->logits.clear();
    out->chunk_row_begin.assign(1, 0);
    streams->clear();
  }
  return status;
}

absl::Status DeepseekV4Model::MtpLastLogits(int64_t start_pos, std::span<const float> streams,
                                            std::span<const int32_t> next_tokens,
                                            int32_t state_slot, const KvCacheView& kv,
                                            std::vector<float>* logits) {
  return ForwardMtp(start_pos, streams, next_tokens, state_slot, kv, LogitsMode::kLast, logits);
}

int DeepseekV4Model::max_model_drafts() const {
  return cfg_.num_mtp_layers > 0 ? kMaxMtpDrafts : 0;
}

absl::Status DeepseekV4Model::ProposeDrafts(int64_t start_pos, std::span<const float> features,
                                            std::span<const int32_t> next_tokens,
                                            int32_t state_slot, const KvCacheView& kv,
                                            int max_drafts, DraftProposal* out) {
  out->tokens.clear();
  out->confidence.clear();
  if (max_drafts > kMaxMtpDrafts) {
    return absl::InvalidArgumentError(absl::StrCat("DeepSeek-V4 MTP: at most ", kMaxMtpDrafts,
                                                   " drafts per step, asked for ", max_drafts));
  }
  // First pass (spec §2.4 step 1): the committed rows; overwrites any provisional ring entries
  // an earlier chain wrote at these positions.
  std::vector<float> logits, g;
  RETURN_IF_ERROR(RunMtp(start_pos, features, next_tokens, state_slot, kv,
                         max_drafts > 0 ? LogitsMode::kLast : LogitsMode::kNone, &logits,
                         max_drafts > 1 ? &g : nullptr));
  const int64_t V = cfg_.vocab_size, n = cfg_.hc_mult * cfg_.hidden_size;
  int64_t pos = start_pos + static_cast<int64_t>(next_tokens.size()) - 1;
  for (int j = 0; j < max_drafts; ++j) {
    if (j > 0) {
      // Chain (step 2): one row pairing the previous row's MTP block output G with the
      // previous draft, at the next position; it writes a provisional ring entry past the
      // committed frontier, which the next step's first pass overwrites (ring of W + 6 slots).
      ++pos;
      const int32_t prev = out->tokens.back();
      std::vector<float> last(g.end() - n, g.end());
      RETURN_IF_ERROR(RunMtp(pos, last, std::span<const int32_t>(&prev, 1), state_slot, kv,
                             LogitsMode::kLast, &logits, j + 1 < max_drafts ? &g : nullptr));
    }
    const int64_t best = std::max_element(logits.begin(), logits.begin() + V) - logits.begin();
    double z = 0;  // softmax probability of the argmax = 1 / sum exp(l - l_max)
    for (int64_t v = 0; v < V; ++v) z += std::exp(static_cast<double>(logits[v] - logits[best]));
    out->tokens.push_back(static_cast<int32_t>(best));
    out->confidence.push_back(static_cast<float>(1.0 / z));
    // Step 3: nothing follows an end-of-sequence draft; the context bounds the positions.
    const auto& eos = cfg_.eos_token_ids;
    if (std::find(eos.begin(), eos.end(), static_cast<int32_t>(best)) != eos.end()) break;
    if (pos + 2 > cfg_.max_position_embeddings) break;
  }
  return absl::OkStatus();
}

absl::Status DeepseekV4Model::ForwardMtp(int64_t start_pos, std::span<const float> main_streams,
                                         std::span<const int32_t> next_tokens, int32_t state_slot,
                                         const KvCacheView& kv, LogitsMode mode,
                                         std::vector<float>* logits) {
  return RunMtp(start_pos, main_streams, next_tokens, state_slot, kv, mode, logits, nullptr);
}

absl::Status DeepseekV4Model::RunMtp(int64_t start_pos, std::span<const float> main_streams,
                                     std::span<const int32_t> next_tokens, int32_t state_slot,
                                     const KvCacheView& kv, LogitsMode mode,
                                     std::vector<float>* logits, std::vector<float>* block_out) {
  const Config& c = cfg_;
  if (c.num_mtp_layers < 1) {
    return absl::FailedPreconditionError("DeepSeek-V4: this checkpoint has no MTP block");
  }
  const int64_t T = static_cast<int64_t>(next_tokens.size()), n = c.hc_mult, D = c.hidden_size;
  if (T == 0 || static_cast<int64_t>(main_streams.size()) != T * n * D) {
    return absl::InvalidArgumentError("DeepSeek-V4 MTP: main_streams must be [T, hc_mult, hidden]");
  }
  if (state_slot < 0 || state_slot >= kv.num_state_slots) {
    return absl::InvalidArgumentError(absl::StrCat("DeepSeek-V4 MTP: bad state slot ", state_slot));
  }
  if (start_pos < 0 || start_pos + T > c.max_position_embeddings) {
    return absl::InvalidArgumentError("DeepSeek-V4 MTP: positions beyond max_position_embeddings");
  }
  for (int32_t tok : next_tokens) {
    if (tok < 0 || tok >= c.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("DeepSeek-V4 MTP: token id ", tok, " outside vocabulary"));
    }
  }
  Impl& im = *impl_;
  im.tracer = tracer_;
  im.debug = debug_;
  const MtpWeights& mw = w_->mtp[0];
  RowBatch b;
  SeqCtx s;
  s.p0 = start_pos;
  s.T = T;
  s.state = kv.state_base + static_cast<int64_t>(state_slot) * layout_.StateBytes();
  s.kv = &kv;
  b.seqs.push_back(s);
  b.rows = T;
  for (int64_t t = 0; t < T; ++t) {
    b.pos.push_back(start_pos + t);
    b.seq_of.push_back(0);
  }
  std::vector<float> e(T * D), en(T * D), ep(T * D), xh(T * n * D), hp(T * n * D);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < D; ++k) e[t * D + k] = w_->embed.At(next_tokens[t], k);
  }
  im.RmsNorm(e.data(), mw.enorm, T, D, en.data());
  im.Lin(mw.e_proj, en.data(), T, ep.data(), true);
  im.R(ep.data(), ep.size());
  im.RmsNorm(main_streams.data(), mw.hnorm, T * n, D, xh.data());
  im.Lin(mw.h_proj, xh.data(), T * n, hp.data(), true);
  im.R(hp.data(), hp.size());
  std::vector<float> X(T * n * D);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t st = 0; st < n; ++st) {
      for (int64_t k = 0; k < D; ++k) {
        X[(t * n + st) * D + k] = im.R1(ep[t * D + k] + hp[(t * n + st) * D + k]);
      }
    }
  }
  const int64_t blk = c.num_layers;
  im.Block(mw.block, im.blocks[blk], "mtp.0.", X.data(), b, next_tokens);
  std::vector<int64_t> rows;
  if (mode == LogitsMode::kLast) {
    rows.push_back(T - 1);
  } else if (mode == LogitsMode::kAll) {
    for (int64_t t = 0; t < T; ++t) rows.push_back(t);
  }
  logits->assign(rows.size() * c.vocab_size, 0.f);
  im.Logits(*w_, mw.hc_head, mw.norm, X.data(), rows, logits->data());
  if (tracer_ != nullptr && mode == LogitsMode::kAll) {
    tracer_->Floats("mtp.0.logits", std::span<float>(*logits));
  }
  if (block_out != nullptr) *block_out = std::move(X);
  return absl::OkStatus();
}

}  // namespace dsv4

absl::StatusOr<std::unique_ptr<CausalLM>> LoadDeepseekV4(const std::string& dir,
                                                         const LoadOptions& options) {
  ASSIGN_OR_RETURN(std::string config_text, dsv4::ReadConfigJson(dir));
  ASSIGN_OR_RETURN(dsv4::Config config, dsv4::Config::Parse(config_text, dir + "/config.json"));
  CheckpointOptions copts;
  ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(dir, copts));
  const int64_t mtp_layers = config.num_mtp_layers;
  ASSIGN_OR_RETURN(std::unique_ptr<dsv4::DeepseekV4Model> m,
                   dsv4::DeepseekV4Model::Create(std::move(config), std::move(ckpt), options));
  if (mtp_layers > 1) {
    LOG(INFO) << "DeepSeek-V4: " << mtp_layers
              << " MTP modules; speculative drafting chains mtp.0 on its own output (the "
                 "others are loaded, with their window state, and not used)";
  }
  return std::unique_ptr<CausalLM>(std::move(m));
}

}  // namespace deepinfer::model
