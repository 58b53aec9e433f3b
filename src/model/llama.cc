#include "model/llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"
#include "common/config.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/step_trace.h"
#include "common/thread_pool.h"
#include "kernels/ops.h"

namespace deepinfer::model {
namespace {

namespace k = ::deepinfer::kernels;

// FNV-1a 64: a stable (cross-process) hash for the KV layout id.
uint64_t Fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}
constexpr uint64_t kFnvSeed = 0xcbf29ce484222325ull;

// Multiply-adds below which an op runs on the calling thread.
constexpr int64_t kMinParallelWork = int64_t{1} << 18;

// A weight matrix [rows, cols] as the kernels see it, plus storage when it had to be copied
// (unaligned F32 data in the file).
struct Matrix {
  k::WeightView view;
  std::vector<float> owned;
};

// A norm weight [dim] in float32 (converted from BF16/F16 once at load; tiny).
using Vector = std::vector<float>;

absl::StatusOr<Vector> LoadVector(const Checkpoint& ckpt, const std::string& name, int64_t dim) {
  ASSIGN_OR_RETURN(TensorView t, ckpt.Get(name));
  if (t.shape != std::vector<int64_t>{dim}) {
    return absl::InvalidArgumentError(absl::StrCat(t.file, ": tensor '", name, "' has shape ",
                                                   t.DebugString(), ", expected [", dim, "]"));
  }
  Vector v(dim);
  switch (t.dtype) {
    case DType::kF32:
      std::memcpy(v.data(), t.data, dim * sizeof(float));
      break;
    case DType::kBF16:
      for (int64_t i = 0; i < dim; ++i) {
        uint16_t b;
        std::memcpy(&b, t.data + 2 * i, 2);
        v[i] = k::Bf16ToFloat(b);
      }
      break;
    default:
      return absl::UnimplementedError(absl::StrCat(t.file, ": tensor '", name, "' has dtype ",
                                                   std::string(DTypeName(t.dtype)),
                                                   "; Llama norms/biases support F32 and BF16"));
  }
  return v;
}

absl::StatusOr<Matrix> LoadMatrix(const Checkpoint& ckpt, const std::string& name, int64_t rows,
                                  int64_t cols) {
  ASSIGN_OR_RETURN(TensorView t, ckpt.Get(name));
  if (t.shape != std::vector<int64_t>{rows, cols}) {
    return absl::InvalidArgumentError(absl::StrCat(t.file, ": tensor ", t.DebugString(),
                                                   ", expected shape [", rows, ", ", cols, "]"));
  }
  Matrix m;
  m.view.rows = rows;
  m.view.cols = cols;
  switch (t.dtype) {
    case DType::kF32:
      m.view.dtype = k::WeightDType::kF32;
      if (t.IsAligned(alignof(float))) {
        m.view.data = t.data;
      } else {
        m.owned.resize(rows * cols);
        std::memcpy(m.owned.data(), t.data, t.byte_size);
        m.view.data = m.owned.data();
      }
      break;
    case DType::kBF16:
      m.view.dtype = k::WeightDType::kBF16;
      if (t.IsAligned(alignof(uint16_t))) {
        m.view.data = t.data;
      } else {
        m.owned.resize(rows * cols);
        for (int64_t i = 0; i < rows * cols; ++i) {
          uint16_t b;
          std::memcpy(&b, t.data + 2 * i, 2);
          m.owned[i] = k::Bf16ToFloat(b);
        }
        m.view.dtype = k::WeightDType::kF32;
        m.view.data = m.owned.data();
      }
      break;
    default:
      return absl::UnimplementedError(absl::StrCat(t.file, ": tensor '", name, "' has dtype ",
                                                   std::string(DTypeName(t.dtype)),
                                                   "; Llama weights support F32 and BF16"));
  }
  return m;
}

struct LayerWeights {
  Vector attn_norm, ffn_norm;
  Matrix wq, wk, wv, wo, w_gate, w_up, w_down;
  Vector bq, bk, bv, bo, b_gate, b_up, b_down;  // empty when the config has no biases
};

class Llama final : public CausalLM {
 public:
  Llama(LlamaConfig config, std::unique_ptr<Checkpoint> ckpt)
      : cfg_(std::move(config)), ckpt_(std::move(ckpt)) {}

