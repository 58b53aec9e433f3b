#include "model/deepseek_v4_weights.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/status.h"
#include "common/thread_pool.h"
#include "model/deepseek_v4_tensor_binder.h"

namespace deepinfer::model::dsv4 {
namespace {

// V4's binder: the shared tensor checks (TensorBinder) plus the V4 formats (128-tile FP8, lane
// repacking of the routed FP4 experts, compressors, hash routing, MTP).
class Binder : public TensorBinder {
 public:
  Binder(const Config& c, const Checkpoint& ckpt, bool repack, Weights* w)
      : TensorBinder(ckpt, &w->owned, &w->num_parameters, &w->weight_bytes),
        c_(c),
        repack_(repack),
        w_(w) {}

  // FP8 block matrix `prefix.weight` [rows, cols] + `prefix.scale` [ceil(rows/128),
  // ceil(cols/128)].
  absl::StatusOr<WeightMatrix> Fp8(const std::string& prefix, int64_t rows, int64_t cols) {
    return Fp8Tiles(prefix, rows, cols, 128);
  }

  // Routed expert matrix: packed FP4 (I8 [rows, cols/2] + E8M0 [rows, cols/32]) or, with
  // expert_dtype fp8, an FP8 block matrix.
  absl::StatusOr<WeightMatrix> Expert(const std::string& prefix, int64_t rows, int64_t cols) {
    if (!c_.expert_fp4) return Fp8(prefix, rows, cols);
    ASSIGN_OR_RETURN(WeightMatrix m, Mxfp4(prefix, rows, cols));
    if (repack_) PackExpertLanes(&m, &w_->lane_packs, &w_->lane_pack_bytes);
    return m;
  }

  // mHC parameters of a site (scale [3]) or of an HC head (kind "head", scale [1]).
  absl::StatusOr<HcWeights> Hc(const std::string& prefix, const std::string& kind, int64_t mix) {
    return TensorBinder::Hc(prefix, kind, mix, c_.hc_mult * c_.hidden_size,
                            kind == "head" ? 1 : int64_t{3});
  }

  absl::StatusOr<CompressorWeights> Compressor(const std::string& prefix, int64_t ratio,
                                               int64_t width) {
    CompressorWeights cw;
    cw.ratio = ratio;
    cw.width = width;
    cw.coff = ratio == 4 ? 2 : 1;
    const int64_t out = cw.coff * width;
    ASSIGN_OR_RETURN(cw.ape, Vector(prefix + "ape", {ratio, out}));
    ASSIGN_OR_RETURN(cw.wkv, Plain(prefix + "wkv.weight", out, c_.hidden_size));
    ASSIGN_OR_RETURN(cw.wgate, Plain(prefix + "wgate.weight", out, c_.hidden_size));
    ASSIGN_OR_RETURN(cw.norm, Vector(prefix + "norm.weight", {width}));
    return cw;
  }

  absl::StatusOr<ExpertWeights> Swiglu(const std::string& prefix, bool routed) {
    ExpertWeights e;
    const int64_t D = c_.hidden_size, I = c_.moe_inter;
    if (routed) {
      ASSIGN_OR_RETURN(e.w1, Expert(prefix + "w1", I, D));
      ASSIGN_OR_RETURN(e.w2, Expert(prefix + "w2", D, I));
      ASSIGN_OR_RETURN(e.w3, Expert(prefix + "w3", I, D));
    } else {
      ASSIGN_OR_RETURN(e.w1, Fp8(prefix + "w1", I, D));
      ASSIGN_OR_RETURN(e.w2, Fp8(prefix + "w2", D, I));
      ASSIGN_OR_RETURN(e.w3, Fp8(prefix + "w3", I, D));
    }
    return e;
  }

