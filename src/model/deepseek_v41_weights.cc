#include "model/deepseek_v41_weights.h"

#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/logging.h"
#include "common/status.h"
#include "model/deepseek_v4_tensor_binder.h"

namespace deepinfer::model::dsv41 {
namespace {

using dsv4::Bf16ToF32;
using dsv4::E4M3ToF32;
using dsv4::WeightFormat;

// V4.1's binder: the shared tensor checks (dsv4::TensorBinder) plus the V4.1 formats
// (configurable FP8 tiles with a BF16 fallback, roles, Engram, DSpark).
class Binder : public dsv4::TensorBinder {
 public:
  Binder(const Config& c, const Checkpoint& ckpt, bool repack, Weights41* w)
      : TensorBinder(ckpt, &w->owned, &w->num_parameters, &w->weight_bytes),
        c_(c),
        repack_(repack),
        w_(w) {}

  // BF16 (or F32) matrix used as FP32 values.
  absl::StatusOr<WeightMatrix> Plain(const std::string& name, int64_t rows, int64_t cols) {
    ASSIGN_OR_RETURN(dsv4::WeightMatrix m, TensorBinder::Plain(name, rows, cols));
    return WeightMatrix{m};
  }

  // FP8 `prefix.weight` [rows, cols] e4m3 + `prefix.scale` [ceil(rows/B), ceil(cols/B)] (E8M0
  // or F32, B = weight_block_size), kept in place (§2.2). BF16 / F32 weights (a converter may
  // have dequantised them) are accepted as they are.
  absl::StatusOr<WeightMatrix> Fp8(const std::string& prefix, int64_t rows, int64_t cols) {
    ASSIGN_OR_RETURN(TensorView t, ckpt_.Get(prefix + ".weight"));
    if (t.dtype == DType::kBF16 || t.dtype == DType::kF32) return Plain(t.name, rows, cols);
    ASSIGN_OR_RETURN(dsv4::WeightMatrix tiles, Fp8Tiles(prefix, rows, cols, c_.fp8_block));
    WeightMatrix m{tiles};
    m.fp8_block = c_.fp8_block;
    return m;
  }

  // Routed expert: MXFP4 (I8 [rows, cols/2] + E8M0 [rows, cols/32]) or FP8 with expert_dtype fp8.
  absl::StatusOr<WeightMatrix> Expert(const std::string& prefix, int64_t rows, int64_t cols) {
    if (!c_.expert_fp4) return Fp8(prefix, rows, cols);
    ASSIGN_OR_RETURN(dsv4::WeightMatrix m, Mxfp4(prefix, rows, cols));
    if (repack_) PackExpertLanes(&m, &w_->lane_packs, &w_->lane_pack_bytes);
    return WeightMatrix{m};
  }

  absl::StatusOr<HcWeights> Hc(const std::string& prefix, const std::string& kind) {
    const int64_t n = c_.hc_mult, mix = (2 + n) * n;
    return TensorBinder::Hc(prefix, kind, mix, n * c_.hidden_size, 3);
  }