  absl::Status Init(const LoadOptions& options, uint64_t config_hash);

  const ModelInfo& info() const override { return info_; }
  const KvLayout& kv_layout() const override { return layout_; }
  absl::Status Forward(const ForwardBatch& batch, const KvCacheView& kv,
                       ForwardOutput* out) override;
  // Layer l calls kv.BeforeRead(2l) and (2l + 1) (its K and V caches) before using them.
  bool supports_paged_gate() const override { return true; }

 private:
  absl::Status Validate(const ForwardBatch& batch, const KvCacheView& kv) const;
  // Linear with this model's workspace; bias may be empty.
  void Lin(const float* x, int64_t m, const Matrix& w, const Vector& bias, float* y);
  float* KvRow(const KvCacheView& kv, const SequenceChunk& c, int layer, bool value,
               int64_t pos) const {
    const int32_t block = c.block_table[pos / kBlockTokens];
    const int64_t row = pos % kBlockTokens;
    return reinterpret_cast<float*>(kv.block_base + block * block_bytes_ +
                                    paged_offset_[2 * layer + (value ? 1 : 0)] +
                                    row * kv_row_floats_ * 4);
  }

  LlamaConfig cfg_;
  std::unique_ptr<Checkpoint> ckpt_;
  ModelInfo info_;
  KvLayout layout_;
  int64_t block_bytes_ = 0;
  std::vector<int64_t> paged_offset_;  // [2 * num_layers]: k, v of each layer
  int64_t kv_row_floats_ = 0;
  std::vector<double> rope_freqs_;

  Matrix embed_;
  Matrix lm_head_;                 // view of embed_ when tied
  std::vector<float> bf16_input_;  // Lin's rounded input (DEEPINFER_BF16_ACTIVATIONS)
  Vector final_norm_;
  std::vector<LayerWeights> layers_;

