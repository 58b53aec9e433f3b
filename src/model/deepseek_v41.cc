#include "model/deepseek_v41.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/config.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/step_trace.h"
#include "common/thread_pool.h"
#include "kernels/linear_fp8_blocks.h"
#include "kernels/workspace.h"
#include "model/deepseek_v41_formats.h"
#include "model/deepseek_v4_chunk_check.h"
#include "model/deepseek_v4_forward_hooks.h"
#include "model/deepseek_v4_loading.h"
#include "model/deepseek_v4_mhc.h"
#include "model/deepseek_v4_moe.h"
#include "model/deepseek_v4_numerics.h"
#include "model/deepseek_v4_rows.h"
#include "model/deepseek_v4_softmax.h"

namespace deepinfer::model {
namespace dsv41 {
namespace {

using dsv4::ApplyRope;
using dsv4::CheckDistinctStateSlots;
using dsv4::E4M3ToF32;
using dsv4::ForRows;
using dsv4::IndexerScoreF64;
using dsv4::RopeFrequencies;
using dsv4::Sigmoid;
using dsv4::ValidateForwardChunk;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Top `k` of (score, id) pairs with finite score: largest first, ties to the lower id.
std::vector<int32_t> TopFinite(std::vector<std::pair<float, int32_t>> sc, int64_t k) {
  sc.erase(std::remove_if(sc.begin(), sc.end(), [](const auto& p) { return !(p.first > kNegInf); }),
           sc.end());
  k = std::min<int64_t>(k, static_cast<int64_t>(sc.size()));
  std::partial_sort(sc.begin(), sc.begin() + k, sc.end(), [](const auto& x, const auto& y) {
    return x.first > y.first || (x.first == y.first && x.second < y.second);
  });
  std::vector<int32_t> ids;
  for (int64_t j = 0; j < k; ++j) ids.push_back(sc[j].second);
  return ids;
}

// One chunk in flight.
struct Seq {
  int64_t p0 = 0, T = 0;
  std::span<const int32_t> tokens;
  std::vector<uint8_t> image;  // [T] image-token flags
  std::span<const int32_t> block_table;
  uint8_t* state = nullptr;
  const KvCacheView* kv = nullptr;
  int64_t floor = 0;        // replay_start: window floor
  int64_t keep_until = 0;   // replay_until: cached rows below it are not rewritten
  int64_t prefill_end = 0;  // SequenceChunk::prefill_end (compact truncation)
  // DSpark draft block (§5): keys = context ring positions [max(0, p0 - window), p0) plus every
  // row of the chunk (non-causal); the chunk's KV is not written to any ring.
  bool draft = false;
  int64_t Pos(int64_t t) const { return p0 + t; }
};

// Per-chunk cross-layer values: selections of index sources and the candidate mask.
struct ChunkShared {
  std::vector<std::vector<std::vector<int32_t>>> selected;  // [block][t] ascending row ids
  std::vector<std::vector<uint8_t>> candidates;             // [t][rows_end] (candidate source)
  bool has_candidates = false;
};

// The rows of one forward: every chunk's tokens concatenated in batch order. Token-wise work
// (embedding, Engram's projection, mHC, norms, every linear, the router and the experts) runs
// once over all rows, so a step reads each weight once whatever the number of sequences; only
// attention, the compressor and the indexer (positions, rings, paged rows, selections) loop over
// `seqs`. Every row's arithmetic is independent of the other rows (the linear kernels are
// row-invariant and nothing reduces across rows), so a sequence's logits do not depend on its
// batch. No sequence has zero rows.
struct Batch {
  std::vector<Seq> seqs;
  std::vector<ChunkShared> sh;  // per sequence
  int64_t rows = 0;
  std::vector<int64_t> off;     // [seqs + 1]: rows of seqs[i] are [off[i], off[i + 1])
  std::vector<int64_t> pos;     // [rows] absolute position
  std::vector<int32_t> seq_of;  // [rows] index into seqs
  std::vector<int32_t> tok;     // [rows] token id
  std::vector<uint8_t> image;   // [rows] image-token flags
  // Recomputes the row maps from `seqs`.
  void MapRows() {
    off.assign(1, 0);
    pos.clear();
    seq_of.clear();
    tok.clear();
    image.clear();
    for (size_t i = 0; i < seqs.size(); ++i) {
      const Seq& s = seqs[i];
      for (int64_t t = 0; t < s.T; ++t) {
        pos.push_back(s.Pos(t));
        seq_of.push_back(static_cast<int32_t>(i));
        tok.push_back(s.tokens[t]);
        image.push_back(s.image[t]);
      }
      off.push_back(off.back() + s.T);
    }
    rows = off.back();
  }
};

}  // namespace

struct DeepseekV41Model::Impl : dsv4::ForwardHooks {
  const Config* cfg = nullptr;
  const Weights41* w = nullptr;
  const KvLayout* layout = nullptr;
  const KvIndices* idx = nullptr;
  const EngramHasher* hasher = nullptr;
  std::vector<std::vector<double>> freqs;  // per block
  std::vector<BlockDebug41>* debug = nullptr;
  EngramHasher hasher_store;
  // Decoder-side bounded replay at prefill (§7): 0 = off ("none"), else rows kept.
  int64_t truncate_keep = 0;
  // Forward writes the DSpark context rings (§5).
  bool dspark_context = false;
  // ForwardWithDraftFeatures: every chunk appends its rows' DSpark target features here.
  std::vector<float>* feature_sink = nullptr;

  // ---------- helpers ----------

  // y = x W^T. quantize: MXFP8 per-32 activation quantisation first, as the official `linear`
  // does for FP8 / FP4 weights only (§3): a weight a checkpoint stores in BF16 / F32 (accepted by
  // the FP8 binder) multiplies unquantised activations.
  // Tier B accumulates in FP64 (its goldens come from a float64 oracle).
  void Lin(const WeightMatrix& m, const float* x, int64_t M, float* y, bool quantize) const {
    if (M == 0) return;
    std::vector<float> xq;
    if (quantize && m.format != dsv4::WeightFormat::kF32 && m.format != dsv4::WeightFormat::kBf16) {
      xq.assign(x, x + M * m.cols);
      ForRows(M, m.cols, [&](int64_t r) { Mxfp8SimInPlace(xq.data() + r * m.cols, m.cols); });
      x = xq.data();
    }
    if (m.fp8_block > 0) {
      LinFp8(m, x, M, y);
    } else {
      dsv4::Linear(m, x, M, y, false, /*precise=*/!bf16);
    }
  }

  // FP8 tiles in place. Tier A: kernels::LinearFp8Blocks (bitwise the SIMD FP32 product with
  // the dequantised matrix). Tier B: each weight row decoded, then FP64 sums in dsv4::Linear's
  // precise order (4 partial sums, tail into the first, (a0 + a1) + (a2 + a3)).
  void LinFp8(const WeightMatrix& m, const float* x, int64_t M, float* y) const {
    const kernels::Fp8BlocksView v = Fp8View(m);
    const int64_t N = m.rows, K = m.cols;
    ThreadPool* pool = ThreadPool::Default();
    if (bf16) {
      kernels::LinearOptions opt;
      const size_t bytes = kernels::LinearFp8BlocksWorkspaceBytes(M, v, opt, pool);
      thread_local kernels::Workspace ws;
      kernels::LinearFp8Blocks(x, M, v, y, opt, pool, ws.Get(bytes), bytes);
      return;
    }
    pool->ParallelFor(N, [&](int64_t n0, int64_t n1) {
      std::vector<float> row(K);
      for (int64_t n = n0; n < n1; ++n) {
        kernels::DequantizeFp8BlocksRows(v, n, n + 1, row.data());
        for (int64_t r = 0; r < M; ++r) {
          const float* xr = x + r * K;
          double acc[4] = {0, 0, 0, 0};
          const int64_t k4 = K / 4 * 4;
          for (int64_t k = 0; k < k4; k += 4) {
            for (int j = 0; j < 4; ++j) acc[j] += static_cast<double>(xr[k + j]) * row[k + j];
          }
          for (int64_t k = k4; k < K; ++k) acc[0] += static_cast<double>(xr[k]) * row[k];
          y[r * N + n] = static_cast<float>((acc[0] + acc[1]) + (acc[2] + acc[3]));
        }
      }
    });
  }

  void RmsNormRow(const float* xr, const std::vector<float>& wt, int64_t dim, float* yr) const {
    dsv4::WeightedRmsNormRow(xr, wt.data(), dim, static_cast<float>(cfg->rms_eps), bf16, yr);
  }
  void RmsNorm(const float* x, const std::vector<float>& wt, int64_t rows, int64_t dim,
               float* y) const {
    ForRows(rows, 3 * dim, [&](int64_t r) { RmsNormRow(x + r * dim, wt, dim, y + r * dim); });
  }

  // ---------- cache addressing ----------
  uint8_t* StateAt(const Seq& s, int index) const { return s.state + layout->StateOffset(index); }
  // Ring row of block `b` for position `pos`.
  uint8_t* RingRow(const Seq& s, int64_t b, int64_t pos) const {
    const int64_t slot = pos % idx->ring_slots;
    if (b < idx->num_encoder_layers) {
      return StateAt(s, idx->encoder_windows) +
             (b * idx->ring_slots + slot) * idx->window_row_bytes;
    }
    return StateAt(s, idx->window[b]) + slot * idx->window_row_bytes;
  }
  // Row `row` (covering `ratio` tokens) of paged cache `index`.
  uint8_t* PagedRow(const Seq& s, int index, int64_t row, int64_t ratio) const {
    const PagedCacheSpec& spec = layout->paged[index];
    const int64_t pos = row * ratio;
    const int64_t blk = s.block_table[pos / kBlockTokens];
    return s.kv->block_base + blk * layout->BlockBytes() + layout->PagedOffset(index) +
           (row % spec.rows_per_block) * spec.row_bytes;
  }

