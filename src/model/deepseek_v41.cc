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
#include "common/thread_pool.h"
#include "kernels/linear_fp8_blocks.h"
#include "kernels/workspace.h"
#include "model/deepseek_v41_formats.h"
#include "model/deepseek_v4_numerics.h"

namespace deepinfer::model {
namespace dsv41 {
namespace {

using dsv4::ApplyRope;
using dsv4::E4M3ToF32;
using dsv4::RopeFrequencies;
using dsv4::RoundBf16;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// FP64 dot product with 8 interleaved partial sums in a fixed order (depends only on n).
inline double DotF64(const float* a, const float* b, int64_t n) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) s[j] += static_cast<double>(a[i + j]) * b[i + j];
  }
  for (int j = 0; i < n; ++i, ++j) s[j] += static_cast<double>(a[i]) * b[i];
  return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

template <class Fn>
void ForRows(int64_t n, int64_t cost, Fn&& fn) {
  if (n <= 1 || n * cost < (int64_t{1} << 15)) {
    for (int64_t r = 0; r < n; ++r) fn(r);
    return;
  }
  ThreadPool::Default()->ParallelFor(n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) fn(r);
  });
}

// Top `k` of (score, id) pairs with finite score: largest first, ties to the lower id.
std::vector<int32_t> TopFinite(std::vector<std::pair<float, int32_t>> sc, int64_t k) {
  sc.erase(std::remove_if(sc.begin(), sc.end(),
                          [](const auto& p) { return !(p.first > kNegInf); }),
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
  int64_t floor = 0;       // replay_start: window floor
  int64_t keep_until = 0;  // replay_until: cached rows below it are not rewritten
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

}  // namespace

struct DeepseekV41Model::Impl {
  const Config* cfg = nullptr;
  const Weights41* w = nullptr;
  const KvLayout* layout = nullptr;
  const KvIndices* idx = nullptr;
  const EngramHasher* hasher = nullptr;
  bool bf16 = true;
  std::vector<std::vector<double>> freqs;  // per block
  Tracer* tracer = nullptr;
  std::vector<BlockDebug41>* debug = nullptr;
  EngramHasher hasher_store;
  // Decoder-side bounded replay at prefill (§7): 0 = off ("none"), else rows kept.
  int64_t truncate_keep = 0;
  // Forward writes the DSpark context rings (§5).
  bool dspark_context = false;
  // ForwardWithDraftFeatures: every chunk appends its rows' DSpark target features here.
  std::vector<float>* feature_sink = nullptr;

  // ---------- helpers ----------
  void R(float* x, int64_t n) const {
    if (!bf16) return;
    for (int64_t i = 0; i < n; ++i) x[i] = RoundBf16(x[i]);
  }
  float R1(float x) const { return bf16 ? RoundBf16(x) : x; }
  void TraceF(const std::string& name, float* data, int64_t n) const {
    if (tracer != nullptr) tracer->Floats(name, std::span<float>(data, n));
  }
  void TraceI(const std::string& name, int32_t* data, int64_t n) const {
    if (tracer != nullptr) tracer->Ints(name, std::span<int32_t>(data, n));
  }

  // y = x W^T. quantize: MXFP8 per-32 activation quantisation first (FP8/FP4 weights, §3).
  // Tier B accumulates in FP64 (its goldens come from a float64 oracle).
  void Lin(const WeightMatrix& m, const float* x, int64_t M, float* y, bool quantize) const {
    if (M == 0) return;
    std::vector<float> xq;
    if (quantize) {
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
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float rs = 1.0f / std::sqrt(static_cast<float>(ss / dim) + static_cast<float>(cfg->rms_eps));
    for (int64_t i = 0; i < dim; ++i) yr[i] = wt[i] * (xr[i] * rs);
    R(yr, dim);
  }
  void RmsNorm(const float* x, const std::vector<float>& wt, int64_t rows, int64_t dim,
               float* y) const {
    ForRows(rows, 3 * dim, [&](int64_t r) { RmsNormRow(x + r * dim, wt, dim, y + r * dim); });
  }

  // ---------- cache addressing ----------
  uint8_t* StateAt(const Seq& s, int index) const {
    return s.state + layout->StateOffset(index);
  }
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
    const int64_t n = cfg->hc_mult, D = cfg->hidden_size, nD = n * D, mix = (2 + n) * n;
    const float eps = static_cast<float>(cfg->hc_eps);
    ForRows(T, mix * nD, [&](int64_t t) {
      const float* v = X + t * nD;
      double ss = 0;
      for (int64_t i = 0; i < nD; ++i) ss += static_cast<double>(v[i]) * v[i];
      const float rs =
          1.0f / std::sqrt(static_cast<float>(ss / nD) + static_cast<float>(cfg->rms_eps));
      std::vector<float> mixes(mix);
      for (int64_t i = 0; i < mix; ++i) {
        mixes[i] = static_cast<float>(DotF64(hw.fn.data() + i * nD, v, nD)) * rs;
      }
      for (int64_t i = 0; i < n; ++i) {
        pre[t * n + i] = Sigmoid(mixes[i] * hw.scale[0] + hw.base[i]) + eps;
        post[t * n + i] = 2.0f * Sigmoid(mixes[n + i] * hw.scale[1] + hw.base[n + i]);
      }
      float* M = comb + t * n * n;
      for (int64_t i = 0; i < n * n; ++i) M[i] = mixes[2 * n + i] * hw.scale[2] + hw.base[2 * n + i];
      for (int64_t i = 0; i < n; ++i) {
        float mx = kNegInf;
        for (int64_t j = 0; j < n; ++j) mx = std::max(mx, M[i * n + j]);
        float sum = 0;
        for (int64_t j = 0; j < n; ++j) {
          M[i * n + j] = std::exp(M[i * n + j] - mx);
          sum += M[i * n + j];
        }
        for (int64_t j = 0; j < n; ++j) M[i * n + j] = M[i * n + j] / sum + eps;
      }
      auto col_norm = [&] {
        for (int64_t j = 0; j < n; ++j) {
          float s = 0;
          for (int64_t i = 0; i < n; ++i) s += M[i * n + j];
          for (int64_t i = 0; i < n; ++i) M[i * n + j] /= (s + eps);
        }
      };
      auto row_norm = [&] {
        for (int64_t i = 0; i < n; ++i) {
          float s = 0;
          for (int64_t j = 0; j < n; ++j) s += M[i * n + j];
          for (int64_t j = 0; j < n; ++j) M[i * n + j] /= (s + eps);
        }
      };
      col_norm();
      for (int64_t it = 1; it < cfg->hc_sinkhorn_iters; ++it) {
        row_norm();
        col_norm();
      }
    });
  }
  // x[t] = bf16(sum_s pre[t][s] * X[t][s]).
  void Collapse(const float* X, const float* pre, int64_t T, float* x) const {
    const int64_t n = cfg->hc_mult, D = cfg->hidden_size;
    ForRows(T, n * D, [&](int64_t t) {
      for (int64_t k = 0; k < D; ++k) {
        double acc = 0;
        for (int64_t s = 0; s < n; ++s) acc += static_cast<double>(pre[t * n + s]) * X[(t * n + s) * D + k];
        x[t * D + k] = static_cast<float>(acc);
      }
      R(x + t * D, D);
    });
  }
  // X[t][j] = bf16(post[j] * y + sum_i comb[i][j] * X[t][i]).
  void HcPost(float* X, const float* y, const float* post, const float* comb, int64_t T) const {
    const int64_t n = cfg->hc_mult, D = cfg->hidden_size;
    ForRows(T, 2 * n * n * D, [&](int64_t t) {
      std::vector<float> old(X + t * n * D, X + (t + 1) * n * D);
      float* Xt = X + t * n * D;
      const float* M = comb + t * n * n;
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t k = 0; k < D; ++k) {
          double acc = 0;
          for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(M[i * n + j]) * old[i * D + k];
          Xt[j * D + k] =
              R1(static_cast<float>(static_cast<double>(post[t * n + j]) * y[t * D + k] + acc));
        }
      }
    });
  }

  // ---------- Engram (§4.2) ----------
  void Engram(int64_t l, const Seq& s, float* X, BlockDebug41* dbg, const std::string& pfx) const {
    const Config& c = *cfg;
    const EngramWeights& g = w->blocks[l].engram;
    const int li = hasher->LayerIndex(l);
    CHECK_GE(li, 0);
    const int64_t T = s.T, n = c.hc_mult, D = c.hidden_size, hd = c.engram_head_dim;
    const int64_t cols = hasher->columns(), back = c.engram_max_ngram - 1;
    // Compressed ids of positions [p0 - back, p0 + T): history from the cache.
    std::vector<int32_t> cids(back + T, kEngramDead);
    for (int64_t i = 0; i < back; ++i) {
      const int64_t p = s.p0 - back + i;
      if (p < 0) continue;
      std::memcpy(&cids[i], PagedRow(s, idx->engram_cids, p, 1), 4);
    }
    for (int64_t t = 0; t < T; ++t) cids[back + t] = hasher->Cid(s.tokens[t], s.image[t]);
    std::vector<int32_t> ids(T * cols);
    std::vector<int64_t> ids64(cols);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t p = s.Pos(t);
      std::vector<int32_t> hist;
      for (int64_t k = 0; k <= std::min<int64_t>(back, p); ++k) hist.push_back(cids[back + t - k]);
      hasher->Hash(li, hist, ids64.data());
      for (int64_t j = 0; j < cols; ++j) ids[t * cols + j] = static_cast<int32_t>(ids64[j]);
    }
    TraceI(pfx + "engram.hash_ids", ids.data(), ids.size());
    // Rows -> BF16 -> wkv.
    std::vector<float> rows(T * cols * hd);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t id = ids[t * cols + j];
        CHECK(id >= 0 && id < g.rows) << "Engram row id " << id;
        float* dst = rows.data() + (t * cols + j) * hd;
        for (int64_t k = 0; k < hd; ++k) {
          const float sc = std::ldexp(1.0f, static_cast<int>(g.table_scale[id * (hd / 32) + k / 32]) - 127);
          dst[k] = R1(E4M3ToF32(g.table[id * hd + k]) * sc);
        }
      }
    }
    std::vector<float> kv(T * (n + 1) * D);
    Lin(g.wkv, rows.data(), T, kv.data(), true);
    R(kv.data(), kv.size());
    std::vector<float> value(T * D), gate(T * n);
    for (int64_t t = 0; t < T; ++t) {
      std::memcpy(value.data() + t * D, kv.data() + (t * (n + 1) + n) * D, D * 4);
    }
    TraceF(pfx + "engram.value", value.data(), value.size());
    const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(D));
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t st = 0; st < n; ++st) {
        if (s.image[t]) {
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
        const float rx = 1.0f / std::sqrt(static_cast<float>(sx / D) + static_cast<float>(c.rms_eps));
        const float rk = 1.0f / std::sqrt(static_cast<float>(sk / D) + static_cast<float>(c.rms_eps));
        const float d = static_cast<float>(dot * rx * rk * inv_sqrt_d);
        const float sg = d > 0 ? 1.f : d < 0 ? -1.f : 0.f;
        gate[t * n + st] = Sigmoid(sg * std::sqrt(std::max(std::fabs(d), 1e-6f)));
      }
    }
    TraceF(pfx + "engram.gate", gate.data(), gate.size());
    for (int64_t t = 0; t < T; ++t) {
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
  // Compressor + publishing: rows completed in this chunk go to the paged caches (unless below
  // keep_until). xn: attn_norm output [T, D].
  void Publish(int64_t l, const Seq& s, const float* xn, const std::string& pfx) const {
    const Config& c = *cfg;
    const AttentionWeights41& aw = w->blocks[l].attn;
    const int64_t r = c.roles[l].ratio, d = c.head_dim, rd = c.rope_dim, ID = c.index_head_dim;
    const int64_t T = s.T;
    std::vector<float> latents;  // completed groups, [G, d]
    std::vector<int64_t> groups;
    if (r == 1) {
      latents.resize(T * d);
      std::vector<float> a(T * d);
      Lin(aw.comp_wkv, xn, T, a.data(), false);
      R(a.data(), a.size());
      RmsNorm(a.data(), aw.comp_norm, T, d, latents.data());
      for (int64_t t = 0; t < T; ++t) groups.push_back(s.Pos(t));
    } else {
      std::vector<float> a(T * d), g(T * d);
      Lin(aw.comp_wkv, xn, T, a.data(), false);
      Lin(aw.comp_wgate, xn, T, g.data(), false);
      float* carry = reinterpret_cast<float*>(StateAt(s, idx->compressor[l]));  // [r-1][2][d]
      std::vector<float> pooled(d), row(d), ga(r), va(r);
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
          float mx = kNegInf;
          for (int64_t i = 0; i < r; ++i) mx = std::max(mx, ga[i]);
          float sum = 0;
          for (int64_t i = 0; i < r; ++i) {
            ga[i] = std::exp(ga[i] - mx);
            sum += ga[i];
          }
          double acc = 0;
          for (int64_t i = 0; i < r; ++i) acc += static_cast<double>(va[i]) * (ga[i] / sum);
          pooled[k] = static_cast<float>(acc);
        }
        R(pooled.data(), d);
        RmsNormRow(pooled.data(), aw.comp_norm, d, row.data());
        latents.insert(latents.end(), row.begin(), row.end());
        groups.push_back(p - r + 1);
      }
      // Pending tokens of the trailing incomplete group.
      const int64_t lp = s.Pos(T - 1);
      for (int64_t t = std::max<int64_t>(0, T - (r - 1)); t < T; ++t) {
        const int64_t p = s.Pos(t);
        if ((lp + 1) % r == 0 || p / r != lp / r) continue;
        float* slot = carry + (p % r) * 2 * d;
        std::memcpy(slot, a.data() + t * d, d * 4);
        std::memcpy(slot + d, g.data() + t * d, d * 4);
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
      if (groups[i] < s.keep_until) continue;  // replay: cached row stays
      const int64_t b = groups[i] / r;
      // Tracing may have replaced the values (teacher forcing): re-encode them.
      if (tracer != nullptr) {
        Mxfp4Quantize(kn.data() + i * ID, ID, key_bytes.data() + i * Mxfp4RowBytes(ID));
        Nvfp4Quantize(rows.data() + i * d, d, row_bytes.data() + i * Nvfp4RowBytes(d));
      }
      std::memcpy(PagedRow(s, idx->index_k[l], b, r), key_bytes.data() + i * Mxfp4RowBytes(ID),
                  Mxfp4RowBytes(ID));
      std::memcpy(PagedRow(s, idx->comp_kv[l], b, r), row_bytes.data() + i * Nvfp4RowBytes(d),
                  Nvfp4RowBytes(d));
    }
  }

  // Indexer of an index source (§4.5): selections for every chunk token into sh.selected[l].
  void Index(int64_t l, const Seq& s, const float* xn, const float* qr, ChunkShared* sh,
             const std::string& pfx, BlockDebug41* dbg) const {
    const Config& c = *cfg;
    const LayerRole& role = c.roles[l];
    const AttentionWeights41& aw = w->blocks[l].attn;
    const int64_t T = s.T, r = role.ratio, IH = c.index_n_heads, ID = c.index_head_dim,
                  rd = c.rope_dim;
    std::vector<float> qi(T * IH * ID), wts(T * IH);
    Lin(aw.idx_wq_b, qr, T, qi.data(), true);
    R(qi.data(), qi.size());
    ForRows(T, 8 * IH * ID, [&](int64_t t) {
      for (int64_t h = 0; h < IH; ++h) {
        float* qh = qi.data() + (t * IH + h) * ID;
        ApplyRope(qh + ID - rd, static_cast<int>(rd), freqs[l], s.Pos(t), false);
        R(qh + ID - rd, rd);
        Mxfp4Quantize(qh, ID, nullptr);
      }
    });
    TraceF(pfx + "attn.indexer.q", qi.data(), qi.size());
    Lin(aw.idx_weights_proj, xn, T, wts.data(), false);
    R(wts.data(), wts.size());
    const float wscale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(ID)) /
                                            std::sqrt(static_cast<double>(IH)));
    for (auto& v : wts) v = R1(v * wscale);
    TraceF(pfx + "attn.indexer.weights", wts.data(), wts.size());
    // Keys of the KV source: rows [0, rows_end).
    const int64_t rows_end = (s.Pos(T - 1) + 1) / r;
    std::vector<float> keys(rows_end * ID);
    ForRows(rows_end, ID, [&](int64_t b) {
      Mxfp4Decode(PagedRow(s, idx->index_k[role.kv_source], b, r), ID, keys.data() + b * ID);
    });
    std::vector<float> scores(T * rows_end);
    ForRows(T, rows_end * IH * ID, [&](int64_t t) {
      for (int64_t b = 0; b < rows_end; ++b) {
        double acc = 0;
        for (int64_t h = 0; h < IH; ++h) {
          acc += std::max(DotF64(qi.data() + (t * IH + h) * ID, keys.data() + b * ID, ID), 0.0) *
                 wts[t * IH + h];
        }
        scores[t * rows_end + b] = static_cast<float>(acc);
      }
    });
    if (tracer != nullptr) {
      std::vector<float> traced(scores);
      TraceF(pfx + "index_scores", traced.data(), traced.size());
    }
    const int64_t cbs = c.candidate_block_size;
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
          for (int64_t b = k * cbs; b < std::min(nvis, (k + 1) * cbs); ++b) {
            mx = std::max(mx, scores[t * rows_end + b]);
          }
          bs[k] = {mx, static_cast<int32_t>(k)};
        }
        bs[(nvis - 1) / cbs].first = std::numeric_limits<float>::infinity();
        for (int32_t k : TopFinite(bs, c.candidate_topk_blocks)) {
          for (int64_t b = k * cbs; b < std::min(rows_end, (k + 1) * cbs); ++b) {
            sh->candidates[t][b] = 1;
          }
        }
      }
    }
    const bool masked = role.candidate_masked && sh->has_candidates;
    if ((role.candidate_source || masked) && tracer != nullptr) {
      std::vector<int32_t> cand(T * rows_end);
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t b = 0; b < rows_end; ++b) cand[t * rows_end + b] = sh->candidates[t][b];
      }
      TraceI(pfx + "attn.candidates", cand.data(), cand.size());
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t b = 0; b < rows_end; ++b) sh->candidates[t][b] = cand[t * rows_end + b] != 0;
      }
    }
    auto& sel = sh->selected[l];
    sel.assign(T, {});
    std::vector<int32_t> flat(T * c.index_topk, -1);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t nvis = (s.Pos(t) + 1) / r;
      std::vector<std::pair<float, int32_t>> sc(nvis);
      for (int64_t b = 0; b < nvis; ++b) {
        float v = scores[t * rows_end + b];
        if (masked && !sh->candidates[t][b]) v = kNegInf;
        sc[b] = {v, static_cast<int32_t>(b)};
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
    (void)dbg;
  }

  // ---------- attention (§4.4-4.5) ----------
  void Attention(int64_t l, const Seq& s, const float* xn, ChunkShared* sh, float* out,
                 const std::string& pfx, BlockDebug41* dbg) const {
    const Config& c = *cfg;
    const LayerRole& role = c.roles[l];
    const AttentionWeights41& aw = w->blocks[l].attn;
    const int64_t T = s.T, D = c.hidden_size, H = c.num_heads, d = c.head_dim, rd = c.rope_dim;
    const int64_t W = c.window;
    std::vector<float> qa(T * c.q_lora_rank), qr(T * c.q_lora_rank), q(T * H * d);
    Lin(aw.wq_a, xn, T, qa.data(), true);
    R(qa.data(), qa.size());
    RmsNorm(qa.data(), aw.q_norm, T, c.q_lora_rank, qr.data());
    TraceF(pfx + "attn.qr", qr.data(), qr.size());
    Lin(aw.wq_b, qr.data(), T, q.data(), true);
    R(q.data(), q.size());
    ForRows(T, 4 * H * rd, [&](int64_t t) {
      for (int64_t h = 0; h < H; ++h) {
        float* qh = q.data() + (t * H + h) * d;
        ApplyRope(qh + d - rd, static_cast<int>(rd), freqs[l], s.Pos(t), false);
        R(qh + d - rd, rd);
      }
    });
    TraceF(pfx + "attn.q", q.data(), q.size());
    std::vector<float> kva(T * d), kv(T * d);
    Lin(aw.wkv, xn, T, kva.data(), true);
    R(kva.data(), kva.size());
    RmsNorm(kva.data(), aw.kv_norm, T, d, kv.data());
    std::vector<uint8_t> kv_bytes(T * idx->window_row_bytes);
    for (int64_t t = 0; t < T; ++t) {
      float* k = kv.data() + t * d;
      ApplyRope(k + d - rd, static_cast<int>(rd), freqs[l], s.Pos(t), false);
      R(k + d - rd, rd);
      Mxfp8Quantize(k, d, nullptr);
    }
    TraceF(pfx + "attn.kv", kv.data(), kv.size());
    for (int64_t t = 0; t < T; ++t) {
      // Re-encoding is exact (values are MXFP8 outputs, possibly teacher-forced ones).
      Mxfp8Quantize(kv.data() + t * d, d, kv_bytes.data() + t * idx->window_row_bytes);
    }

    // CSA2.
    const std::vector<std::vector<int32_t>>* selected = nullptr;
    if (role.ratio > 0) {
      if (role.role == Role::kFull) Publish(l, s, xn, pfx);
      if (role.role == Role::kFull || role.role == Role::kReindex) {
        Index(l, s, xn, qr.data(), sh, pfx, dbg);
      }
      selected = &sh->selected[role.index_source];
      CHECK_EQ(static_cast<int64_t>(selected->size()), T) << "layer " << l;
      if (role.role == Role::kReuse && tracer != nullptr) {
        // The reused selection (and the mask it was made under), as the trace records them.
        const int64_t rows_end = (s.Pos(T - 1) + 1) / role.ratio;
        if (sh->has_candidates) {
          std::vector<int32_t> cand(T * rows_end);
          for (int64_t t = 0; t < T; ++t) {
            for (int64_t b = 0; b < rows_end; ++b) cand[t * rows_end + b] = sh->candidates[t][b];
          }
          TraceI(pfx + "attn.candidates", cand.data(), cand.size());
        }
        std::vector<int32_t> flat(T * c.index_topk, -1);
        for (int64_t t = 0; t < T; ++t) {
          std::copy((*selected)[t].begin(), (*selected)[t].end(), flat.begin() + t * c.index_topk);
        }
        TraceI(pfx + "attn.indexer.selected", flat.data(), flat.size());
      }
    }
    // Compressed rows needed by this chunk, decoded once.
    std::vector<float> comp;
    std::vector<int64_t> comp_at;
    if (selected != nullptr) {
      const int64_t r = role.ratio;
      const int64_t rows_end = (s.Pos(T - 1) + 1) / r;
      comp_at.assign(rows_end, -1);
      int64_t nneed = 0;
      for (const auto& v : *selected) {
        for (int32_t b : v) {
          if (comp_at[b] < 0) comp_at[b] = nneed++;
        }
      }
      comp.resize(nneed * d);
      for (int64_t b = 0; b < rows_end; ++b) {
        if (comp_at[b] >= 0) {
          Nvfp4Decode(PagedRow(s, idx->comp_kv[role.kv_source], b, r), d,
                      comp.data() + comp_at[b] * d);
        }
      }
      if (dbg != nullptr) {
        dbg->selected_rows = selected->back();
        if (sh->has_candidates && l >= c.candidate_source_layer) {
          dbg->candidate_positions.clear();
          for (int64_t b = 0; b < rows_end; ++b) {
            if (sh->candidates[T - 1][b]) dbg->candidate_positions.push_back(static_cast<int32_t>(b));
          }
        }
      }
    }
    // Window keys before the chunk, decoded once.
    const int64_t w0 = s.draft ? std::max<int64_t>(0, s.p0 - W) : std::max(s.floor, s.p0 - W + 1);
    std::vector<float> ring(std::max<int64_t>(0, s.p0 - w0) * d);
    for (int64_t p = w0; p < s.p0; ++p) {
      Mxfp8Decode(RingRow(s, l, p), d, ring.data() + (p - w0) * d);
    }
    std::vector<float> o(T * H * d);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    ThreadPool::Default()->ParallelFor(T, [&](int64_t tb, int64_t te) {
      std::vector<const float*> keys;
      std::vector<float> sc;
      std::vector<double> acc(d);
      for (int64_t t = tb; t < te; ++t) {
        const int64_t p = s.Pos(t);
        keys.clear();
        if (s.draft) {
          // Context ring (positions < p0) then every block row, bidirectionally.
          for (int64_t j = w0; j < s.p0; ++j) keys.push_back(ring.data() + (j - w0) * d);
          for (int64_t j = 0; j < T; ++j) keys.push_back(kv.data() + j * d);
        } else {
          for (int64_t j = std::max(s.floor, p - W + 1); j <= p; ++j) {
            keys.push_back(j >= s.p0 ? kv.data() + (j - s.p0) * d : ring.data() + (j - w0) * d);
          }
        }
        if (selected != nullptr) {
          for (int32_t b : (*selected)[t]) keys.push_back(comp.data() + comp_at[b] * d);
        }
        const int64_t nk = static_cast<int64_t>(keys.size());
        sc.resize(nk);
        for (int64_t h = 0; h < H; ++h) {
          const float* qh = q.data() + (t * H + h) * d;
          float mx = kNegInf;
          for (int64_t j = 0; j < nk; ++j) {
            sc[j] = static_cast<float>(DotF64(qh, keys[j], d)) * scale;
            mx = std::max(mx, sc[j]);
          }
          double denom = 0;
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int64_t j = 0; j < nk; ++j) {
            const float pj = std::exp(sc[j] - mx);
            denom += pj;
            const double pr = R1(pj);
            for (int64_t i = 0; i < d; ++i) acc[i] += pr * keys[j][i];
          }
          denom += std::exp(aw.sink[h] - mx);
          float* oh = o.data() + (t * H + h) * d;
          for (int64_t i = 0; i < d; ++i) oh[i] = R1(static_cast<float>(acc[i] / denom));
          ApplyRope(oh + d - rd, static_cast<int>(rd), freqs[l], p, true);
          R(oh + d - rd, rd);
        }
      }
    });
    TraceF(pfx + "attn.o", o.data(), o.size());
    // Window ring update after every query read the old contents (draft blocks are not cached).
    for (int64_t t = s.draft ? T : std::max<int64_t>(0, T - idx->ring_slots); t < T; ++t) {
      std::memcpy(RingRow(s, l, s.Pos(t)), kv_bytes.data() + t * idx->window_row_bytes,
                  idx->window_row_bytes);
    }
    // Grouped wo_a (BF16 einsum, no activation quantisation) then wo_b.
    const int64_t G = c.o_groups, L = c.o_lora_rank, gin = H * d / G;
    std::vector<float> z(T * G * L), og(T * gin), zg(T * L);
    for (int64_t g = 0; g < G; ++g) {
      for (int64_t t = 0; t < T; ++t) {
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
      Lin(slice, og.data(), T, zg.data(), false);
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

  // ---------- MoE (§4.6) ----------
  void Swiglu(const ExpertWeights41& ew, const float* x, int64_t M, const float* rw,
              float* y) const {
    const int64_t I = ew.w1.rows, D = ew.w2.rows;
    std::vector<float> gate(M * I), up(M * I);
    Lin(ew.w1, x, M, gate.data(), true);
    Lin(ew.w3, x, M, up.data(), true);
    R(gate.data(), gate.size());
    R(up.data(), up.size());
    const float lim = static_cast<float>(cfg->swiglu_limit);
    for (int64_t r = 0; r < M; ++r) {
      for (int64_t i = 0; i < I; ++i) {
        float gv = gate[r * I + i], uv = up[r * I + i];
        if (lim > 0) {
          uv = std::clamp(uv, -lim, lim);
          gv = std::min(gv, lim);
        }
        float h = gv / (1.0f + std::exp(-gv)) * uv;
        if (rw != nullptr) h *= rw[r];
        gate[r * I + i] = R1(h);
      }
    }
    Lin(ew.w2, gate.data(), M, y, true);
    R(y, M * D);
  }

  void Moe(int64_t l, const Seq& s, const float* xn, bool dspark, float* out,
           const std::string& pfx, BlockDebug41* dbg) const {
    const Config& c = *cfg;
    const MoeWeights41& mw = w->blocks[l].ffn;
    const int64_t T = s.T, D = c.hidden_size, E = mw.gate.rows, K = mw.top_k;
    std::vector<float> sc(T * E);
    Lin(mw.gate, xn, T, sc.data(), false);
    for (auto& v : sc) {
      const float x = v / static_cast<float>(c.gate_temp);
      const float sp = x > 20.f ? x : std::log1p(std::exp(x));
      v = std::sqrt(sp);
    }
    TraceF(pfx + "ffn.scores", sc.data(), sc.size());
    std::vector<int32_t> ids(T * K);
    for (int64_t t = 0; t < T; ++t) {
      const std::vector<float>& bias = (!dspark && s.image[t]) ? mw.bias_vl : mw.bias;
      std::vector<std::pair<float, int32_t>> b(E);
      for (int64_t e = 0; e < E; ++e) b[e] = {sc[t * E + e] + bias[e], static_cast<int32_t>(e)};
      std::partial_sort(b.begin(), b.begin() + K, b.end(), [](const auto& x, const auto& y) {
        return x.first > y.first || (x.first == y.first && x.second < y.second);
      });
      for (int64_t j = 0; j < K; ++j) ids[t * K + j] = b[j].second;
    }
    TraceI(pfx + "ffn.experts", ids.data(), ids.size());
    std::vector<float> wts(T * K);
    for (int64_t t = 0; t < T; ++t) {
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
    std::vector<float> y(T * D, 0.f);
    std::vector<std::vector<std::pair<int64_t, float>>> by_expert(E);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t j = 0; j < K; ++j) by_expert[ids[t * K + j]].push_back({t, wts[t * K + j]});
    }
    std::vector<float> xg, rw, yg;
    for (int64_t e = 0; e < E; ++e) {
      const auto& list = by_expert[e];
      if (list.empty()) continue;
      const int64_t M = static_cast<int64_t>(list.size());
      xg.resize(M * D);
      rw.resize(M);
      yg.resize(M * D);
      for (int64_t r = 0; r < M; ++r) {
        std::memcpy(xg.data() + r * D, xn + list[r].first * D, D * 4);
        rw[r] = list[r].second;
      }
      Swiglu(mw.experts[e], xg.data(), M, rw.data(), yg.data());
      for (int64_t r = 0; r < M; ++r) {
        float* yt = y.data() + list[r].first * D;
        for (int64_t k = 0; k < D; ++k) yt[k] += yg[r * D + k];
      }
    }
    std::vector<float> shv(T * D);
    Swiglu(mw.shared, xn, T, nullptr, shv.data());
    for (int64_t i = 0; i < T * D; ++i) out[i] = R1(y[i] + shv[i]);
    TraceF(pfx + "ffn.out", out, T * D);
  }

  // ---------- block (§4.3) ----------
  // X: [T, n, D] streams; pre_mix: [T, n] carried collapse coefficients (updated).
  void Block(int64_t l, const Seq& s, float* X, float* pre_mix, ChunkShared* sh,
             std::vector<float>* features) const {
    const Config& c = *cfg;
    const int64_t T = s.T, n = c.hc_mult, D = c.hidden_size;
    const bool dspark = l >= c.num_layers;
    const std::string pfx = dspark ? absl::StrCat("mtp.", l - c.num_layers, ".")
                                   : absl::StrCat("layers.", l, ".");
    BlockDebug41* dbg = nullptr;
    if (debug != nullptr) {
      debug->emplace_back();
      dbg = &debug->back();
    }
    if (c.roles[l].engram) Engram(l, s, X, dbg, pfx);
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
    Attention(l, s, xn.data(), sh, y.data(), pfx, dbg);
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
    Moe(l, s, xn.data(), dspark, y.data(), pfx, dbg);
    HcPost(X, y.data(), fpost.data(), fcomb.data(), T);
    TraceF(pfx + "X", X, T * n * D);
    std::memcpy(pre_mix, fpre.data(), T * n * 4);
    if (dbg != nullptr) {
      const float* Xl = X + (T - 1) * n * D;
      for (int64_t st = 0; st < n; ++st) {
        double ss = 0;
        for (int64_t k = 0; k < D; ++k) ss += static_cast<double>(Xl[st * D + k]) * Xl[st * D + k];
        dbg->stream_rms.push_back(static_cast<float>(std::sqrt(ss / D)));
      }
      dbg->stream0_first8.assign(Xl, Xl + std::min<int64_t>(8, D));
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
    ChunkShared sh;
    sh.selected.resize(c.TotalBlocks());
    for (int64_t l = c.num_layers; l < c.TotalBlocks(); ++l) {
      Block(l, s, X.data(), pre_mix.data(), &sh, nullptr);
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
          sample ? sample(i, logit)
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

  // Whole stack over one chunk; logits rows per `mode` appended to `logits`.
  void RunChunk(const Seq& s, LogitsMode mode, std::vector<float>* logits) const {
    const Config& c = *cfg;
    const int64_t T = s.T, n = c.hc_mult, D = c.hidden_size;
    // Engram history for later chunks.
    if (idx->engram_cids >= 0) {
      for (int64_t t = 0; t < T; ++t) {
        if (s.Pos(t) < s.keep_until) continue;
        const int32_t cid = hasher->Cid(s.tokens[t], s.image[t]);
        std::memcpy(PagedRow(s, idx->engram_cids, s.Pos(t), 1), &cid, 4);
      }
    }
    std::vector<float> X(T * n * D), pre_mix(T * n, 0.f);
    ForRows(T, n * D, [&](int64_t t) {
      float* x0 = X.data() + t * n * D;
      for (int64_t k = 0; k < D; ++k) x0[k] = w->embed.At(s.tokens[t], k);
      for (int64_t st = 1; st < n; ++st) std::memcpy(x0 + st * D, x0, D * 4);
      pre_mix[t * n] = 1.f;
    });
    ChunkShared sh;
    sh.selected.resize(c.TotalBlocks());
    std::vector<float> features;
    const bool write_context = dspark_context && w->has_dspark;
    const bool want_features =
        (tracer != nullptr || write_context || feature_sink != nullptr) &&
        !c.dspark_target_layers.empty();
    if (want_features) features.assign(T * c.dspark_target_layers.size() * D, 0.f);
    // Compact truncation (§7): the layers after the last KV source run only on rows at or
    // after the decoder floor, their windows starting there. Layers up to and including the
    // last KV source see every row (the decoder's block KV is a function of the encoder output).
    const int64_t dec_floor = DecoderFloor(s, mode);
    const int64_t last_kv = c.LastKvSource();
    Seq cur = s;
    for (int64_t l = 0; l < c.num_layers; ++l) {
      if (dec_floor > 0 && l == last_kv + 1) {
        const int64_t drop = std::clamp<int64_t>(dec_floor - cur.p0, 0, cur.T);
        cur.p0 += drop;
        cur.T -= drop;
        cur.tokens = cur.tokens.subspan(drop);
        cur.image.erase(cur.image.begin(), cur.image.begin() + drop);
        cur.floor = std::max(cur.floor, dec_floor);
        X.erase(X.begin(), X.begin() + drop * n * D);
        pre_mix.erase(pre_mix.begin(), pre_mix.begin() + drop * n);
        for (auto& sel : sh.selected) {
          if (!sel.empty()) sel.erase(sel.begin(), sel.begin() + drop);
        }
        if (sh.has_candidates) sh.candidates.erase(sh.candidates.begin(), sh.candidates.begin() + drop);
        if (want_features) features.erase(features.begin(), features.begin() + drop * c.dspark_target_layers.size() * D);
        if (cur.T == 0) break;  // the whole chunk is below the floor: no decoder work
      }
      Block(l, cur, X.data(), pre_mix.data(), &sh, want_features ? &features : nullptr);
    }
    const int64_t Tout = cur.T;
    if (want_features) TraceF("dspark.main_hidden", features.data(), features.size());
    if (write_context && cur.T > 0) WriteDsparkContext(cur, features.data());
    if (feature_sink != nullptr && want_features) AppendDraftFeatures(T, cur.T, features);
    if (tracer != nullptr) tracer->Floats("X_final", std::span<float>(X));
    std::vector<int64_t> rows;
    if (mode == LogitsMode::kLast) rows.push_back(Tout - 1);
    if (mode == LogitsMode::kAll) {
      for (int64_t t = 0; t < Tout; ++t) rows.push_back(t);
    }
    const int64_t M = static_cast<int64_t>(rows.size());
    if (M == 0) return;
    std::vector<float> h(M * D), hn(M * D), out(M * c.vocab_size);
    std::vector<float> pm(M * n), Xs(M * n * D);
    for (int64_t i = 0; i < M; ++i) {
      std::memcpy(pm.data() + i * n, pre_mix.data() + rows[i] * n, n * 4);
      std::memcpy(Xs.data() + i * n * D, X.data() + rows[i] * n * D, n * D * 4);
    }
    Collapse(Xs.data(), pm.data(), M, h.data());
    RmsNorm(h.data(), w->norm, M, D, hn.data());
    Lin(w->head, hn.data(), M, out.data(), false);
    if (tracer != nullptr && mode == LogitsMode::kAll) TraceF("logits", out.data(), out.size());
    logits->insert(logits->end(), out.begin(), out.end());
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
  ASSIGN_OR_RETURN(m->w_, BindWeights41(c, *m->ckpt_));
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
    impl->freqs[b] =
        c.roles[b].ratio > 0
            ? RopeFrequencies(static_cast<int>(c.rope_dim), c.compress_rope_theta,
                              c.yarn_original_len, c.yarn_factor, c.yarn_beta_fast,
                              c.yarn_beta_slow)
            : RopeFrequencies(static_cast<int>(c.rope_dim), c.rope_theta, 0, 1, 0, 0);
  }
  m->impl_ = std::move(impl);
  const EnvConfig& env = Env();
  m->set_prefill_truncation(env.yoco_prefill_truncation_mode == "compact",
                            env.yoco_prefill_keep_tokens);
  ModelInfo& info = m->info_;
  info.architecture = "DeepseekV41ForCausalLM";
  info.model_type = "deepseek_v41";
  info.vocab_size = c.vocab_size;
  info.max_context = c.max_position_embeddings;
  info.hidden_size = c.hidden_size;
  info.num_layers = c.num_layers;
  info.bos_token_id = c.bos_token_id;
  info.eos_token_ids = c.eos_token_ids;
  info.num_parameters = m->w_->num_parameters;
  info.weight_bytes = m->w_->weight_bytes;
  info.active_weight_bytes_per_token = m->w_->active_bytes_per_token;
  LOG(INFO) << "DeepSeek-V4.1: " << c.num_layers << " layers + " << c.num_dspark_layers
            << " DSpark, hidden " << c.hidden_size << ", window " << c.window
            << ", KV sources " << c.kv_source_layers.size() << ", stored state "
            << m->kv_idx_.stored_bytes << " B, state slot " << m->layout_.StateBytes()
            << " B, block " << m->layout_.BlockBytes() << " B";
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
      return absl::InvalidArgumentError(absl::StrCat(
          "DeepSeek-V4.1 DSpark: block positions [", r.position + 1, ", ",
          r.position + 1 + c.dspark_block_size, ") exceed max_position_embeddings ",
          c.max_position_embeddings));
    }
    if (r.token < 0 || r.token >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("DeepSeek-V4.1 DSpark: anchor token ",
                                                     r.token, " outside vocabulary ",
                                                     c.vocab_size));
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
  impl_->Draft(ds, req, {}, &r);
  const int64_t n = std::min<int64_t>(max_drafts, c.dspark_block_size);
  out->tokens.assign(r.tokens.begin(), r.tokens.begin() + n);
  for (int64_t i = 0; i < n; ++i) {
    out->confidence.push_back(
        static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(r.confidence_logits[i])))));
  }
  return absl::OkStatus();
}