  ThreadPool* pool_ = nullptr;
  std::vector<uint8_t> workspace_;  // Linear workspace, grown on demand
};

absl::Status Llama::Init(const LoadOptions& options, uint64_t config_hash) {
  const LlamaConfig& c = cfg_;
  const int64_t d = c.hidden_size, hd = c.head_dim, nh = c.num_attention_heads,
                nkv = c.num_key_value_heads, f = c.intermediate_size;
  ASSIGN_OR_RETURN(embed_, LoadMatrix(*ckpt_, "model.embed_tokens.weight", c.vocab_size, d));
  if (c.tie_word_embeddings) {
    if (ckpt_->Has("lm_head.weight")) {
      // Some exporters write the tied copy anyway; it must equal the embedding, so use that.
      LOG(INFO) << "tie_word_embeddings: ignoring the lm_head.weight copy in the checkpoint";
    }
    lm_head_.view = embed_.view;
  } else {
    ASSIGN_OR_RETURN(lm_head_, LoadMatrix(*ckpt_, "lm_head.weight", c.vocab_size, d));
  }
  ASSIGN_OR_RETURN(final_norm_, LoadVector(*ckpt_, "model.norm.weight", d));
  layers_.resize(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    LayerWeights& w = layers_[l];
    const std::string p = absl::StrCat("model.layers.", l, ".");
    ASSIGN_OR_RETURN(w.attn_norm, LoadVector(*ckpt_, p + "input_layernorm.weight", d));
    ASSIGN_OR_RETURN(w.ffn_norm, LoadVector(*ckpt_, p + "post_attention_layernorm.weight", d));
    ASSIGN_OR_RETURN(w.wq, LoadMatrix(*ckpt_, p + "self_attn.q_proj.weight", nh * hd, d));
    ASSIGN_OR_RETURN(w.wk, LoadMatrix(*ckpt_, p + "self_attn.k_proj.weight", nkv * hd, d));
    ASSIGN_OR_RETURN(w.wv, LoadMatrix(*ckpt_, p + "self_attn.v_proj.weight", nkv * hd, d));
    ASSIGN_OR_RETURN(w.wo, LoadMatrix(*ckpt_, p + "self_attn.o_proj.weight", d, nh * hd));
    ASSIGN_OR_RETURN(w.w_gate, LoadMatrix(*ckpt_, p + "mlp.gate_proj.weight", f, d));
    ASSIGN_OR_RETURN(w.w_up, LoadMatrix(*ckpt_, p + "mlp.up_proj.weight", f, d));
    ASSIGN_OR_RETURN(w.w_down, LoadMatrix(*ckpt_, p + "mlp.down_proj.weight", d, f));
    if (c.attention_bias) {
      ASSIGN_OR_RETURN(w.bq, LoadVector(*ckpt_, p + "self_attn.q_proj.bias", nh * hd));
      ASSIGN_OR_RETURN(w.bk, LoadVector(*ckpt_, p + "self_attn.k_proj.bias", nkv * hd));
      ASSIGN_OR_RETURN(w.bv, LoadVector(*ckpt_, p + "self_attn.v_proj.bias", nkv * hd));
      ASSIGN_OR_RETURN(w.bo, LoadVector(*ckpt_, p + "self_attn.o_proj.bias", d));
    }
    if (c.mlp_bias) {
      ASSIGN_OR_RETURN(w.b_gate, LoadVector(*ckpt_, p + "mlp.gate_proj.bias", f));
      ASSIGN_OR_RETURN(w.b_up, LoadVector(*ckpt_, p + "mlp.up_proj.bias", f));
      ASSIGN_OR_RETURN(w.b_down, LoadVector(*ckpt_, p + "mlp.down_proj.bias", d));
    }
  }
  rope_freqs_ = LlamaRopeFrequencies(c);

  // KV layout: K and V per layer, post-RoPE float32 rows.
  kv_row_floats_ = nkv * hd;
  uint64_t id = Fnv1a(kFnvSeed, "deepinfer.llama.kv.f32.v1", 25);
  id = Fnv1a(id, &config_hash, sizeof(config_hash));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (const char* kind : {"k", "v"}) {
      layout_.paged.push_back(
          PagedCacheSpec{absl::StrCat("layers.", l, ".", kind), kv_row_floats_ * 4, kBlockTokens});
    }
  }
  layout_.layout_id = id;
  block_bytes_ = layout_.BlockBytes();
  for (int i = 0; i < static_cast<int>(layout_.paged.size()); ++i) {
    paged_offset_.push_back(layout_.PagedOffset(i));
  }

  // Model facts.
  info_.architecture = "LlamaForCausalLM";
  info_.model_type = "llama";
  info_.vocab_size = c.vocab_size;
  info_.max_context = c.max_position_embeddings;
  info_.hidden_size = d;
  info_.num_layers = c.num_hidden_layers;
  info_.bos_token_id = c.bos_token_id;
  info_.eos_token_ids = c.eos_token_ids;
  int64_t params = 0, bytes = 0, active = 0;
  for (const std::string& name : ckpt_->TensorNames()) {
    TensorView t = *ckpt_->Get(name);
    params += t.NumElements();
    bytes += t.byte_size;
    // Decoding one token reads every matrix except the embedding table (one row of it).
    if (name != "model.embed_tokens.weight") active += t.byte_size;
  }
  if (c.tie_word_embeddings)
    active +=
        embed_.view.rows * embed_.view.cols * (embed_.view.dtype == k::WeightDType::kF32 ? 4 : 2);
  info_.num_parameters = params;
  info_.weight_bytes = bytes;
  info_.active_weight_bytes_per_token = active;