  // ---------- mHC (§4.3) ----------
  // Coefficients from the streams X [T, n, D]: pre/post [T, n], comb [T, n, n].
  void Mixes(const HcWeights& hw, const float* X, int64_t T, float* pre, float* post,
             float* comb) const {
    dsv4::HcMixes(hw, dsv4::HcDimsOf(*cfg), X, T, pre, post, comb);
  }
  // x[t] = bf16(sum_s pre[t][s] * X[t][s]).
  void Collapse(const float* X, const float* pre, int64_t T, float* x) const {
    dsv4::HcCollapse(dsv4::HcDimsOf(*cfg), X, pre, T, bf16, x);
  }
  // X[t][j] = bf16(post[j] * y + sum_i comb[i][j] * X[t][i]).
  void HcPost(float* X, const float* y, const float* post, const float* comb, int64_t T) const {
    dsv4::HcPost(dsv4::HcDimsOf(*cfg), X, y, post, comb, T, bf16);
  }

  // ---------- Engram (§4.2) ----------
  void Engram(int64_t l, const Batch& b, float* X, BlockDebug41* dbg,
              const std::string& pfx) const {
    const Config& c = *cfg;
    const EngramWeights& g = w->blocks[l].engram;
    const int li = hasher->LayerIndex(l);
    CHECK_GE(li, 0);
    const int64_t NR = b.rows, n = c.hc_mult, D = c.hidden_size, hd = c.engram_head_dim;
    const int64_t cols = hasher->columns(), back = c.engram_max_ngram - 1;
    std::vector<int32_t> ids(NR * cols);
    std::vector<int64_t> ids64(cols);
    for (size_t si = 0; si < b.seqs.size(); ++si) {
      const Seq& s = b.seqs[si];
      const int64_t T = s.T;
      int32_t* sid = ids.data() + b.off[si] * cols;
      // Compressed ids of positions [p0 - back, p0 + T): history from the cache.
      std::vector<int32_t> cids(back + T, kEngramDead);
      for (int64_t i = 0; i < back; ++i) {
        const int64_t p = s.p0 - back + i;
        if (p < 0) continue;
        std::memcpy(&cids[i], PagedRow(s, idx->engram_cids, p, 1), 4);
      }
      for (int64_t t = 0; t < T; ++t) cids[back + t] = hasher->Cid(s.tokens[t], s.image[t]);
      for (int64_t t = 0; t < T; ++t) {
        const int64_t p = s.Pos(t);
        std::vector<int32_t> hist;
        for (int64_t k = 0; k <= std::min<int64_t>(back, p); ++k)
          hist.push_back(cids[back + t - k]);
        hasher->Hash(li, hist, ids64.data());
        for (int64_t j = 0; j < cols; ++j) sid[t * cols + j] = static_cast<int32_t>(ids64[j]);
      }
    }
    TraceI(pfx + "engram.hash_ids", ids.data(), ids.size());
    // Rows -> BF16 -> wkv.
    std::vector<float> rows(NR * cols * hd);
    for (int64_t t = 0; t < NR; ++t) {
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t id = ids[t * cols + j];
        CHECK(id >= 0 && id < g.rows) << "Engram row id " << id;
        float* dst = rows.data() + (t * cols + j) * hd;
        for (int64_t k = 0; k < hd; ++k) {
          const float sc =
              std::ldexp(1.0f, static_cast<int>(g.table_scale[id * (hd / 32) + k / 32]) - 127);
          dst[k] = R1(E4M3ToF32(g.table[id * hd + k]) * sc);
        }
      }
    }
    std::vector<float> kv(NR * (n + 1) * D);
    Lin(g.wkv, rows.data(), NR, kv.data(), true);
    R(kv.data(), kv.size());
    std::vector<float> value(NR * D), gate(NR * n);
    for (int64_t t = 0; t < NR; ++t) {
      std::memcpy(value.data() + t * D, kv.data() + (t * (n + 1) + n) * D, D * 4);
    }
    TraceF(pfx + "engram.value", value.data(), value.size());
    const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(D));
    for (int64_t t = 0; t < NR; ++t) {
      for (int64_t st = 0; st < n; ++st) {
        if (b.image[t]) {
          gate[t * n + st] = 0.f;
          continue;
        }
        const float* xs = X + (t * n + st) * D;
        const float* key = kv.data() + (t * (n + 1) + st) * D;
        const float* wv = g.w.data() + st * D;
        double dot = 0, sx = 0, sk = 0;
        for (int64_t k = 0; k < D; ++k) {
          dot += static_cast<double>(xs[k]) * wv[k] * key[k];
          sx += static_cast<double>(xs[k]) * xs[k];
          sk += static_cast<double>(key[k]) * key[k];
        }
        const float rx =
            1.0f / std::sqrt(static_cast<float>(sx / D) + static_cast<float>(c.rms_eps));
        const float rk =
            1.0f / std::sqrt(static_cast<float>(sk / D) + static_cast<float>(c.rms_eps));
        const float d = static_cast<float>(dot * rx * rk * inv_sqrt_d);
        const float sg = d > 0 ? 1.f : d < 0 ? -1.f : 0.f;
        gate[t * n + st] = Sigmoid(sg * std::sqrt(std::max(std::fabs(d), 1e-6f)));
      }
    }
    TraceF(pfx + "engram.gate", gate.data(), gate.size());
    for (int64_t t = 0; t < NR; ++t) {
      for (int64_t st = 0; st < n; ++st) {
        float* xs = X + (t * n + st) * D;
        for (int64_t k = 0; k < D; ++k) xs[k] = R1(xs[k] + gate[t * n + st] * value[t * D + k]);
      }
    }
    if (dbg != nullptr) {
      dbg->engram_hash_ids.assign(ids.end() - cols, ids.end());
      dbg->engram_gate.assign(gate.end() - n, gate.end());
    }
  }

  // ---------- CSA2 KV source (§4.5) ----------
  // Compressor + publishing: rows completed in this batch go to the paged caches (unless below
  // the sequence's keep_until). xn: attn_norm output [rows, D].
  void Publish(int64_t l, const Batch& b, const float* xn, const std::string& pfx) const {
    const Config& c = *cfg;
    const AttentionWeights41& aw = w->blocks[l].attn;
    const int64_t r = c.roles[l].ratio, d = c.head_dim, rd = c.rope_dim, ID = c.index_head_dim;
    const int64_t NR = b.rows;
    std::vector<float> latents;  // completed groups, [G, d]
    std::vector<int64_t> groups;
    std::vector<int32_t> group_seq;
    if (r == 1) {
      latents.resize(NR * d);
      std::vector<float> a(NR * d);
      Lin(aw.comp_wkv, xn, NR, a.data(), false);
      R(a.data(), a.size());
      RmsNorm(a.data(), aw.comp_norm, NR, d, latents.data());
      groups = b.pos;
      group_seq = b.seq_of;
    } else {
      std::vector<float> a_all(NR * d), g_all(NR * d);
      Lin(aw.comp_wkv, xn, NR, a_all.data(), false);
      Lin(aw.comp_wgate, xn, NR, g_all.data(), false);
      std::vector<float> pooled(d), row(d), ga(r), va(r);
      for (size_t si = 0; si < b.seqs.size(); ++si) {
        const Seq& s = b.seqs[si];
        const int64_t T = s.T;
        const float* a = a_all.data() + b.off[si] * d;
        const float* g = g_all.data() + b.off[si] * d;
        float* carry = reinterpret_cast<float*>(StateAt(s, idx->compressor[l]));  // [r-1][2][d]
        for (int64_t t = 0; t < T; ++t) {
          const int64_t p = s.Pos(t);
          if ((p + 1) % r != 0) continue;
          for (int64_t k = 0; k < d; ++k) {
            for (int64_t i = 0; i < r; ++i) {
              const int64_t q = p - r + 1 + i;  // token of the group
              if (q >= s.p0) {
                va[i] = a[(q - s.p0) * d + k];
                ga[i] = g[(q - s.p0) * d + k];
              } else {
                const float* slot = carry + (q % r) * 2 * d;
                va[i] = slot[k];
                ga[i] = slot[d + k];
              }
            }
            pooled[k] = dsv4::SoftmaxPool(ga.data(), va.data(), r);
          }
          R(pooled.data(), d);
          RmsNormRow(pooled.data(), aw.comp_norm, d, row.data());
          latents.insert(latents.end(), row.begin(), row.end());
          groups.push_back(p - r + 1);
          group_seq.push_back(static_cast<int32_t>(si));
        }
        // Pending tokens of the trailing incomplete group.
        const int64_t lp = s.Pos(T - 1);
        for (int64_t t = std::max<int64_t>(0, T - (r - 1)); t < T; ++t) {
          const int64_t p = s.Pos(t);
          if ((lp + 1) % r == 0 || p / r != lp / r) continue;
          float* slot = carry + (p % r) * 2 * d;
          std::memcpy(slot, a + t * d, d * 4);
          std::memcpy(slot + d, g + t * d, d * 4);
        }
      }
    }
    const int64_t G = static_cast<int64_t>(groups.size());
    if (G == 0) return;
    TraceF(pfx + "attn.compressor.latent", latents.data(), latents.size());
    // Index keys from the pre-RoPE latent.
    std::vector<float> keys(G * ID), rows(latents);
    Lin(aw.idx_wk, latents.data(), G, keys.data(), false);
    R(keys.data(), keys.size());
    std::vector<float> kn(G * ID);
    RmsNorm(keys.data(), aw.idx_k_norm, G, ID, kn.data());
    std::vector<uint8_t> key_bytes(G * Mxfp4RowBytes(ID)), row_bytes(G * Nvfp4RowBytes(d));
    for (int64_t i = 0; i < G; ++i) {
      float* k = kn.data() + i * ID;
      ApplyRope(k + ID - rd, static_cast<int>(rd), freqs[l], groups[i], false);
      R(k + ID - rd, rd);
      Mxfp4Quantize(k, ID, key_bytes.data() + i * Mxfp4RowBytes(ID));
      float* cr = rows.data() + i * d;
      ApplyRope(cr + d - rd, static_cast<int>(rd), freqs[l], groups[i], false);
      R(cr + d - rd, rd);
      Nvfp4Quantize(cr, d, row_bytes.data() + i * Nvfp4RowBytes(d));
    }
    TraceF(pfx + "attn.indexer.keys_new", kn.data(), kn.size());
    TraceF(pfx + "attn.compressor.rows_new", rows.data(), rows.size());
    for (int64_t i = 0; i < G; ++i) {
      const Seq& s = b.seqs[group_seq[i]];
      if (groups[i] < s.keep_until) continue;  // replay: cached row stays
      const int64_t row_id = groups[i] / r;
      // Tracing may have replaced the values (teacher forcing): re-encode them.
      if (tracer != nullptr) {
        Mxfp4Quantize(kn.data() + i * ID, ID, key_bytes.data() + i * Mxfp4RowBytes(ID));
        Nvfp4Quantize(rows.data() + i * d, d, row_bytes.data() + i * Nvfp4RowBytes(d));
      }
      std::memcpy(PagedRow(s, idx->index_k[l], row_id, r), key_bytes.data() + i * Mxfp4RowBytes(ID),
                  Mxfp4RowBytes(ID));
      std::memcpy(PagedRow(s, idx->comp_kv[l], row_id, r), row_bytes.data() + i * Nvfp4RowBytes(d),
                  Nvfp4RowBytes(d));
    }
  }