  absl::Status Block(const std::string& p, int64_t layer_id, BlockWeights* b) {
    const int64_t D = c_.hidden_size, H = c_.num_heads, d = c_.head_dim;
    const int64_t n = c_.hc_mult, mix = (2 + n) * n;
    b->layer_id = layer_id;
    b->ratio = c_.Ratio(layer_id);
    ASSIGN_OR_RETURN(b->hc_attn, Hc(p, "attn", mix));
    ASSIGN_OR_RETURN(b->hc_ffn, Hc(p, "ffn", mix));
    ASSIGN_OR_RETURN(b->attn_norm, Vector(p + "attn_norm.weight", {D}));
    ASSIGN_OR_RETURN(b->ffn_norm, Vector(p + "ffn_norm.weight", {D}));
    AttentionWeights& a = b->attn;
    const std::string ap = p + "attn.";
    ASSIGN_OR_RETURN(a.sink, Vector(ap + "attn_sink", {H}));
    ASSIGN_OR_RETURN(a.wq_a, Fp8(ap + "wq_a", c_.q_lora_rank, D));
    ASSIGN_OR_RETURN(a.q_norm, Vector(ap + "q_norm.weight", {c_.q_lora_rank}));
    ASSIGN_OR_RETURN(a.wq_b, Fp8(ap + "wq_b", H * d, c_.q_lora_rank));
    ASSIGN_OR_RETURN(a.wkv, Fp8(ap + "wkv", d, D));
    ASSIGN_OR_RETURN(a.kv_norm, Vector(ap + "kv_norm.weight", {d}));
    ASSIGN_OR_RETURN(a.wo_a, Fp8(ap + "wo_a", c_.o_groups * c_.o_lora_rank, H * d / c_.o_groups));
    ASSIGN_OR_RETURN(a.wo_b, Fp8(ap + "wo_b", D, c_.o_groups * c_.o_lora_rank));
    if (b->ratio > 0) {
      a.has_compressor = true;
      ASSIGN_OR_RETURN(a.compressor, Compressor(ap + "compressor.", b->ratio, d));
      if (b->ratio == 4) {
        a.has_indexer = true;
        const int64_t IH = c_.index_n_heads, ID = c_.index_head_dim;
        ASSIGN_OR_RETURN(a.idx_wq_b, Fp8(ap + "indexer.wq_b", IH * ID, c_.q_lora_rank));
        ASSIGN_OR_RETURN(a.idx_weights_proj, Plain(ap + "indexer.weights_proj.weight", IH, D));
        ASSIGN_OR_RETURN(a.idx_compressor, Compressor(ap + "indexer.compressor.", 4, ID));
      }
    }
    MoeWeights& f = b->ffn;
    const std::string fp = p + "ffn.";
    const int64_t E = c_.n_routed_experts;
    f.hash = layer_id < c_.num_hash_layers;
    ASSIGN_OR_RETURN(f.gate, Plain(fp + "gate.weight", E, D));
    if (f.hash) {
      const int64_t K = c_.n_active_experts;
      ASSIGN_OR_RETURN(TensorView t,
                       Typed(fp + "gate.tid2eid", {DType::kI64, DType::kI32}, {c_.vocab_size, K}));
      Count(t, t.NumElements());
      f.tid2eid.resize(c_.vocab_size * K);
      for (int64_t i = 0; i < c_.vocab_size * K; ++i) {
        int64_t v;
        if (t.dtype == DType::kI64) {
          std::memcpy(&v, t.data + 8 * i, 8);
        } else {
          int32_t v32;
          std::memcpy(&v32, t.data + 4 * i, 4);
          v = v32;
        }
        if (v < 0 || v >= E) {
          return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name, " in ", t.file,
                                                         ": entry ", i, " = ", v,
                                                         " is not an expert id < ", E));
        }
        f.tid2eid[i] = static_cast<int32_t>(v);
      }
    } else {
      ASSIGN_OR_RETURN(f.bias, Vector(fp + "gate.bias", {E}));
    }
    f.experts.resize(E);
    for (int64_t e = 0; e < E; ++e) {
      ASSIGN_OR_RETURN(f.experts[e], Swiglu(absl::StrCat(fp, "experts.", e, "."), true));
    }
    ASSIGN_OR_RETURN(f.shared, Swiglu(fp + "shared_experts.", false));
    return absl::OkStatus();
  }

  absl::Status All() {
    const int64_t D = c_.hidden_size, V = c_.vocab_size, n = c_.hc_mult;
    ASSIGN_OR_RETURN(w_->embed, Plain("embed.weight", V, D));
    ASSIGN_OR_RETURN(w_->head, Plain("head.weight", V, D));
    ASSIGN_OR_RETURN(w_->norm, Vector("norm.weight", {D}));
    ASSIGN_OR_RETURN(w_->hc_head, Hc("", "head", n));
    w_->blocks.resize(c_.num_layers);
    for (int64_t i = 0; i < c_.num_layers; ++i) {
      RETURN_IF_ERROR(Block(absl::StrCat("layers.", i, "."), i, &w_->blocks[i]));
    }
    const int64_t bytes_before_mtp = w_->weight_bytes;
    w_->mtp.resize(c_.num_mtp_layers);
    for (int64_t j = 0; j < c_.num_mtp_layers; ++j) {
      const std::string p = absl::StrCat("mtp.", j, ".");
      MtpWeights& m = w_->mtp[j];
      RETURN_IF_ERROR(Block(p, c_.num_layers + j, &m.block));
      ASSIGN_OR_RETURN(m.e_proj, Fp8(p + "e_proj", D, D));
      ASSIGN_OR_RETURN(m.h_proj, Fp8(p + "h_proj", D, D));
      ASSIGN_OR_RETURN(m.enorm, Vector(p + "enorm.weight", {D}));
      ASSIGN_OR_RETURN(m.hnorm, Vector(p + "hnorm.weight", {D}));
      ASSIGN_OR_RETURN(m.norm, Vector(p + "norm.weight", {D}));
      ASSIGN_OR_RETURN(m.hc_head, Hc(p, "head", n));
    }
    // Bytes read per plain decode step at batch 1: every main-model tensor except the routed
    // experts, plus num_experts_per_tok experts per layer and one embedding row (no MTP).
    int64_t active = bytes_before_mtp - w_->embed.Bytes() + w_->embed.Bytes() / V;
    for (const BlockWeights& b : w_->blocks) {
      for (const ExpertWeights& e : b.ffn.experts) {
        active -= e.w1.Bytes() + e.w2.Bytes() + e.w3.Bytes();
      }
      if (!b.ffn.experts.empty()) {
        const ExpertWeights& e = b.ffn.experts[0];
        active += c_.n_active_experts * (e.w1.Bytes() + e.w2.Bytes() + e.w3.Bytes());
      }
    }
    w_->active_bytes_per_token = active;
    return absl::OkStatus();
  }

 private:
  const Config& c_;
  const bool repack_;  // routed FP4 experts into the kernels' lane layout
  Weights* w_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Weights>> BindWeights(const Config& config, const Checkpoint& ckpt,
                                                     bool repack_experts) {
  auto w = std::make_unique<Weights>();
  Binder binder(config, ckpt, TensorBinder::RepackExperts(repack_experts), w.get());
  RETURN_IF_ERROR(binder.All());
  return w;
}

}  // namespace deepinfer::model::dsv4