  // Heap memory of the model itself (norm vectors, copies of unaligned weights); the weights
  // proper stay in the page cache through the mapping.
  int64_t owned =
      static_cast<int64_t>(final_norm_.size() + embed_.owned.size() + lm_head_.owned.size()) * 4;
  for (const LayerWeights& w : layers_) {
    for (const Vector* v :
         {&w.attn_norm, &w.ffn_norm, &w.bq, &w.bk, &w.bv, &w.bo, &w.b_gate, &w.b_up, &w.b_down}) {
      owned += static_cast<int64_t>(v->size()) * 4;
    }
    for (const Matrix* m : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down}) {
      owned += static_cast<int64_t>(m->owned.size()) * 4;
    }
  }
  pool_ = ThreadPool::Default();
  if (options.show_progress) {
    LOG(INFO) << "Llama: " << c.num_hidden_layers << " layers, hidden " << d << ", heads " << nh
              << "/" << nkv << " (head_dim " << hd << "), vocab " << c.vocab_size << ": " << params
              << " parameters, " << bytes << " bytes of weights mapped (" << ckpt_->file_bytes()
              << " bytes of files), " << owned << " bytes of heap copies; KV " << block_bytes_
              << " bytes per " << kBlockTokens << "-token block";
  }
  return absl::OkStatus();
}

void Llama::Lin(const float* x, int64_t m, const Matrix& w, const Vector& bias, float* y) {
  k::LinearOptions opt;
  opt.bias = bias.empty() ? nullptr : bias.data();
  if (Env().bf16_activations) {
    // DEEPINFER_BF16_ACTIVATIONS: the input rounded to BF16 (llama.cpp's vec_dot type for BF16
    // weights); with BF16 weights the products are then exact in FP32 and take the BF16-dot
    // kernels where the CPU has them.
    const int64_t n = m * w.view.cols;
    if (static_cast<int64_t>(bf16_input_.size()) < n) bf16_input_.resize(n);
    std::copy(x, x + n, bf16_input_.begin());
    k::RoundToBf16(bf16_input_.data(), n);
    x = bf16_input_.data();
    opt.input_is_bf16 = w.view.dtype == k::WeightDType::kBF16;
  }
  // Small products run on the calling thread: waking the pool costs more than it saves. Linear
  // splits work along N only, so the result does not depend on this choice.
  ThreadPool* pool = m * w.view.rows * w.view.cols >= kMinParallelWork ? pool_ : nullptr;
  const size_t ws = k::LinearWorkspaceBytes(m, w.view, opt, pool);
  if (ws > workspace_.size()) workspace_.resize(ws + 64);
  // 64-byte align inside the buffer.
  uint8_t* base = workspace_.data();
  size_t adjust = (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  if (ws + adjust > workspace_.size()) {
    workspace_.resize(ws + adjust + 64);
    base = workspace_.data();
    adjust = (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  }
  k::Linear(x, m, w.view, y, opt, pool, ws == 0 ? nullptr : base + adjust, ws);
}

absl::Status Llama::Validate(const ForwardBatch& batch, const KvCacheView& kv) const {
  for (size_t i = 0; i < batch.chunks.size(); ++i) {
    const SequenceChunk& c = batch.chunks[i];
    const std::string where = absl::StrCat("chunk ", i);
    if (c.tokens.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": no tokens"));
    if (c.start_pos < 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": negative start_pos"));
    }
    if (c.replay_start != 0 || c.replay_until > c.start_pos) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": Llama has no window state to replay (replay range [",
                       c.replay_start, ", ", c.replay_until, "))"));
    }
    const int64_t end = c.start_pos + static_cast<int64_t>(c.tokens.size());
    if (end > cfg_.max_position_embeddings) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": positions up to ", end - 1,
                                                     " exceed max_position_embeddings ",
                                                     cfg_.max_position_embeddings));
    }
    for (int32_t t : c.tokens) {
      if (t < 0 || t >= cfg_.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": token id ", t, " outside the vocabulary [0, ", cfg_.vocab_size, ")"));
      }
    }
    const int64_t need = (end + kBlockTokens - 1) / kBlockTokens;
    if (static_cast<int64_t>(c.block_table.size()) < need) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": block table has ", c.block_table.size(), " blocks, positions [0, ",
                       end, ") need ", need));
    }
    for (int64_t b = 0; b < need; ++b) {
      if (c.block_table[b] < 0 || c.block_table[b] >= kv.num_blocks) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": block id ", c.block_table[b],
                                                       " outside [0, ", kv.num_blocks, ")"));
      }
    }
    if (kv.block_base == nullptr) {
      return absl::InvalidArgumentError("KvCacheView has no block arena");
    }
  }
  return absl::OkStatus();
}