  // Indexer of an index source (§4.5): selections for every row into b.sh[seq].selected[l].
  // Projections over all rows; keys, scores and selections per sequence.
  void Index(int64_t l, Batch& b, const float* xn, const float* qr, const std::string& pfx) const {
    const Config& c = *cfg;
    const LayerRole& role = c.roles[l];
    const AttentionWeights41& aw = w->blocks[l].attn;
    const int64_t NR = b.rows, r = role.ratio, IH = c.index_n_heads, ID = c.index_head_dim,
                  rd = c.rope_dim;
    std::vector<float> qi(NR * IH * ID), wts(NR * IH);
    Lin(aw.idx_wq_b, qr, NR, qi.data(), true);
    R(qi.data(), qi.size());
    ForRows(NR, 8 * IH * ID, [&](int64_t t) {
      for (int64_t h = 0; h < IH; ++h) {
        float* qh = qi.data() + (t * IH + h) * ID;
        ApplyRope(qh + ID - rd, static_cast<int>(rd), freqs[l], b.pos[t], false);
        R(qh + ID - rd, rd);
        Mxfp4Quantize(qh, ID, nullptr);
      }
    });
    TraceF(pfx + "attn.indexer.q", qi.data(), qi.size());
    Lin(aw.idx_weights_proj, xn, NR, wts.data(), false);
    R(wts.data(), wts.size());
    const float wscale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(ID)) /
                                            std::sqrt(static_cast<double>(IH)));
    for (auto& v : wts) v = R1(v * wscale);
    TraceF(pfx + "attn.indexer.weights", wts.data(), wts.size());
    const int64_t cbs = c.candidate_block_size;
    for (size_t si = 0; si < b.seqs.size(); ++si) {
      const Seq& s = b.seqs[si];
      ChunkShared* sh = &b.sh[si];
      const int64_t T = s.T;
      const float* qs = qi.data() + b.off[si] * IH * ID;
      const float* ws = wts.data() + b.off[si] * IH;
      // Keys of the KV source: rows [0, rows_end).
      const int64_t rows_end = (s.Pos(T - 1) + 1) / r;
      std::vector<float> keys(rows_end * ID);
      ForRows(rows_end, ID, [&](int64_t k) {
        Mxfp4Decode(PagedRow(s, idx->index_k[role.kv_source], k, r), ID, keys.data() + k * ID);
      });
      std::vector<float> scores(T * rows_end);
      // (row, block of 32 keys) items, so a decode step's one row is split over the threads;
      // each score is one FP64 sum in one order whatever the split.
      constexpr int64_t kScoreBlock = 32;
      const int64_t nblk = (rows_end + kScoreBlock - 1) / kScoreBlock;
      ForRows(T * nblk, 2 * kScoreBlock * IH * ID, [&](int64_t item) {
        const int64_t t = item / nblk, k0 = (item % nblk) * kScoreBlock;
        for (int64_t k = k0; k < std::min(rows_end, k0 + kScoreBlock); ++k) {
          const double acc =
              IndexerScoreF64(qs + t * IH * ID, ws + t * IH, IH, keys.data() + k * ID, ID);
          scores[t * rows_end + k] = static_cast<float>(acc);
        }
      });
      if (tracer != nullptr) {
        std::vector<float> traced(scores);
        TraceF(pfx + "index_scores", traced.data(), traced.size());
      }
      if (role.candidate_source) {
        sh->has_candidates = true;
        sh->candidates.assign(T, std::vector<uint8_t>(rows_end, 0));
        for (int64_t t = 0; t < T; ++t) {
          const int64_t nvis = (s.Pos(t) + 1) / r;
          if (nvis == 0) continue;
          const int64_t nblocks = (nvis + cbs - 1) / cbs;
          std::vector<std::pair<float, int32_t>> bs(nblocks);
          for (int64_t k = 0; k < nblocks; ++k) {
            float mx = kNegInf;
            for (int64_t j = k * cbs; j < std::min(nvis, (k + 1) * cbs); ++j) {
              mx = std::max(mx, scores[t * rows_end + j]);
            }
            bs[k] = {mx, static_cast<int32_t>(k)};
          }
          bs[(nvis - 1) / cbs].first = std::numeric_limits<float>::infinity();
          for (int32_t k : TopFinite(bs, c.candidate_topk_blocks)) {
            for (int64_t j = k * cbs; j < std::min(rows_end, (k + 1) * cbs); ++j) {
              sh->candidates[t][j] = 1;
            }
          }
        }
      }
      const bool masked = role.candidate_masked && sh->has_candidates;
      if ((role.candidate_source || masked) && tracer != nullptr) {
        std::vector<int32_t> cand(T * rows_end);
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t k = 0; k < rows_end; ++k) cand[t * rows_end + k] = sh->candidates[t][k];
        }
        TraceI(pfx + "attn.candidates", cand.data(), cand.size());
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t k = 0; k < rows_end; ++k) sh->candidates[t][k] = cand[t * rows_end + k] != 0;
        }
      }
      auto& sel = sh->selected[l];
      sel.assign(T, {});
      std::vector<int32_t> flat(T * c.index_topk, -1);
      for (int64_t t = 0; t < T; ++t) {
        const int64_t nvis = (s.Pos(t) + 1) / r;
        std::vector<std::pair<float, int32_t>> sc(nvis);
        for (int64_t k = 0; k < nvis; ++k) {
          float v = scores[t * rows_end + k];
          if (masked && !sh->candidates[t][k]) v = kNegInf;
          sc[k] = {v, static_cast<int32_t>(k)};
        }
        std::vector<int32_t> ids = TopFinite(std::move(sc), c.index_topk);
        std::sort(ids.begin(), ids.end());
        std::copy(ids.begin(), ids.end(), flat.begin() + t * c.index_topk);
      }
      TraceI(pfx + "attn.indexer.selected", flat.data(), flat.size());
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t j = 0; j < c.index_topk; ++j) {
          if (flat[t * c.index_topk + j] >= 0) sel[t].push_back(flat[t * c.index_topk + j]);
        }
      }
    }
  }

  // ---------- attention (§4.4-4.5) ----------
  // Per-sequence inputs of the attention core, decoded once per layer.
  struct SeqAttention {
    const std::vector<std::vector<int32_t>>* selected = nullptr;  // [t] compressed rows
    std::vector<float> comp;       // decoded compressed rows, [needed, d]
    std::vector<int64_t> comp_at;  // row id -> index into comp, or -1
    std::vector<float> ring;       // window keys of positions [w0, p0), [p0 - w0, d]
    int64_t w0 = 0;
  };

  void Attention(int64_t l, Batch& b, const float* xn, float* out, const std::string& pfx,
                 BlockDebug41* dbg) const {
    const Config& c = *cfg;
    const LayerRole& role = c.roles[l];
    const AttentionWeights41& aw = w->blocks[l].attn;
    const int64_t NR = b.rows, D = c.hidden_size, H = c.num_heads, d = c.head_dim, rd = c.rope_dim;
    const int64_t W = c.window;
    std::vector<float> qa(NR * c.q_lora_rank), qr(NR * c.q_lora_rank), q(NR * H * d);
    Lin(aw.wq_a, xn, NR, qa.data(), true);
    R(qa.data(), qa.size());
    RmsNorm(qa.data(), aw.q_norm, NR, c.q_lora_rank, qr.data());
    TraceF(pfx + "attn.qr", qr.data(), qr.size());
    Lin(aw.wq_b, qr.data(), NR, q.data(), true);
    R(q.data(), q.size());
    ForRows(NR, 4 * H * rd, [&](int64_t t) {
      for (int64_t h = 0; h < H; ++h) {
        float* qh = q.data() + (t * H + h) * d;
        ApplyRope(qh + d - rd, static_cast<int>(rd), freqs[l], b.pos[t], false);
        R(qh + d - rd, rd);
      }
    });
    TraceF(pfx + "attn.q", q.data(), q.size());
    std::vector<float> kva(NR * d), kv(NR * d);
    Lin(aw.wkv, xn, NR, kva.data(), true);
    R(kva.data(), kva.size());
    RmsNorm(kva.data(), aw.kv_norm, NR, d, kv.data());
    std::vector<uint8_t> kv_bytes(NR * idx->window_row_bytes);
    for (int64_t t = 0; t < NR; ++t) {
      float* k = kv.data() + t * d;
      ApplyRope(k + d - rd, static_cast<int>(rd), freqs[l], b.pos[t], false);
      R(k + d - rd, rd);
      Mxfp8Quantize(k, d, nullptr);
    }
    TraceF(pfx + "attn.kv", kv.data(), kv.size());
    for (int64_t t = 0; t < NR; ++t) {
      // Re-encoding is exact (values are MXFP8 outputs, possibly teacher-forced ones).
      Mxfp8Quantize(kv.data() + t * d, d, kv_bytes.data() + t * idx->window_row_bytes);
    }

    // CSA2.
    if (role.ratio > 0) {
      if (role.role == Role::kFull) Publish(l, b, xn, pfx);
      if (role.role == Role::kFull || role.role == Role::kReindex) Index(l, b, xn, qr.data(), pfx);
    }
    std::vector<SeqAttention> sa(b.seqs.size());
    for (size_t si = 0; si < b.seqs.size(); ++si) {
      const Seq& s = b.seqs[si];
      ChunkShared* sh = &b.sh[si];
      SeqAttention& A = sa[si];
      const int64_t T = s.T;
      if (role.ratio > 0) {
        A.selected = &sh->selected[role.index_source];
        CHECK_EQ(static_cast<int64_t>(A.selected->size()), T) << "layer " << l;
        if (role.role == Role::kReuse && tracer != nullptr) {
          // The reused selection (and the mask it was made under), as the trace records them.
          const int64_t rows_end = (s.Pos(T - 1) + 1) / role.ratio;
          if (sh->has_candidates) {
            std::vector<int32_t> cand(T * rows_end);
            for (int64_t t = 0; t < T; ++t) {
              for (int64_t k = 0; k < rows_end; ++k) cand[t * rows_end + k] = sh->candidates[t][k];
            }
            TraceI(pfx + "attn.candidates", cand.data(), cand.size());
          }
          std::vector<int32_t> flat(T * c.index_topk, -1);
          for (int64_t t = 0; t < T; ++t) {
            std::copy((*A.selected)[t].begin(), (*A.selected)[t].end(),
                      flat.begin() + t * c.index_topk);
          }
          TraceI(pfx + "attn.indexer.selected", flat.data(), flat.size());
        }
        // Compressed rows needed by this sequence, decoded once.
        const int64_t r = role.ratio;
        const int64_t rows_end = (s.Pos(T - 1) + 1) / r;
        A.comp_at.assign(rows_end, -1);
        int64_t nneed = 0;
        for (const auto& v : *A.selected) {
          for (int32_t k : v) {
            if (A.comp_at[k] < 0) A.comp_at[k] = nneed++;
          }
        }
        A.comp.resize(nneed * d);
        for (int64_t k = 0; k < rows_end; ++k) {
          if (A.comp_at[k] >= 0) {
            Nvfp4Decode(PagedRow(s, idx->comp_kv[role.kv_source], k, r), d,
                        A.comp.data() + A.comp_at[k] * d);
          }
        }
        if (dbg != nullptr) {
          dbg->selected_rows = A.selected->back();
          if (sh->has_candidates && l >= c.candidate_source_layer) {
            dbg->candidate_positions.clear();
            for (int64_t k = 0; k < rows_end; ++k) {
              if (sh->candidates[T - 1][k])
                dbg->candidate_positions.push_back(static_cast<int32_t>(k));
            }
          }
        }
      }
      // Window keys before the chunk, decoded once.
      A.w0 = s.draft ? std::max<int64_t>(0, s.p0 - W) : std::max(s.floor, s.p0 - W + 1);
      A.ring.resize(std::max<int64_t>(0, s.p0 - A.w0) * d);
      for (int64_t p = A.w0; p < s.p0; ++p) {
        Mxfp8Decode(RingRow(s, l, p), d, A.ring.data() + (p - A.w0) * d);
      }
    }
    std::vector<float> o(NR * H * d);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    // Key lists per row, then the heads on the pool as (row, head) items, so a decode step's
    // heads spread over the threads; each head is computed whole by one thread in one order.
    std::vector<std::vector<const float*>> row_keys(NR);
    for (int64_t row = 0; row < NR; ++row) {
      const int32_t si = b.seq_of[row];
      const Seq& s = b.seqs[si];
      const SeqAttention& A = sa[si];
      const float* skv = kv.data() + b.off[si] * d;  // this sequence's rows
      const int64_t t = row - b.off[si], p = b.pos[row], w0 = A.w0;
      std::vector<const float*>& keys = row_keys[row];
      if (s.draft) {
        // Context ring (positions < p0) then every block row, bidirectionally.
        for (int64_t j = w0; j < s.p0; ++j) keys.push_back(A.ring.data() + (j - w0) * d);
        for (int64_t j = 0; j < s.T; ++j) keys.push_back(skv + j * d);
      } else {
        for (int64_t j = std::max(s.floor, p - W + 1); j <= p; ++j) {
          keys.push_back(j >= s.p0 ? skv + (j - s.p0) * d : A.ring.data() + (j - w0) * d);
        }
      }
      if (A.selected != nullptr) {
        for (int32_t k : (*A.selected)[t]) keys.push_back(A.comp.data() + A.comp_at[k] * d);
      }
    }
    ThreadPool::Default()->ParallelFor(NR * H, [&](int64_t ib, int64_t ie) {
      std::vector<float> sc;
      std::vector<double> acc;
      for (int64_t i = ib; i < ie; ++i) {
        const int64_t row = i / H, h = i % H;
        float* oh = o.data() + i * d;
        dsv4::SinkAttentionHead(q.data() + i * d, row_keys[row], d, scale, aw.sink[h], bf16, &sc,
                                &acc, oh);
        ApplyRope(oh + d - rd, static_cast<int>(rd), freqs[l], b.pos[row], true);
        R(oh + d - rd, rd);
      }
    });
    TraceF(pfx + "attn.o", o.data(), o.size());
    // Window ring update after every query read the old contents (draft blocks are not cached).
    for (size_t si = 0; si < b.seqs.size(); ++si) {
      const Seq& s = b.seqs[si];
      const int64_t T = s.T;
      for (int64_t t = s.draft ? T : std::max<int64_t>(0, T - idx->ring_slots); t < T; ++t) {
        std::memcpy(RingRow(s, l, s.Pos(t)),
                    kv_bytes.data() + (b.off[si] + t) * idx->window_row_bytes,
                    idx->window_row_bytes);
      }
    }
    // Grouped wo_a (BF16 einsum, no activation quantisation) then wo_b.
    const int64_t G = c.o_groups, L = c.o_lora_rank, gin = H * d / G;
    std::vector<float> z(NR * G * L), og(NR * gin), zg(NR * L);
    for (int64_t g = 0; g < G; ++g) {
      for (int64_t t = 0; t < NR; ++t) {
        std::memcpy(og.data() + t * gin, o.data() + t * H * d + g * gin, gin * 4);
      }
      WeightMatrix slice = aw.wo_a;
      if (aw.wo_a.fp8_block > 0) {
        slice = Fp8SliceRows(aw.wo_a, g * L, L);  // L % fp8_block == 0 (checked at load)
      } else {
        CHECK(aw.wo_a.format == dsv4::WeightFormat::kF32);
        slice.rows = L;
        slice.data = static_cast<const float*>(aw.wo_a.data) + g * L * aw.wo_a.cols;
      }
      Lin(slice, og.data(), NR, zg.data(), false);
      for (int64_t t = 0; t < NR; ++t) {
        std::memcpy(z.data() + t * G * L + g * L, zg.data() + t * L, L * 4);
      }
    }
    R(z.data(), z.size());
    TraceF(pfx + "attn.z", z.data(), z.size());
    Lin(aw.wo_b, z.data(), NR, out, true);
    R(out, NR * D);
    TraceF(pfx + "attn.out", out, NR * D);
  }

  // ---------- MoE (§4.6) ----------
  void Swiglu(const ExpertWeights41& ew, const float* x, int64_t M, const float* rw,
              float* y) const {
    const int64_t I = ew.w1.rows, D = ew.w2.rows;
    std::vector<float> gate(M * I), up(M * I);
    Lin(ew.w1, x, M, gate.data(), true);
    Lin(ew.w3, x, M, up.data(), true);
    R(gate.data(), gate.size());
    R(up.data(), up.size());
    dsv4::SwigluGateInPlace(gate.data(), up.data(), M, I, static_cast<float>(cfg->swiglu_limit), rw,
                            bf16);
    Lin(ew.w2, gate.data(), M, y, true);
    R(y, M * D);
  }

  void Moe(int64_t l, const Batch& b, const float* xn, bool dspark, float* out,
           const std::string& pfx, BlockDebug41* dbg) const {
    const Config& c = *cfg;
    const MoeWeights41& mw = w->blocks[l].ffn;
    const int64_t NR = b.rows, D = c.hidden_size, E = mw.gate.rows, K = mw.top_k;
    std::vector<float> sc(NR * E);
    Lin(mw.gate, xn, NR, sc.data(), false);
    for (auto& v : sc) {
      const float x = v / static_cast<float>(c.gate_temp);
      const float sp = x > 20.f ? x : std::log1p(std::exp(x));
      v = std::sqrt(sp);
    }
    TraceF(pfx + "ffn.scores", sc.data(), sc.size());
    std::vector<int32_t> ids(NR * K);
    for (int64_t t = 0; t < NR; ++t) {
      const std::vector<float>& bias = (!dspark && b.image[t]) ? mw.bias_vl : mw.bias;
      dsv4::TopKBiasedExperts(sc.data() + t * E, bias.data(), E, K, ids.data() + t * K);
    }
    TraceI(pfx + "ffn.experts", ids.data(), ids.size());
    std::vector<float> wts(NR * K);
    for (int64_t t = 0; t < NR; ++t) {
      float sum = 0;
      for (int64_t j = 0; j < K; ++j) sum += sc[t * E + ids[t * K + j]];
      for (int64_t j = 0; j < K; ++j) {
        const float v = sc[t * E + ids[t * K + j]];
        wts[t * K + j] = (K > 1 ? v / (sum + 1e-20f) : v) * static_cast<float>(c.route_scale);
      }
    }
    TraceF(pfx + "ffn.expert_weights", wts.data(), wts.size());
    if (dbg != nullptr) {
      dbg->experts.assign(ids.end() - K, ids.end());
      dbg->expert_weights.assign(wts.end() - K, wts.end());
    }
    // Each expert once over every row of the batch routed to it.
    std::vector<float> y(NR * D);
    dsv4::RunRoutedExperts(
        xn, NR, D, E, K, ids.data(), wts.data(),
        [&](int64_t e, const float* xg, int64_t M, const float* rw, float* yg) {
          Swiglu(mw.experts[e], xg, M, rw, yg);
        },
        y.data(), ThreadPool::Default());
    std::vector<float> shv(NR * D);
    Swiglu(mw.shared, xn, NR, nullptr, shv.data());
    for (int64_t i = 0; i < NR * D; ++i) out[i] = R1(y[i] + shv[i]);
    TraceF(pfx + "ffn.out", out, NR * D);
  }

  // ---------- block (§4.3) ----------
  // X: [rows, n, D] streams; pre_mix: [rows, n] carried collapse coefficients (updated);
  // features: [rows, targets, D] DSpark target features (written at target layers) or null.
  void Block(int64_t l, Batch& b, float* X, float* pre_mix, std::vector<float>* features) const {
    const Config& c = *cfg;
    const int64_t T = b.rows, n = c.hc_mult, D = c.hidden_size;
    const bool dspark = l >= c.num_layers;
    const std::string pfx =
        dspark ? absl::StrCat("mtp.", l - c.num_layers, ".") : absl::StrCat("layers.", l, ".");
    BlockDebug41* dbg = nullptr;
    if (debug != nullptr) {
      debug->emplace_back();
      dbg = &debug->back();
    }
    if (c.roles[l].engram) Engram(l, b, X, dbg, pfx);
    TraceF(pfx + "X_in", X, T * n * D);
    TraceF(pfx + "pre_mix_in", pre_mix, T * n);
    if (features != nullptr) {
      // DSpark target features (§5): bf16(mean over the streams entering the layer).
      const int64_t nt = static_cast<int64_t>(c.dspark_target_layers.size());
      for (int64_t k = 0; k < nt; ++k) {
        if (c.dspark_target_layers[k] != l) continue;
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t j = 0; j < D; ++j) {
            double acc = 0;
            for (int64_t st = 0; st < n; ++st) acc += X[(t * n + st) * D + j];
            (*features)[(t * nt + k) * D + j] = R1(static_cast<float>(acc / n));
          }
        }
      }
    }
    std::vector<float> x(T * D), xn(T * D), y(T * D), apre(T * n), apost(T * n), acomb(T * n * n);
    Mixes(w->blocks[l].hc_attn, X, T, apre.data(), apost.data(), acomb.data());
    TraceF(pfx + "hc_attn.pre", apre.data(), apre.size());
    TraceF(pfx + "hc_attn.post", apost.data(), apost.size());
    TraceF(pfx + "hc_attn.comb", acomb.data(), acomb.size());
    Collapse(X, pre_mix, T, x.data());
    RmsNorm(x.data(), w->blocks[l].attn_norm, T, D, xn.data());
    TraceF(pfx + "attn_norm.out", xn.data(), xn.size());
    {
      TraceSpan span("attention");  // `deepinfer bench --trace`, inside the layer's span
      Attention(l, b, xn.data(), y.data(), pfx, dbg);
    }
    HcPost(X, y.data(), apost.data(), acomb.data(), T);
    TraceF(pfx + "X_mid", X, T * n * D);
    std::vector<float> fpre(T * n), fpost(T * n), fcomb(T * n * n);
    Mixes(w->blocks[l].hc_ffn, X, T, fpre.data(), fpost.data(), fcomb.data());
    TraceF(pfx + "hc_ffn.pre", fpre.data(), fpre.size());
    TraceF(pfx + "hc_ffn.post", fpost.data(), fpost.size());
    TraceF(pfx + "hc_ffn.comb", fcomb.data(), fcomb.size());
    Collapse(X, apre.data(), T, x.data());
    RmsNorm(x.data(), w->blocks[l].ffn_norm, T, D, xn.data());
    TraceF(pfx + "ffn_norm.out", xn.data(), xn.size());
    {
      TraceSpan span("moe");
      Moe(l, b, xn.data(), dspark, y.data(), pfx, dbg);
    }
    HcPost(X, y.data(), fpost.data(), fcomb.data(), T);
    TraceF(pfx + "X", X, T * n * D);
    std::memcpy(pre_mix, fpre.data(), T * n * 4);
    if (dbg != nullptr) {
      dsv4::LastRowStreamStats(dsv4::HcDimsOf(c), X, T, &dbg->stream_rms, &dbg->stream0_first8);
    }
  }

  // ---------- DSpark (§5; speculative.md §3) ----------
  // main_x for `M` feature rows [M, targets*D] -> [M, D].
  void DsparkMainX(const float* features, int64_t M, float* main_x) const {
    const Config& c = *cfg;
    const int64_t D = c.hidden_size;
    std::vector<float> a(M * D);
    Lin(w->dspark.main_proj, features, M, a.data(), true);
    R(a.data(), a.size());
    RmsNorm(a.data(), w->dspark.main_norm, M, D, main_x);
  }

  // Context KV of the last min(T, ring_slots) rows of the chunk (features [T, targets*D]) into
  // every stage's ring.
  void WriteDsparkContext(const Seq& s, const float* features) const {
    const Config& c = *cfg;
    const int64_t D = c.hidden_size, d = c.head_dim, rd = c.rope_dim;
    const int64_t nt = static_cast<int64_t>(c.dspark_target_layers.size());
    const int64_t t0 = std::max<int64_t>(0, s.T - idx->ring_slots), M = s.T - t0;
    std::vector<float> main_x(M * D), kva(M * d), kv(M * d);
    DsparkMainX(features + t0 * nt * D, M, main_x.data());
    for (int64_t l = c.num_layers; l < c.TotalBlocks(); ++l) {
      const AttentionWeights41& aw = w->blocks[l].attn;
      Lin(aw.wkv, main_x.data(), M, kva.data(), true);
      R(kva.data(), kva.size());
      RmsNorm(kva.data(), aw.kv_norm, M, d, kv.data());
      for (int64_t i = 0; i < M; ++i) {
        float* k = kv.data() + i * d;
        const int64_t pos = s.Pos(t0 + i);
        ApplyRope(k + d - rd, static_cast<int>(rd), freqs[l], pos, false);
        R(k + d - rd, rd);
        Mxfp8Quantize(k, d, RingRow(s, l, pos));
      }
    }
  }

  // One draft block (DeepseekV41Model::DsparkDraft). `s` carries the state slot only.
  void Draft(Seq s, const DsparkRequest& req, const DraftSampler& sample,
             DsparkDraftResult* out) const {
    const Config& c = *cfg;
    const int64_t B = c.dspark_block_size, n = c.hc_mult, D = c.hidden_size, V = c.vocab_size;
    const int64_t rank = c.dspark_markov_rank;
    std::vector<int32_t> ids(B, static_cast<int32_t>(c.dspark_noise_token_id));
    ids[0] = req.token;
    s.p0 = req.position + 1;
    s.T = B;
    s.tokens = ids;
    s.image.assign(B, 0);
    s.floor = 0;
    s.keep_until = 0;
    s.draft = true;
    std::vector<float> X(B * n * D), pre_mix(B * n, 0.f);
    for (int64_t t = 0; t < B; ++t) {
      float* x0 = X.data() + t * n * D;
      for (int64_t k = 0; k < D; ++k) x0[k] = w->embed.At(ids[t], k);
      for (int64_t st = 1; st < n; ++st) std::memcpy(x0 + st * D, x0, D * 4);
      pre_mix[t * n] = 1.f;
    }
    Batch db;
    db.seqs.push_back(s);
    db.sh.resize(1);
    db.sh[0].selected.resize(c.TotalBlocks());
    db.MapRows();
    for (int64_t l = c.num_layers; l < c.TotalBlocks(); ++l) {
      Block(l, db, X.data(), pre_mix.data(), nullptr);
    }
    // h = bf16(sum pre_mix . X) (pre-norm), base logits = head_fp32 . norm(h).
    std::vector<float> h(B * D), hn(B * D), base(B * V);
    Collapse(X.data(), pre_mix.data(), B, h.data());
    RmsNorm(h.data(), w->dspark.norm, B, D, hn.data());
    Lin(w->head, hn.data(), B, base.data(), false);
    // Sequential Markov chain and confidence head (FP32 over BF16-valued parameters).
    out->tokens.assign(B, 0);
    out->confidence_logits.assign(B, 0.f);
    out->logits.clear();
    out->base_logits.clear();
    if (req.want_logits) out->base_logits = base;
    std::vector<float> e(rank), bias(V), logit(V), cin(D + rank);
    WeightMatrix markov = w->dspark.markov_head;
    int32_t prev = req.token;
    for (int64_t i = 0; i < B; ++i) {
      for (int64_t k = 0; k < rank; ++k) e[k] = w->dspark.markov_embed.At(prev, k);
      Lin(markov, e.data(), 1, bias.data(), false);
      for (int64_t v = 0; v < V; ++v) logit[v] = base[i * V + v] + bias[v];
      std::memcpy(cin.data(), h.data() + i * D, D * 4);
      std::memcpy(cin.data() + D, e.data(), rank * 4);
      float conf = 0;
      Lin(w->dspark.confidence, cin.data(), 1, &conf, false);
      out->confidence_logits[i] = conf;
      if (req.want_logits) out->logits.insert(out->logits.end(), logit.begin(), logit.end());
      const int32_t next =
          sample
              ? sample(i, logit)
              : static_cast<int32_t>(std::max_element(logit.begin(), logit.end()) - logit.begin());
      out->tokens[i] = next;
      prev = next;
    }
  }

  // ForwardWithDraftFeatures: appends a chunk's T feature rows to feature_sink — zeros for the
  // T - kept rows compact truncation dropped (no decoder features exist there), then the kept
  // rows' features.
  void AppendDraftFeatures(int64_t T, int64_t kept, const std::vector<float>& features) const {
    const int64_t F = static_cast<int64_t>(cfg->dspark_target_layers.size()) * cfg->hidden_size;
    feature_sink->insert(feature_sink->end(), (T - kept) * F, 0.f);
    feature_sink->insert(feature_sink->end(), features.begin(), features.begin() + kept * F);
  }

  // Decoder floor of compact truncation (§7) for chunk `s`: the layers after the last KV source
  // skip rows below it and their windows start there; 0 = no truncation. With the prompt length
  // known (SequenceChunk::prefill_end) every chunk of the sequence uses prefill_end - keep, so
  // chunking and prefix hits do not change the result; otherwise a kLast chunk longer than the
  // kept rows truncates at its own end - keep. kAll chunks are never cut (their rows' logits are
  // wanted) unless they lie wholly above the floor, where the floor only bounds the windows.
  int64_t DecoderFloor(const Seq& s, LogitsMode mode) const {
    const Config& c = *cfg;
    const int64_t last_kv = c.LastKvSource();
    if (truncate_keep == 0 || last_kv < 0 || last_kv + 1 >= c.num_layers || s.draft) return 0;
    int64_t f = 0;
    if (s.prefill_end > 0) {
      f = s.prefill_end - truncate_keep;
    } else if (mode == LogitsMode::kLast && s.T > truncate_keep) {
      f = s.p0 + s.T - truncate_keep;
    }
    if (f <= 0 || f <= s.floor) return 0;
    if (mode == LogitsMode::kAll && f > s.p0) return 0;
    return f;
  }

  // Whole stack over every chunk of a forward (one Batch, rows in chunk order; modes[i] is chunk
  // i's LogitsMode): logits rows appended to out->logits, one chunk_row_begin entry per chunk.
  void RunBatch(Batch b, std::span<const LogitsMode> modes, ForwardOutput* out) const {
    const Config& c = *cfg;
    const int64_t n = c.hc_mult, D = c.hidden_size;
    const size_t S = b.seqs.size();
    // Engram history for later chunks.
    if (idx->engram_cids >= 0) {
      for (const Seq& s : b.seqs) {
        for (int64_t t = 0; t < s.T; ++t) {
          if (s.Pos(t) < s.keep_until) continue;
          const int32_t cid = hasher->Cid(s.tokens[t], s.image[t]);
          std::memcpy(PagedRow(s, idx->engram_cids, s.Pos(t), 1), &cid, 4);
        }
      }
    }
    const int64_t NR = b.rows;
    std::vector<float> X(NR * n * D), pre_mix(NR * n, 0.f);
    ForRows(NR, n * D, [&](int64_t t) {
      float* x0 = X.data() + t * n * D;
      for (int64_t k = 0; k < D; ++k) x0[k] = w->embed.At(b.tok[t], k);
      for (int64_t st = 1; st < n; ++st) std::memcpy(x0 + st * D, x0, D * 4);
      pre_mix[t * n] = 1.f;
    });
    std::vector<float> features;
    const bool write_context = dspark_context && w->has_dspark;
    const bool want_features = (tracer != nullptr || write_context || feature_sink != nullptr) &&
                               !c.dspark_target_layers.empty();
    const int64_t F = static_cast<int64_t>(c.dspark_target_layers.size()) * D;
    if (want_features) features.assign(NR * F, 0.f);
    // Compact truncation (§7): the layers after the last KV source run only on rows at or
    // after each sequence's decoder floor, their windows starting there. Layers up to and
    // including the last KV source see every row (the decoder's block KV is a function of the
    // encoder output). live[i]: the chunk of b.seqs[i]; kept[chunk]: its rows past the floor.
    std::vector<int64_t> dec_floor(S), rows_in(S), kept(S);
    std::vector<int32_t> live(S);
    bool truncate = false;
    for (size_t i = 0; i < S; ++i) {
      dec_floor[i] = DecoderFloor(b.seqs[i], modes[i]);
      truncate = truncate || dec_floor[i] > 0;
      rows_in[i] = kept[i] = b.seqs[i].T;
      live[i] = static_cast<int32_t>(i);
    }
    const int64_t last_kv = c.LastKvSource();
    for (int64_t l = 0; l < c.num_layers; ++l) {
      if (truncate && l == last_kv + 1) {
        Batch nb;
        std::vector<float> nX, npre, nfeat;
        std::vector<int32_t> nlive;
        for (size_t i = 0; i < b.seqs.size(); ++i) {
          Seq s = b.seqs[i];
          const int64_t f = dec_floor[live[i]];
          const int64_t drop = std::clamp<int64_t>(f - s.p0, 0, s.T);
          const int64_t r0 = b.off[i] + drop, keep = s.T - drop;
          kept[live[i]] = keep;
          if (keep == 0) continue;  // the whole chunk is below the floor: no decoder work
          s.p0 += drop;
          s.T = keep;
          s.tokens = s.tokens.subspan(drop);
          s.image.erase(s.image.begin(), s.image.begin() + drop);
          s.floor = std::max(s.floor, f);
          ChunkShared sh = std::move(b.sh[i]);
          for (auto& sel : sh.selected) {
            if (!sel.empty()) sel.erase(sel.begin(), sel.begin() + drop);
          }
          if (sh.has_candidates)
            sh.candidates.erase(sh.candidates.begin(), sh.candidates.begin() + drop);
          nX.insert(nX.end(), X.begin() + r0 * n * D, X.begin() + (r0 + keep) * n * D);
          npre.insert(npre.end(), pre_mix.begin() + r0 * n, pre_mix.begin() + (r0 + keep) * n);
          if (want_features) {
            nfeat.insert(nfeat.end(), features.begin() + r0 * F,
                         features.begin() + (r0 + keep) * F);
          }
          nb.seqs.push_back(std::move(s));
          nb.sh.push_back(std::move(sh));
          nlive.push_back(live[i]);
        }
        nb.MapRows();
        b = std::move(nb);
        X = std::move(nX);
        pre_mix = std::move(npre);
        features = std::move(nfeat);
        live = std::move(nlive);
        if (b.rows == 0) break;
      }
      TraceSpan layer_span("layer");  // `deepinfer bench --trace`: one span per layer
      Block(l, b, X.data(), pre_mix.data(), want_features ? &features : nullptr);
    }
    if (want_features) TraceF("dspark.main_hidden", features.data(), features.size());
    // Where chunk i's rows are now: b.seqs[at[i]], or -1 when all were below its floor.
    std::vector<int32_t> at(S, -1);
    for (size_t i = 0; i < live.size(); ++i) at[live[i]] = static_cast<int32_t>(i);
    for (size_t ci = 0; ci < S; ++ci) {
      const int32_t i = at[ci];
      if (write_context && i >= 0) WriteDsparkContext(b.seqs[i], features.data() + b.off[i] * F);
      if (feature_sink != nullptr && want_features) {
        const std::vector<float> mine =
            i >= 0 ? std::vector<float>(features.begin() + b.off[i] * F,
                                        features.begin() + b.off[i + 1] * F)
                   : std::vector<float>();
        AppendDraftFeatures(rows_in[ci], kept[ci], mine);
      }
    }
    if (tracer != nullptr) tracer->Floats("X_final", std::span<float>(X));
    // Logits: one norm + head pass over the wanted rows of every chunk.
    std::vector<int64_t> rows, count(S, 0);
    for (size_t ci = 0; ci < S; ++ci) {
      const int32_t i = at[ci];
      if (modes[ci] == LogitsMode::kNone) continue;
      CHECK_GE(i, 0) << "chunk " << ci << " wants logits of rows below its decoder floor";
      if (modes[ci] == LogitsMode::kLast) rows.push_back(b.off[i + 1] - 1);
      if (modes[ci] == LogitsMode::kAll) {
        for (int64_t r = b.off[i]; r < b.off[i + 1]; ++r) rows.push_back(r);
      }
      count[ci] = modes[ci] == LogitsMode::kLast ? 1 : b.off[i + 1] - b.off[i];
    }
    const int64_t M = static_cast<int64_t>(rows.size());
    std::vector<float> logits(M * c.vocab_size);
    if (M > 0) {
      std::vector<float> h(M * D), hn(M * D);
      std::vector<float> pm(M * n), Xs(M * n * D);
      for (int64_t i = 0; i < M; ++i) {
        std::memcpy(pm.data() + i * n, pre_mix.data() + rows[i] * n, n * 4);
        std::memcpy(Xs.data() + i * n * D, X.data() + rows[i] * n * D, n * D * 4);
      }
      Collapse(Xs.data(), pm.data(), M, h.data());
      RmsNorm(h.data(), w->norm, M, D, hn.data());
      Lin(w->head, hn.data(), M, logits.data(), false);
      if (tracer != nullptr && S == 1 && modes[0] == LogitsMode::kAll) {
        TraceF("logits", logits.data(), logits.size());
      }
    }
    out->logits.insert(out->logits.end(), logits.begin(), logits.end());
    for (size_t ci = 0; ci < S; ++ci)
      out->chunk_row_begin.push_back(out->chunk_row_begin.back() + count[ci]);
  }
};