  absl::Status Block(int64_t l, BlockWeights41* b) {
    const Config& c = c_;
    const LayerRole& role = c.roles[l];
    const bool dspark = l >= c.num_layers;
    const std::string p =
        dspark ? absl::StrCat("mtp.", l - c.num_layers, ".") : absl::StrCat("layers.", l, ".");
    const int64_t D = c.hidden_size, H = c.num_heads, d = c.head_dim;
    ASSIGN_OR_RETURN(b->hc_attn, Hc(p, "attn"));
    ASSIGN_OR_RETURN(b->hc_ffn, Hc(p, "ffn"));
    ASSIGN_OR_RETURN(b->attn_norm, Vector(p + "attn_norm.weight", {D}));
    ASSIGN_OR_RETURN(b->ffn_norm, Vector(p + "ffn_norm.weight", {D}));
    AttentionWeights41& a = b->attn;
    ASSIGN_OR_RETURN(a.sink, Vector(p + "attn.attn_sink", {H}));
    ASSIGN_OR_RETURN(a.wq_a, Fp8(p + "attn.wq_a", c.q_lora_rank, D));
    ASSIGN_OR_RETURN(a.q_norm, Vector(p + "attn.q_norm.weight", {c.q_lora_rank}));
    ASSIGN_OR_RETURN(a.wq_b, Fp8(p + "attn.wq_b", H * d, c.q_lora_rank));
    ASSIGN_OR_RETURN(a.wkv, Fp8(p + "attn.wkv", d, D));
    ASSIGN_OR_RETURN(a.kv_norm, Vector(p + "attn.kv_norm.weight", {d}));
    ASSIGN_OR_RETURN(a.wo_a, Fp8(p + "attn.wo_a", c.o_groups * c.o_lora_rank, H * d / c.o_groups));
    if (a.wo_a.fp8_block > 0 && c.o_lora_rank % a.wo_a.fp8_block != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          p, "attn.wo_a: o_lora_rank ", c.o_lora_rank, " is not a multiple of the FP8 tile ",
          a.wo_a.fp8_block, " (the grouped product slices it per group)"));
    }
    ASSIGN_OR_RETURN(a.wo_b, Fp8(p + "attn.wo_b", D, c.o_groups * c.o_lora_rank));
    if (role.role == Role::kFull) {
      ASSIGN_OR_RETURN(a.comp_wkv, Plain(p + "attn.compressor.wkv.weight", d, D));
      if (role.ratio > 1) {
        ASSIGN_OR_RETURN(a.comp_wgate, Plain(p + "attn.compressor.wgate.weight", d, D));
      }
      ASSIGN_OR_RETURN(a.comp_norm, Vector(p + "attn.compressor.norm.weight", {d}));
      ASSIGN_OR_RETURN(a.idx_wk, Plain(p + "attn.indexer.wk.weight", c.index_head_dim, d));
      ASSIGN_OR_RETURN(a.idx_k_norm, Vector(p + "attn.indexer.k_norm.weight", {c.index_head_dim}));
    }
    if (role.role == Role::kFull || role.role == Role::kReindex) {
      ASSIGN_OR_RETURN(a.idx_wq_b, Fp8(p + "attn.indexer.wq_b", c.index_n_heads * c.index_head_dim,
                                       c.q_lora_rank));
      ASSIGN_OR_RETURN(a.idx_weights_proj,
                       Plain(p + "attn.indexer.weights_proj.weight", c.index_n_heads, D));
    }
    MoeWeights41& m = b->ffn;
    const int64_t E = dspark ? c.dspark_n_routed_experts : c.n_routed_experts;
    m.top_k = dspark ? c.dspark_n_active_experts : c.n_active_experts;
    const int64_t I = c.moe_inter;
    ASSIGN_OR_RETURN(m.gate, Plain(p + "ffn.gate.weight", E, D));
    ASSIGN_OR_RETURN(m.bias, Vector(p + "ffn.gate.bias", {E}));
    if (ckpt_.Has(p + "ffn.gate.bias_vl")) {
      ASSIGN_OR_RETURN(m.bias_vl, Vector(p + "ffn.gate.bias_vl", {E}));
    } else {
      m.bias_vl = m.bias;
    }
    m.experts.resize(E);
    for (int64_t e = 0; e < E; ++e) {
      const std::string ep = absl::StrCat(p, "ffn.experts.", e, ".");
      ASSIGN_OR_RETURN(m.experts[e].w1, Expert(ep + "w1", I, D));
      ASSIGN_OR_RETURN(m.experts[e].w2, Expert(ep + "w2", D, I));
      ASSIGN_OR_RETURN(m.experts[e].w3, Expert(ep + "w3", I, D));
    }
    const int64_t SI = I * std::max<int64_t>(1, c.n_shared_experts);
    ASSIGN_OR_RETURN(m.shared.w1, Fp8(p + "ffn.shared_experts.w1", SI, D));
    ASSIGN_OR_RETURN(m.shared.w2, Fp8(p + "ffn.shared_experts.w2", D, SI));
    ASSIGN_OR_RETURN(m.shared.w3, Fp8(p + "ffn.shared_experts.w3", SI, D));
    // Active bytes per token: attention + shared + top-k experts.
    const int64_t eb = m.experts.empty() ? 0 : m.experts[0].w1.Bytes() * 3;
    w_->active_bytes_per_token += m.top_k * eb;
    if (role.engram) {
      b->has_engram = true;
      EngramWeights& g = b->engram;
      const int li =
          static_cast<int>(std::find(c.engram_layer_ids.begin(), c.engram_layer_ids.end(), l) -
                           c.engram_layer_ids.begin());
      const int64_t hd = c.engram_head_dim, cols = (c.engram_max_ngram - 1) * c.engram_n_heads;
      g.rows = c.engram_num_embeddings[li];
      ASSIGN_OR_RETURN(TensorView t,
                       Typed(p + "engram.embed.weight", {DType::kF8E4M3}, {g.rows, hd}));
      ASSIGN_OR_RETURN(TensorView s,
                       Typed(p + "engram.embed.scale", {DType::kF8E8M0}, {g.rows, hd / 32}));
      Count(t, g.rows * hd);
      w_->weight_bytes += s.byte_size;
      g.table = t.data;
      g.table_scale = s.data;
      ASSIGN_OR_RETURN(g.wkv, Fp8(p + "engram.wkv", (c.hc_mult + 1) * D, cols * hd));
      ASSIGN_OR_RETURN(std::vector<float> qw, Vector(p + "engram.q_weight", {c.hc_mult, D}));
      ASSIGN_OR_RETURN(std::vector<float> kw, Vector(p + "engram.k_weight", {c.hc_mult, D}));
      g.w.resize(qw.size());
      for (size_t i = 0; i < qw.size(); ++i) g.w[i] = qw[i] * kw[i];
    }
    return absl::OkStatus();
  }