absl::Status Llama::Forward(const ForwardBatch& batch, const KvCacheView& kv, ForwardOutput* out) {
  RETURN_IF_ERROR(Validate(batch, kv));
  if (batch.chunks.empty()) {
    out->logits.clear();
    out->chunk_row_begin.assign(1, 0);
    return absl::OkStatus();
  }
  const LlamaConfig& c = cfg_;
  const int64_t d = c.hidden_size, hd = c.head_dim, nh = c.num_attention_heads,
                nkv = c.num_key_value_heads, f = c.intermediate_size, half = hd / 2;

  // Flatten the batch: token t belongs to chunk chunk_of[t] at position pos[t].
  std::vector<int32_t> ids;
  std::vector<int64_t> pos;
  std::vector<int32_t> chunk_of;
  for (size_t i = 0; i < batch.chunks.size(); ++i) {
    const SequenceChunk& ch = batch.chunks[i];
    for (size_t j = 0; j < ch.tokens.size(); ++j) {
      ids.push_back(ch.tokens[j]);
      pos.push_back(ch.start_pos + static_cast<int64_t>(j));
      chunk_of.push_back(static_cast<int32_t>(i));
    }
  }
  const int64_t T = static_cast<int64_t>(ids.size());

  std::vector<float> x(T * d), h(T * d), q(T * nh * hd), kk(T * nkv * hd), vv(T * nkv * hd),
      attn(T * nh * hd), gate(T * f), up(T * f);
  std::vector<float> cos_tab(T * half), sin_tab(T * half);
  k::RopeCosSin(rope_freqs_.data(), hd, pos.data(), T, cos_tab.data(), sin_tab.data());
  k::EmbeddingGather(embed_.view, ids.data(), T, x.data());

  // Per chunk, row pointers of K and V for positions [0, end) of the current layer.
  int64_t max_end = 0;
  for (const SequenceChunk& ch : batch.chunks) {
    max_end = std::max<int64_t>(max_end, ch.start_pos + static_cast<int64_t>(ch.tokens.size()));
  }
  std::vector<const float*> k_rows(max_end), v_rows(max_end);
  std::vector<float> att_ws(k::AttentionWorkspaceFloats(nh, max_end));
  k::AttentionOptions att_opt;
  att_opt.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  const float eps = static_cast<float>(c.rms_norm_eps);
  const Vector kNoBias;

  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    TraceSpan layer_span("layer");  // `deepinfer bench --trace`: one span per layer
    const LayerWeights& w = layers_[l];
    // Swap-in running beside this forward: layer l's K and V caches first.
    kv.BeforeRead(static_cast<int>(2 * l));
    kv.BeforeRead(static_cast<int>(2 * l + 1));
    k::RmsNorm(x.data(), h.data(), T, d, w.attn_norm.data(), eps);
    Lin(h.data(), T, w.wq, w.bq, q.data());
    Lin(h.data(), T, w.wk, w.bk, kk.data());
    Lin(h.data(), T, w.wv, w.bv, vv.data());
    k::ApplyRope(q.data(), T, nh, hd, hd, cos_tab.data(), sin_tab.data(), k::RopeStyle::kHalfSplit,
                 /*inverse=*/false);
    k::ApplyRope(kk.data(), T, nkv, hd, hd, cos_tab.data(), sin_tab.data(),
                 k::RopeStyle::kHalfSplit, /*inverse=*/false);
    // Store this step's K/V rows, then attend over the cache (which now holds them).
    for (int64_t t = 0; t < T; ++t) {
      const SequenceChunk& ch = batch.chunks[chunk_of[t]];
      std::memcpy(KvRow(kv, ch, l, false, pos[t]), &kk[t * kv_row_floats_], kv_row_floats_ * 4);
      std::memcpy(KvRow(kv, ch, l, true, pos[t]), &vv[t * kv_row_floats_], kv_row_floats_ * 4);
    }
    int64_t t = 0;
    for (const SequenceChunk& ch : batch.chunks) {
      const int64_t end = ch.start_pos + static_cast<int64_t>(ch.tokens.size());
      for (int64_t p = 0; p < end; ++p) {
        k_rows[p] = KvRow(kv, ch, l, false, p);
        v_rows[p] = KvRow(kv, ch, l, true, p);
      }
      for (size_t j = 0; j < ch.tokens.size(); ++j, ++t) {
        // Causal: the token at position p sees positions [0, p].
        const int64_t n_keys = pos[t] + 1;
        k::AttentionGqa(&q[t * nh * hd], nh, nkv, hd, k_rows.data(), v_rows.data(), n_keys, att_opt,
                        &attn[t * nh * hd], att_ws.data(),
                        2 * n_keys * nh * hd >= kMinParallelWork ? pool_ : nullptr);
      }
    }
    Lin(attn.data(), T, w.wo, w.bo, h.data());
    k::Add(x.data(), h.data(), x.data(), T * d);

    k::RmsNorm(x.data(), h.data(), T, d, w.ffn_norm.data(), eps);
    Lin(h.data(), T, w.w_gate, w.b_gate, gate.data());
    Lin(h.data(), T, w.w_up, w.b_up, up.data());
    k::SwiGlu(gate.data(), up.data(), gate.data(), T * f, /*limit=*/0.0f);
    Lin(gate.data(), T, w.w_down, w.b_down, h.data());
    k::Add(x.data(), h.data(), x.data(), T * d);
  }

  // Rows that want logits.
  std::vector<int64_t> rows;
  out->chunk_row_begin.assign(1, 0);
  int64_t t0 = 0;
  for (const SequenceChunk& ch : batch.chunks) {
    const int64_t n = static_cast<int64_t>(ch.tokens.size());
    if (ch.logits == LogitsMode::kLast) {
      rows.push_back(t0 + n - 1);
    } else if (ch.logits == LogitsMode::kAll) {
      for (int64_t j = 0; j < n; ++j) rows.push_back(t0 + j);
    }
    out->chunk_row_begin.push_back(static_cast<int64_t>(rows.size()));
    t0 += n;
  }
  const int64_t R = static_cast<int64_t>(rows.size());
  std::vector<float> sel(R * d);
  for (int64_t r = 0; r < R; ++r) {
    std::memcpy(&sel[r * d], &x[rows[r] * d], d * sizeof(float));
  }
  k::RmsNorm(sel.data(), sel.data(), R, d, final_norm_.data(), eps);
  out->logits.resize(R * c.vocab_size);
  if (R > 0) Lin(sel.data(), R, lm_head_, kNoBias, out->logits.data());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LlamaConfig> ParseLlamaConfig(const HfConfig& hf) {
  LlamaConfig c;
  ASSIGN_OR_RETURN(c.vocab_size, hf.GetInt("vocab_size"));
  ASSIGN_OR_RETURN(c.hidden_size, hf.GetInt("hidden_size"));
  ASSIGN_OR_RETURN(c.intermediate_size, hf.GetInt("intermediate_size"));
  ASSIGN_OR_RETURN(c.num_hidden_layers, hf.GetInt("num_hidden_layers"));
  ASSIGN_OR_RETURN(c.num_attention_heads, hf.GetInt("num_attention_heads"));
  ASSIGN_OR_RETURN(c.num_key_value_heads, hf.GetInt("num_key_value_heads", c.num_attention_heads));
  ASSIGN_OR_RETURN(c.max_position_embeddings, hf.GetInt("max_position_embeddings", 2048));
  ASSIGN_OR_RETURN(c.rope_theta, hf.GetDouble("rope_theta", 10000.0));
  ASSIGN_OR_RETURN(c.rms_norm_eps, hf.GetDouble("rms_norm_eps", 1e-6));
  ASSIGN_OR_RETURN(c.tie_word_embeddings, hf.GetBool("tie_word_embeddings", false));
  ASSIGN_OR_RETURN(c.attention_bias, hf.GetBool("attention_bias", false));
  ASSIGN_OR_RETURN(c.mlp_bias, hf.GetBool("mlp_bias", false));
  ASSIGN_OR_RETURN(int64_t bos, hf.GetInt("bos_token_id", -1));
  c.bos_token_id = static_cast<int32_t>(bos);
  if (hf.Has("eos_token_id")) {
    ASSIGN_OR_RETURN(std::vector<int64_t> eos, hf.GetIntList("eos_token_id"));
    for (int64_t e : eos) c.eos_token_ids.push_back(static_cast<int32_t>(e));
  }
  ASSIGN_OR_RETURN(std::string act, hf.GetString("hidden_act", "silu"));
  if (act != "silu") {
    return absl::UnimplementedError(absl::StrCat(hf.source(), ": hidden_act '", act,
                                                 "' is not supported for Llama (supported: silu)"));
  }
  auto positive = [&](const char* key, int64_t v) -> absl::Status {
    if (v <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(hf.source(), ": '", key, "' must be positive, got ", v));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(positive("vocab_size", c.vocab_size));
  RETURN_IF_ERROR(positive("hidden_size", c.hidden_size));
  RETURN_IF_ERROR(positive("intermediate_size", c.intermediate_size));
  RETURN_IF_ERROR(positive("num_hidden_layers", c.num_hidden_layers));
  RETURN_IF_ERROR(positive("num_attention_heads", c.num_attention_heads));
  RETURN_IF_ERROR(positive("num_key_value_heads", c.num_key_value_heads));
  RETURN_IF_ERROR(positive("max_position_embeddings", c.max_position_embeddings));
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(hf.source(), ": num_attention_heads ", c.num_attention_heads,
                     " is not a multiple of num_key_value_heads ", c.num_key_value_heads));
  }
  if (hf.Has("head_dim")) {
    ASSIGN_OR_RETURN(c.head_dim, hf.GetInt("head_dim"));
  } else {
    if (c.hidden_size % c.num_attention_heads != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(hf.source(), ": no 'head_dim' and hidden_size ", c.hidden_size,
                       " is not a multiple of num_attention_heads ", c.num_attention_heads));
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim <= 0 || c.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(hf.source(), ": 'head_dim' must be positive and even, got ", c.head_dim));
  }
  if (!(c.rope_theta > 0) || !(c.rms_norm_eps >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(hf.source(), ": 'rope_theta' must be > 0 and 'rms_norm_eps' >= 0"));
  }
  if (hf.Has("rope_scaling")) {
    ASSIGN_OR_RETURN(HfConfig rs, hf.GetObject("rope_scaling"));
    std::string type;
    if (rs.Has("rope_type")) {
      ASSIGN_OR_RETURN(type, rs.GetString("rope_type"));
    } else {
      ASSIGN_OR_RETURN(type, rs.GetString("type"));
    }
    LlamaRopeScaling& s = c.rope_scaling;
    if (type == "default") {
      s.kind = RopeScalingKind::kNone;
    } else if (type == "linear") {
      s.kind = RopeScalingKind::kLinear;
      ASSIGN_OR_RETURN(s.factor, rs.GetDouble("factor"));
    } else if (type == "llama3") {
      s.kind = RopeScalingKind::kLlama3;
      ASSIGN_OR_RETURN(s.factor, rs.GetDouble("factor"));
      ASSIGN_OR_RETURN(s.low_freq_factor, rs.GetDouble("low_freq_factor"));
      ASSIGN_OR_RETURN(s.high_freq_factor, rs.GetDouble("high_freq_factor"));
      ASSIGN_OR_RETURN(s.original_max_position_embeddings,
                       rs.GetInt("original_max_position_embeddings"));
      if (!(s.high_freq_factor > s.low_freq_factor) || !(s.low_freq_factor > 0) ||
          s.original_max_position_embeddings <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(hf.source(),
                         ": rope_scaling llama3 needs high_freq_factor > low_freq_factor > 0 and "
                         "original_max_position_embeddings > 0"));
      }
    } else {
      return absl::UnimplementedError(
          absl::StrCat(hf.source(), ": rope_scaling type '", type,
                       "' is not supported for Llama (supported: none/default, linear, llama3)"));
    }
    if (!(s.factor > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(hf.source(), ": rope_scaling.factor must be > 0"));
    }
  }
  return c;
}