// ---------------------------------------------------------------------------------------------

DeepseekV41Model::~DeepseekV41Model() = default;

absl::StatusOr<std::unique_ptr<DeepseekV41Model>> DeepseekV41Model::Create(
    Config config, std::unique_ptr<Checkpoint> ckpt, EngramHasher hasher,
    const LoadOptions& options) {
  std::unique_ptr<DeepseekV41Model> m(new DeepseekV41Model());
  m->cfg_ = std::move(config);
  m->ckpt_ = std::move(ckpt);
  const Config& c = m->cfg_;
  ASSIGN_OR_RETURN(m->w_,
                   BindWeights41(c, *m->ckpt_, /*repack_experts=*/!options.fp32_activations));
  m->layout_ = BuildKvLayout41(c, options.fp32_activations, &m->kv_idx_);
  auto impl = std::make_unique<Impl>();
  impl->cfg = &m->cfg_;
  impl->w = m->w_.get();
  impl->layout = &m->layout_;
  impl->idx = &m->kv_idx_;
  impl->hasher_store = std::move(hasher);
  impl->hasher = &impl->hasher_store;
  impl->bf16 = !options.fp32_activations;
  impl->freqs.resize(c.TotalBlocks());
  for (int64_t b = 0; b < c.TotalBlocks(); ++b) {
    impl->freqs[b] = c.roles[b].ratio > 0
                         ? RopeFrequencies(static_cast<int>(c.rope_dim), c.compress_rope_theta,
                                           c.yarn_original_len, c.yarn_factor, c.yarn_beta_fast,
                                           c.yarn_beta_slow)
                         : RopeFrequencies(static_cast<int>(c.rope_dim), c.rope_theta, 0, 1, 0, 0);
  }
  m->impl_ = std::move(impl);
  const EnvConfig& env = Env();
  m->set_prefill_truncation(env.yoco_prefill_truncation_mode == "compact",
                            env.yoco_prefill_keep_tokens);
  dsv4::FillModelInfo("DeepseekV41ForCausalLM", "deepseek_v41", c, *m->w_, &m->info_);
  LOG(INFO) << "DeepSeek-V4.1: " << c.num_layers << " layers + " << c.num_dspark_layers
            << " DSpark, hidden " << c.hidden_size << ", window " << c.window << ", KV sources "
            << c.kv_source_layers.size() << ", stored state " << m->kv_idx_.stored_bytes
            << " B, state slot " << m->layout_.StateBytes() << " B, block "
            << m->layout_.BlockBytes() << " B";
  return m;
}