absl::Status DeepseekV41Model::ValidateChunk(const SequenceChunk& chunk,
                                             const KvCacheView& kv) const {
  const Config& c = cfg_;
  const int64_t T = static_cast<int64_t>(chunk.tokens.size());
  if (T == 0) return absl::InvalidArgumentError("DeepSeek-V4.1 forward: empty chunk");
  if (chunk.start_pos < 0 || chunk.start_pos + T > c.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DeepSeek-V4.1 forward: positions [", chunk.start_pos, ", ", chunk.start_pos + T,
        ") exceed max_position_embeddings ", c.max_position_embeddings));
  }
  for (int32_t tok : chunk.tokens) {
    if (tok < 0 || tok >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("DeepSeek-V4.1 forward: token id ", tok,
                                                     " outside vocabulary ", c.vocab_size));
    }
  }
  if (chunk.state_slot < 0 || chunk.state_slot >= kv.num_state_slots || kv.state_base == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeepSeek-V4.1 forward: bad state slot ", chunk.state_slot));
  }
  if (chunk.replay_start < 0 || chunk.replay_start > chunk.start_pos || chunk.replay_until < 0 ||
      chunk.replay_start % kBlockTokens != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DeepSeek-V4.1 forward: bad replay range [", chunk.replay_start, ", ", chunk.replay_until,
        ") for a chunk at ", chunk.start_pos, " (the start must be block-aligned and <= it)"));
  }
  if (!layout_.paged.empty()) {
    const int64_t need = (chunk.start_pos + T + kBlockTokens - 1) / kBlockTokens;
    if (static_cast<int64_t>(chunk.block_table.size()) < need) {
      return absl::InvalidArgumentError(absl::StrCat("DeepSeek-V4.1 forward: block table has ",
                                                     chunk.block_table.size(), " entries, need ",
                                                     need));
    }
    for (int64_t i = 0; i < need; ++i) {
      if (chunk.block_table[i] < 0 || chunk.block_table[i] >= kv.num_blocks) {
        return absl::InvalidArgumentError(absl::StrCat("DeepSeek-V4.1 forward: block id ",
                                                       chunk.block_table[i], " out of range"));
      }
    }
  }
  return absl::OkStatus();
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
      return absl::InvalidArgumentError(absl::StrCat(
          "DeepSeek-V4.1 forward: image mask of chunk ", i, " has ", image_masks[i].size(),
          " entries for ", chunk.tokens.size(), " tokens"));
    }
    for (size_t t = 0; t < chunk.tokens.size(); ++t) {
      if (image_masks[i][t] && chunk.tokens[t] != cfg_.image_token_id) {
        return absl::InvalidArgumentError(absl::StrCat(
            "DeepSeek-V4.1 forward: image position ", chunk.start_pos + static_cast<int64_t>(t),
            " carries token ", chunk.tokens[t], ", not image_token_id ", cfg_.image_token_id));
      }
    }
  }
  std::sort(slots.begin(), slots.end());
  if (auto dup = std::adjacent_find(slots.begin(), slots.end()); dup != slots.end()) {
    return absl::InvalidArgumentError(absl::StrCat("DeepSeek-V4.1 forward: state slot ", *dup,
                                                   " used by two chunks of one batch"));
  }
  Impl& im = *impl_;
  const bool hooks = batch.chunks.size() == 1;
  im.tracer = hooks ? tracer_ : nullptr;
  im.debug = hooks ? debug_ : nullptr;
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
    im.RunChunk(s, chunk.logits, &out->logits);
    out->chunk_row_begin.push_back(static_cast<int64_t>(out->logits.size()) / cfg_.vocab_size);
  }
  im.tracer = nullptr;
  im.debug = nullptr;
  return absl::OkStatus();
}

}  // namespace dsv41

absl::StatusOr<std::unique_ptr<CausalLM>> LoadDeepseekV41(const std::string& dir,
                                                          const LoadOptions& options) {
  const std::string config_path = dir + "/config.json";
  std::ifstream in(config_path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("no config.json in ", dir));
  std::stringstream ss;
  ss << in.rdbuf();
  ASSIGN_OR_RETURN(dsv41::Config config, dsv41::Config::Parse(ss.str(), config_path));
  ASSIGN_OR_RETURN(dsv41::EngramHasher hasher, dsv41::EngramHasher::Load(config, dir));
  CheckpointOptions copts;
  ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(dir, copts));
  ASSIGN_OR_RETURN(std::unique_ptr<dsv41::DeepseekV41Model> m,
                   dsv41::DeepseekV41Model::Create(std::move(config), std::move(ckpt),
                                                   std::move(hasher), options));
  return std::unique_ptr<CausalLM>(std::move(m));
}

}  // namespace deepinfer::model