std::vector<double> LlamaRopeFrequencies(const LlamaConfig& c) {
  const int64_t half = c.head_dim / 2;
  std::vector<double> f(half);
  k::RopeFrequencies(c.head_dim, c.rope_theta, f.data());
  const LlamaRopeScaling& s = c.rope_scaling;
  switch (s.kind) {
    case RopeScalingKind::kNone:
      break;
    case RopeScalingKind::kLinear:
      for (double& v : f) v /= s.factor;
      break;
    case RopeScalingKind::kLlama3: {
      // transformers _compute_llama3_parameters.
      const double old_ctx = static_cast<double>(s.original_max_position_embeddings);
      const double low_freq_wavelen = old_ctx / s.low_freq_factor;
      const double high_freq_wavelen = old_ctx / s.high_freq_factor;
      for (double& v : f) {
        const double wavelen = 2 * std::numbers::pi / v;
        if (wavelen > low_freq_wavelen) {
          v = v / s.factor;
        } else if (wavelen >= high_freq_wavelen) {
          const double smooth =
              (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
          v = (1 - smooth) * v / s.factor + smooth * v;
        }
      }
      break;
    }
  }
  return f;
}

absl::StatusOr<std::unique_ptr<CausalLM>> LoadLlama(const std::string& dir,
                                                    const LoadOptions& options) {
  ASSIGN_OR_RETURN(HfConfig hf, HfConfig::Load(dir));
  ASSIGN_OR_RETURN(LlamaConfig config, ParseLlamaConfig(hf));
  CheckpointOptions copt;
  if (options.show_progress) {
    copt.progress = [](int64_t done, int64_t total) {
      LOG(INFO) << "mapped " << done << " / " << total << " bytes ("
                << (total > 0 ? 100 * done / total : 100) << "%)";
    };
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(dir, copt));
  // Identity of the cached bytes: the config plus a fingerprint of every tensor (name, size and
  // its first bytes: cheap, and different checkpoints of one shape differ there).
  const std::string dump = hf.json().dump();
  uint64_t config_hash = Fnv1a(kFnvSeed, dump.data(), dump.size());
  for (const std::string& name : ckpt->TensorNames()) {
    const TensorView t = *ckpt->Get(name);
    config_hash = Fnv1a(config_hash, name.data(), name.size());
    config_hash = Fnv1a(config_hash, &t.byte_size, sizeof(t.byte_size));
    config_hash =
        Fnv1a(config_hash, t.data, static_cast<size_t>(std::min<int64_t>(t.byte_size, 64)));
  }
  auto model = std::make_unique<Llama>(std::move(config), std::move(ckpt));
  RETURN_IF_ERROR(model->Init(options, config_hash));
  return std::unique_ptr<CausalLM>(std::move(model));
}

}  // namespace deepinfer::model