void DeepseekV41Model::set_prefill_truncation(bool compact, int64_t keep_tokens) {
  const int64_t min_keep = cfg_.window + kSpeculativeRollbackTokens;
  if (compact && keep_tokens < min_keep) {
    LOG(WARNING) << "DeepSeek-V4.1: DEEPINFER_YOCO_PREFILL_KEEP_TOKENS " << keep_tokens
                 << " is below window + " << kSpeculativeRollbackTokens << " = " << min_keep
                 << "; using " << min_keep;
    keep_tokens = min_keep;
  }
  impl_->truncate_keep = compact ? keep_tokens : 0;
  // Only when the decoder is actually truncated (a model without decoder replay layers ignores it).
  const int64_t last_kv = cfg_.LastKvSource();
  layout_.min_recompute_tokens =
      compact && last_kv >= 0 && last_kv + 1 < cfg_.num_layers ? keep_tokens : 0;
}

int64_t DeepseekV41Model::prefill_truncation_keep() const { return impl_->truncate_keep; }

void DeepseekV41Model::set_dspark_context(bool on) { impl_->dspark_context = on; }
bool DeepseekV41Model::dspark_context() const { return impl_->dspark_context; }

absl::Status DeepseekV41Model::DsparkDraft(std::span<const DsparkRequest> requests,
                                           const KvCacheView& kv, const DraftSampler& sample,
                                           std::vector<DsparkDraftResult>* out) {
  const Config& c = cfg_;
  if (!w_->has_dspark) {
    return absl::FailedPreconditionError(
        absl::StrCat("DeepSeek-V4.1 DSpark: ", c.source, " has no DSpark stages (mtp.*)"));
  }
  for (const DsparkRequest& r : requests) {
    if (r.state_slot < 0 || r.state_slot >= kv.num_state_slots || kv.state_base == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("DeepSeek-V4.1 DSpark: bad state slot ", r.state_slot));
    }
    if (r.position < 0 || r.position + 1 + c.dspark_block_size > c.max_position_embeddings) {
      return absl::InvalidArgumentError(
          absl::StrCat("DeepSeek-V4.1 DSpark: block positions [", r.position + 1, ", ",
                       r.position + 1 + c.dspark_block_size, ") exceed max_position_embeddings ",
                       c.max_position_embeddings));
    }
    if (r.token < 0 || r.token >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("DeepSeek-V4.1 DSpark: anchor token ", r.token,
                                                     " outside vocabulary ", c.vocab_size));
    }
  }
  out->assign(requests.size(), {});
  for (size_t i = 0; i < requests.size(); ++i) {
    Seq s;
    s.state = kv.state_base + static_cast<int64_t>(requests[i].state_slot) * layout_.StateBytes();
    s.kv = &kv;
    impl_->Draft(s, requests[i], sample, &(*out)[i]);
  }
  return absl::OkStatus();
}