  absl::Status All() {
    const Config& c = c_;
    const int64_t V = c.vocab_size, D = c.hidden_size;
    ASSIGN_OR_RETURN(w_->embed, Plain("embed.weight", V, D));
    ASSIGN_OR_RETURN(w_->head, Plain("head.weight", V, D));
    ASSIGN_OR_RETURN(w_->norm, Vector("norm.weight", {D}));
    w_->active_bytes_per_token = w_->head.Bytes();
    w_->blocks.resize(c.TotalBlocks());
    for (int64_t l = 0; l < c.TotalBlocks(); ++l) RETURN_IF_ERROR(Block(l, &w_->blocks[l]));
    if (c.num_dspark_layers > 0) {
      w_->has_dspark = true;
      DsparkWeights& s = w_->dspark;
      const std::string first = "mtp.0.";
      const std::string last = absl::StrCat("mtp.", c.num_dspark_layers - 1, ".");
      const int64_t nt = static_cast<int64_t>(c.dspark_target_layers.size());
      const int64_t R = c.dspark_markov_rank;
      ASSIGN_OR_RETURN(s.main_proj, Fp8(first + "main_proj", D, nt * D));
      ASSIGN_OR_RETURN(s.main_norm, Vector(first + "main_norm.weight", {D}));
      ASSIGN_OR_RETURN(s.norm, Vector(last + "norm.weight", {D}));
      ASSIGN_OR_RETURN(s.markov_embed, Plain(last + "markov_head.embed.weight", V, R));
      ASSIGN_OR_RETURN(s.markov_head, Plain(last + "markov_head.head.weight", V, R));
      ASSIGN_OR_RETURN(s.confidence, Plain(last + "confidence_head.proj.weight", 1, D + R));
    }
    int64_t vision = 0;
    for (const std::string& name : ckpt_.TensorNames()) {
      if (absl::StartsWith(name, "vision.") || absl::StartsWith(name, "aligner.") ||
          absl::StartsWith(name, "image_")) {
        ++vision;
      }
    }
    if (vision > 0) {
      LOG(INFO) << "DeepSeek-V4.1: ignoring " << vision
                << " vision tensors (vision.*, aligner.*, image_*): text-only engine";
    }
    return absl::OkStatus();
  }

 private:
  const Config& c_;
  const bool repack_;  // routed MXFP4 experts into the kernels' lane layout
  Weights41* w_;
};

}  // namespace

kernels::Fp8BlocksView Fp8View(const WeightMatrix& m) {
  CHECK_GT(m.fp8_block, 0);
  kernels::Fp8BlocksView v;
  v.data = static_cast<const uint8_t*>(m.data);
  v.scales = m.scale_f32 != nullptr ? static_cast<const void*>(m.scale_f32) : m.scale;
  v.scale_dtype = m.scale_f32 != nullptr ? kernels::ScaleDType::kF32 : kernels::ScaleDType::kE8M0;
  v.rows = m.rows;
  v.cols = m.cols;
  v.block_rows = v.block_cols = m.fp8_block;
  v.nan_free = m.fp8_nan_free;
  return v;
}

WeightMatrix Fp8SliceRows(const WeightMatrix& m, int64_t row_begin, int64_t count) {
  const kernels::Fp8BlocksView v = kernels::SliceFp8BlocksRows(Fp8View(m), row_begin, count);
  WeightMatrix s = m;
  s.rows = count;
  s.data = v.data;
  if (m.scale_f32 != nullptr) {
    s.scale_f32 = static_cast<const float*>(v.scales);
  } else {
    s.scale = static_cast<const uint8_t*>(v.scales);
  }
  return s;
}

absl::StatusOr<std::unique_ptr<Weights41>> BindWeights41(const Config& cfg, const Checkpoint& ckpt,
                                                         bool repack_experts) {
  auto w = std::make_unique<Weights41>();
  Binder b(cfg, ckpt, dsv4::TensorBinder::RepackExperts(repack_experts), w.get());
  RETURN_IF_ERROR(b.All());
  return w;
}

}  // namespace deepinfer::model::dsv41