int64_t DeepseekV41Model::draft_feature_floats() const {
  if (!w_->has_dspark) return 0;
  return static_cast<int64_t>(cfg_.dspark_target_layers.size()) * cfg_.hidden_size;
}

std::string_view DeepseekV41Model::draft_head() const { return w_->has_dspark ? "dspark" : ""; }

int DeepseekV41Model::max_model_drafts() const {
  return w_->has_dspark ? static_cast<int>(cfg_.dspark_block_size) : 0;
}

absl::Status DeepseekV41Model::ForwardWithDraftFeatures(const ForwardBatch& batch,
                                                        const KvCacheView& kv, ForwardOutput* out,
                                                        std::vector<float>* features) {
  if (!w_->has_dspark) {
    return absl::FailedPreconditionError(
        absl::StrCat("DeepSeek-V4.1 DSpark: ", cfg_.source, " has no DSpark stages (mtp.*)"));
  }
  features->clear();
  impl_->feature_sink = features;
  const absl::Status st = ForwardWithImages(batch, {}, kv, out);
  impl_->feature_sink = nullptr;
  if (!st.ok()) return st;
  int64_t rows = 0;
  for (const SequenceChunk& chunk : batch.chunks) rows += static_cast<int64_t>(chunk.tokens.size());
  CHECK_EQ(static_cast<int64_t>(features->size()), rows * draft_feature_floats());
  return absl::OkStatus();
}

absl::Status DeepseekV41Model::ProposeDrafts(int64_t start_pos, std::span<const float> features,
                                             std::span<const int32_t> next_tokens,
                                             int32_t state_slot, const KvCacheView& kv,
                                             int max_drafts, DraftProposal* out) {
  return ProposeDraftsImpl(start_pos, features, next_tokens, state_slot, kv, max_drafts, 0.f, {},
                           out);
}

absl::Status DeepseekV41Model::ProposeSampledDrafts(
    int64_t start_pos, std::span<const float> features, std::span<const int32_t> next_tokens,
    int32_t state_slot, const KvCacheView& kv, int max_drafts, float temperature,
    std::span<const double> uniforms, DraftProposal* out) {
  if (!(temperature > 0) || static_cast<int64_t>(uniforms.size()) <
                                std::min<int64_t>(max_drafts, cfg_.dspark_block_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeepSeek-V4.1 DSpark: sampled drafts need temperature > 0 (got ", temperature,
                     ") and one uniform per draft (got ", uniforms.size(), ")"));
  }
  return ProposeDraftsImpl(start_pos, features, next_tokens, state_slot, kv, max_drafts,
                           temperature, uniforms, out);
}

absl::Status DeepseekV41Model::ProposeDraftsImpl(int64_t start_pos, std::span<const float> features,
                                                 std::span<const int32_t> next_tokens,
                                                 int32_t state_slot, const KvCacheView& kv,
                                                 int max_drafts, float temperature,
                                                 std::span<const double> uniforms,
                                                 DraftProposal* out) {
  out->q.clear();
  out->tokens.clear();
  out->confidence.clear();
  const Config& c = cfg_;
  if (!w_->has_dspark) {
    return absl::FailedPreconditionError(
        absl::StrCat("DeepSeek-V4.1 DSpark: ", c.source, " has no DSpark stages (mtp.*)"));
  }
  const int64_t T = static_cast<int64_t>(next_tokens.size());
  const int64_t F = draft_feature_floats();
  if (static_cast<int64_t>(features.size()) != T * F) {
    return absl::InvalidArgumentError(absl::StrCat("DeepSeek-V4.1 DSpark: ", features.size(),
                                                   " feature floats for ", T, " positions of ", F));
  }
  if (state_slot < 0 || state_slot >= kv.num_state_slots || kv.state_base == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeepSeek-V4.1 DSpark: bad state slot ", state_slot));
  }
  if (start_pos < 0 || start_pos + T > c.max_position_embeddings) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeepSeek-V4.1 DSpark: positions [", start_pos, ", ", start_pos + T,
                     ") exceed max_position_embeddings ", c.max_position_embeddings));
  }
  for (int32_t t : next_tokens) {
    if (t < 0 || t >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("DeepSeek-V4.1 DSpark: next token ", t,
                                                     " outside vocabulary ", c.vocab_size));
    }
  }
  if (T == 0) return absl::OkStatus();
  Seq s;
  s.p0 = start_pos;
  s.T = T;
  s.state = kv.state_base + static_cast<int64_t>(state_slot) * layout_.StateBytes();
  s.kv = &kv;
  impl_->WriteDsparkContext(s, features.data());
  const int64_t anchor_pos = start_pos + T;  // the block covers anchor_pos .. + block - 1
  if (max_drafts <= 0 || anchor_pos + c.dspark_block_size > c.max_position_embeddings) {
    return absl::OkStatus();
  }
  DsparkRequest req;
  req.state_slot = state_slot;
  req.position = anchor_pos - 1;
  req.token = next_tokens.back();
  DsparkDraftResult r;
  Seq ds;
  ds.state = s.state;
  ds.kv = &kv;
  const int64_t n = std::min<int64_t>(max_drafts, c.dspark_block_size);
  DraftSampler sampler;
  if (temperature > 0) {
    // Slot i < n: q = softmax(logits / T) (double, then float, renormalised in double by the
    // inverse CDF); later slots (not returned) continue greedily.
    sampler = [&](int64_t i, std::span<const float> logits) -> int32_t {
      if (i >= n) {
        return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) -
                                    logits.begin());
      }
      const double mx = *std::max_element(logits.begin(), logits.end());
      std::vector<double> e(logits.size());
      double z = 0;
      for (size_t v = 0; v < logits.size(); ++v) {
        e[v] = std::exp((static_cast<double>(logits[v]) - mx) / temperature);
        z += e[v];
      }
      const size_t row = out->q.size();
      out->q.resize(row + logits.size());
      double zf = 0;
      for (size_t v = 0; v < logits.size(); ++v) {
        out->q[row + v] = static_cast<float>(e[v] / z);
        zf += out->q[row + v];
      }
      const double u = uniforms[i] * zf;
      double cdf = 0;
      int32_t last = -1;
      for (size_t v = 0; v < logits.size(); ++v) {
        if (out->q[row + v] <= 0) continue;
        last = static_cast<int32_t>(v);
        cdf += out->q[row + v];
        if (u < cdf) break;
      }
      return last;
    };
  }
  impl_->Draft(ds, req, sampler, &r);
  out->tokens.assign(r.tokens.begin(), r.tokens.begin() + n);
  for (int64_t i = 0; i < n; ++i) {
    out->confidence.push_back(
        static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(r.confidence_logits[i])))));
  }
  return absl::OkStatus();
}

absl::Status DeepseekV41Model::ValidateChunk(const SequenceChunk& chunk,
                                             const KvCacheView& kv) const {
  return ValidateForwardChunk("DeepSeek-V4.1", chunk, kv, layout_, cfg_.max_position_embeddings,
                              cfg_.vocab_size);
}

absl::Status DeepseekV41Model::Forward(const ForwardBatch& batch, const KvCacheView& kv,
                                       ForwardOutput* out) {
  return ForwardWithImages(batch, {}, kv, out);
}

absl::Status DeepseekV41Model::ForwardWithImages(const ForwardBatch& batch,
                                                 std::span<const std::vector<uint8_t>> image_masks,
                                                 const KvCacheView& kv, ForwardOutput* out) {
  out->logits.clear();
  out->chunk_row_begin.assign(1, 0);
  if (batch.chunks.empty()) return absl::OkStatus();
  if (!image_masks.empty() && image_masks.size() != batch.chunks.size()) {
    return absl::InvalidArgumentError("DeepSeek-V4.1 forward: one image mask per chunk expected");
  }
  std::vector<int32_t> slots;
  for (size_t i = 0; i < batch.chunks.size(); ++i) {
    const SequenceChunk& chunk = batch.chunks[i];
    RETURN_IF_ERROR(ValidateChunk(chunk, kv));
    slots.push_back(chunk.state_slot);
    if (image_masks.empty() || image_masks[i].empty()) continue;
    if (image_masks[i].size() != chunk.tokens.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("DeepSeek-V4.1 forward: image mask of chunk ", i, " has ",
                       image_masks[i].size(), " entries for ", chunk.tokens.size(), " tokens"));
    }
    for (size_t t = 0; t < chunk.tokens.size(); ++t) {
      if (image_masks[i][t] && chunk.tokens[t] != cfg_.image_token_id) {
        return absl::InvalidArgumentError(absl::StrCat(
            "DeepSeek-V4.1 forward: image position ", chunk.start_pos + static_cast<int64_t>(t),
            " carries token ", chunk.tokens[t], ", not image_token_id ", cfg_.image_token_id));
      }
    }
  }
  RETURN_IF_ERROR(CheckDistinctStateSlots("DeepSeek-V4.1", std::move(slots)));
  Impl& im = *impl_;
  const bool hooks = batch.chunks.size() == 1;
  im.tracer = hooks ? tracer_ : nullptr;
  im.debug = hooks ? debug_ : nullptr;
  Batch rows;
  std::vector<LogitsMode> modes;
  for (size_t ci = 0; ci < batch.chunks.size(); ++ci) {
    const SequenceChunk& chunk = batch.chunks[ci];
    Seq s;
    s.p0 = chunk.start_pos;
    s.T = static_cast<int64_t>(chunk.tokens.size());
    s.tokens = chunk.tokens;
    s.image.resize(s.T);
    if (!image_masks.empty() && !image_masks[ci].empty()) {
      for (int64_t t = 0; t < s.T; ++t) s.image[t] = image_masks[ci][t] != 0;
    }
    s.block_table = chunk.block_table;
    s.state = kv.state_base + static_cast<int64_t>(chunk.state_slot) * layout_.StateBytes();
    s.kv = &kv;
    s.floor = chunk.replay_start;
    s.keep_until = chunk.replay_until;
    s.prefill_end = chunk.prefill_end;
    rows.seqs.push_back(std::move(s));
    rows.sh.emplace_back().selected.resize(cfg_.TotalBlocks());
    modes.push_back(chunk.logits);
  }
  rows.MapRows();
  im.RunBatch(std::move(rows), modes, out);
  im.tracer = nullptr;
  im.debug = nullptr;
  return absl::OkStatus();
}

}  // namespace dsv41

absl::StatusOr<std::unique_ptr<CausalLM>> LoadDeepseekV41(const std::string& dir,
                                                          const LoadOptions& options) {
  ASSIGN_OR_RETURN(std::string config_text, dsv4::ReadConfigJson(dir));
  ASSIGN_OR_RETURN(dsv41::Config config, dsv41::Config::Parse(config_text, dir + "/config.json"));
  ASSIGN_OR_RETURN(dsv41::EngramHasher hasher, dsv41::EngramHasher::Load(config, dir));
  CheckpointOptions copts;
  ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(dir, copts));
  ASSIGN_OR_RETURN(std::unique_ptr<dsv41::DeepseekV41Model> m,
                   dsv41::DeepseekV41Model::Create(std::move(config), std::move(ckpt),
                                                   std::move(hasher), options));
  return std::unique_ptr<CausalLM>(std::move(m));
}

}  // namespace deepinfer::model
