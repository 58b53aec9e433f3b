#include "engine/model_runner.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <span>

#include "common/check.h"
#include "common/clock.h"
#include "common/thread_pool.h"
#include "engine/sampler.h"
#include "engine/speculative/rejection_sampler.h"
#include "engine/step_trace.h"
#include "engine/swap_in.h"

namespace deepinfer::engine {
namespace {

bool Contains(std::span<const int32_t> v, int32_t t) {
  return std::find(v.begin(), v.end(), t) != v.end();
}

// Salts of the sampled-draft uniforms (distinct purposes of one (seed, sample, output index)).
constexpr uint64_t kDraftSalt = 0x9d2c5680a1b3c4e5ull;
constexpr uint64_t kAcceptSalt = 0x3c6ef372fe94f82bull;
constexpr uint64_t kResidualSalt = 0xa54ff53a5f1d36f1ull;

// One row of rejection sampling (spec §4.2) for a draft drawn from q_row ([vocab], summing to 1
// up to float rounding): p = the distribution the sampler would draw from at this row
// (processors, temperature, top-k/p, min-p), u keyed by the output index. The logprob is the raw
// row's, as Sample gives it.
SampleResult RejectionSampleRow(const SampleContext& ctx, std::span<const float> logits,
                                const float* q_row, int32_t draft, std::vector<float>* scratch,
                                std::vector<float>* probs) {
  const SamplingParams& params = *ctx.params;
  scratch->assign(logits.begin(), logits.end());
  ApplyLogitProcessors(ctx, *scratch);
  probs->resize(logits.size());
  SamplingProbabilities(params, *scratch, *probs);
  std::vector<double> p(probs->begin(), probs->end()), q(q_row, q_row + logits.size());
  double zp = 0, zq = 0;
  for (size_t v = 0; v < p.size(); ++v) {
    zp += p[v];
    zq += q[v];
  }
  for (size_t v = 0; v < p.size(); ++v) {
    p[v] /= zp;
    q[v] /= zq;
  }
  const uint64_t step = ctx.output.size();
  const uint32_t index = static_cast<uint32_t>(ctx.sample_index);
  const RejectionOutcome o =
      RejectionSample(p, q, draft, PhiloxUniform(ctx.seed ^ kAcceptSalt, index, step),
                      PhiloxUniform(ctx.seed ^ kResidualSalt, index, step));
  SampleResult r;
  r.token = o.token;
  if (params.logprobs >= 0) r.logprob = ComputeLogprob(logits, r.token, params.logprobs);
  return r;
}

}  // namespace

ModelRunner::ModelRunner(model::CausalLM* model, const model::KvCacheView& kv,
                         int64_t state_bytes, bool model_drafts)
    : model_(model),
      kv_(kv),
      state_bytes_(state_bytes),
      model_drafts_(model_drafts),
      frontier_rollback_(model->kv_layout().frontier_rollback) {}

StepResult ModelRunner::Execute(const StepPlan& plan) {
  TraceSpan step_span("step");
  for (const RunnerSeqInit& init : plan.new_seqs) {
    SeqState& s = seqs_[init.seq_id];
    s.info = init.info;
    s.sample_index = init.sample_index;
  }
  StepResult result;
  result.step_id = plan.step_id;
  result.items.resize(plan.items.size());

  std::vector<const std::pair<int32_t, std::string>*> swap_ins;
  // Inputs. Decode items of sequences whose previous step failed have no input token.
  model::ForwardBatch batch;
  std::vector<int> item_of_chunk;
  std::vector<int32_t> last_token(plan.items.size());
  std::vector<std::vector<uint8_t>> pre_verify(plan.items.size());
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const PlanItem& item = plan.items[i];
    result.items[i].seq_id = item.seq_id;
    result.items[i].end_pos = item.start_pos + item.num_tokens();
    result.items[i].admission = item.admission;
    auto it = seqs_.find(item.seq_id);
    CHECK(it != seqs_.end()) << "plan item for unknown sequence " << item.seq_id;
    SeqState& s = it->second;
    // Swapped-in blocks are registered in the prefix index already: copy them whatever happens
    // to this item, so no cached block is ever left without its bytes.
    for (const auto& b : item.swap_ins) {
      CHECK(b.first >= 0 && b.first < kv_.num_blocks);
      swap_ins.push_back(&b);
    }
    if (s.failed) {
      result.items[i].status = absl::AbortedError("an earlier step of this sequence failed");
      continue;
    }
    model::SequenceChunk chunk;
    chunk.start_pos = item.start_pos;
    if (item.use_last_sample) {
      CHECK(!s.sampled.empty());
      last_token[i] = s.sampled.back();
      chunk.tokens = std::span<const int32_t>(&last_token[i], 1);
    } else {
      chunk.tokens = item.tokens;
    }
    chunk.block_table = item.block_table;
    chunk.state_slot = item.state_slot;
    chunk.replay_start = item.replay_start;
    chunk.replay_until = item.replay_until;
    chunk.prefill_end = item.prefill_end;
    if (item.restore != nullptr) {  // a prefix-cache hit continues from a snapshot
      CHECK(static_cast<int64_t>(item.restore->bytes.size()) == state_bytes_);
      CHECK(item.state_slot >= 0 && item.state_slot < kv_.num_state_slots);
      std::memcpy(kv_.state_base + item.state_slot * state_bytes_, item.restore->bytes.data(),
                  static_cast<size_t>(state_bytes_));
    }
    // A verify chunk needs its last num_draft + 1 rows (kAll: the rows before the anchor are
    // few, and every architecture already supports it).
    chunk.logits = item.prompt_logprobs || item.num_draft > 0 ? model::LogitsMode::kAll
                   : item.sample                             ? model::LogitsMode::kLast
                                                             : model::LogitsMode::kNone;
    if (item.num_draft > 0 && state_bytes_ > 0 && !frontier_rollback_) {
      // Rejected drafts advance the window rings and compressor carry: keep the slot as it was
      // before the step (after any restore above) to put back on rejection. (A layout with
      // frontier rollback needs no copy: what a rejected draft wrote is never read.)
      const uint8_t* slot = kv_.state_base + item.state_slot * state_bytes_;
      pre_verify[i].assign(slot, slot + state_bytes_);
    }
    batch.chunks.push_back(chunk);
    item_of_chunk.push_back(static_cast<int>(i));
  }

  // Swap-in: beside the forward when the model waits for each paged cache it reads (layer by
  // layer), else before it.
  std::optional<SwapInCopier> copier;
  model::KvCacheView kv = kv_;
  if (!swap_ins.empty()) {
    copier.emplace(model_->kv_layout(), kv_.block_base, swap_ins);
    copier->Start();
    if (model_->supports_paged_gate() && !batch.chunks.empty()) {
      kv.gate = &*copier;
    } else {
      result.swap_in = copier->Finish();
    }
  }
  if (!batch.chunks.empty()) {
    ++num_forwards_;
    const int64_t t0 = MonotonicNanos();
    TraceSpan forward_span("forward");
    absl::Status status = model_drafts_
                              ? model_->ForwardWithDraftFeatures(batch, kv, &output_, &features_)
                              : model_->Forward(batch, kv, &output_);
    forward_span.End();
    result.forward_ns = MonotonicNanos() - t0;
    if (kv.gate != nullptr) result.swap_in = copier->Finish();
    if (!status.ok()) {
      for (int i : item_of_chunk) {
        result.items[i].status = status;
        seqs_[plan.items[i].seq_id].failed = true;
      }
    } else {
      for (int i : item_of_chunk) {
        const PlanItem& item = plan.items[i];
        if (item.snapshot == PlanItem::Snapshot::kNone || state_bytes_ == 0) continue;
        auto snap = std::make_shared<kv::StateSnapshot>();
        const uint8_t* slot = kv_.state_base + item.state_slot * state_bytes_;
        snap->bytes.assign(slot, slot + state_bytes_);
        snap->approximate = item.snapshot_approximate;
        result.items[i].snapshot_kind = item.snapshot;
        result.items[i].snapshot = std::move(snap);
      }
      const int64_t vocab = model_->info().vocab_size;
      CHECK(static_cast<int64_t>(output_.chunk_row_begin.size()) ==
            static_cast<int64_t>(batch.chunks.size()) + 1);
      // Sample rows in parallel: each row's result depends only on its own data.
      const int64_t num_chunks = static_cast<int64_t>(batch.chunks.size());
      auto work = [&](int64_t begin, int64_t end) {
        std::vector<float> scratch;
        for (int64_t c = begin; c < end; ++c) {
          const int i = item_of_chunk[c];
          const PlanItem& item = plan.items[i];
          SeqState& s = seqs_.find(item.seq_id)->second;
          ItemResult& r = result.items[i];
          const int64_t row_begin = output_.chunk_row_begin[c];
          const int64_t row_end = output_.chunk_row_begin[c + 1];
          auto row = [&](int64_t k) {
            return std::span<const float>(output_.logits.data() + k * vocab, vocab);
          };
          if (item.prompt_logprobs) {
            const auto& prompt = s.info->prompt;
            const int top = s.info->params.prompt_logprobs;
            for (int64_t k = row_begin; k < row_end; ++k) {
              const int64_t pos = item.start_pos + (k - row_begin);
              if (pos + 1 >= static_cast<int64_t>(prompt.size())) break;
              r.prompt_logprobs.push_back(ComputeLogprob(row(k), prompt[pos + 1], top));
            }
          }
          if (!item.sample) continue;
          const int num_draft = item.num_draft;
          CHECK(row_end - row_begin >= num_draft + 1);
          const SamplingParams& p = s.info->params;
          SampleContext ctx;
          ctx.params = &p;
          ctx.prompt = s.info->prompt;
          ctx.eos_token_ids = s.info->eos_token_ids;
          ctx.seed = s.info->seed;
          ctx.sample_index = s.sample_index;
          if (GrammarConstraint::Needed(p) && !s.grammar) {
            // A grammar, or a trigger budget alone (reasoning budget: forced `</think>`).
            s.grammar = std::make_unique<GrammarConstraint>(p);
          }
          const int64_t prompt_len = static_cast<int64_t>(s.info->prompt.size());
          // Whether the sequence ends after its latest token (the engine's finish rules).
          auto ends = [&](int32_t t) {
            return Contains(p.stop_token_ids, t) || Contains(s.info->eos_token_ids, t) ||
                   static_cast<int64_t>(s.sampled.size()) >= p.max_tokens ||
                   prompt_len + static_cast<int64_t>(s.sampled.size()) >=
                       model_->info().max_context;
          };
          // Sampled model drafts carry their q rows: rows before the last are verified by
          // rejection sampling instead (the bonus row samples as usual).
          const std::span<const int32_t> item_drafts(item.tokens.data() + item.tokens.size() -
                                                         num_draft,
                                                     num_draft);
          const bool rejection = num_draft > 0 && !s.grammar && !p.greedy() &&
                                 s.draft_tokens.size() >= static_cast<size_t>(num_draft) &&
                                 std::equal(item_drafts.begin(), item_drafts.end(),
                                            s.draft_tokens.begin());
          std::vector<float> probs;
          // Row j (the anchor's row is j = 0) predicts the token after draft j. Sample-and-
          // compare (spec §4.2): the token sampled from row j with the sampler's position-keyed
          // RNG is exactly what a non-speculative run samples there, so draft j + 1 is accepted
          // iff it equals it; the first mismatch (or row num_draft) gives the step's own token.
          // The grammar mask of row j follows the accepted tokens only, so the matcher never
          // sees a rejected draft and a draft the grammar rejects is never accepted.
          std::vector<float> masked;
          bool ended = false;
          for (int j = 0; j <= num_draft; ++j) {
            std::span<const float> logits = row(row_end - 1 - num_draft + j);
            if (s.grammar) {
              if (!s.grammar->Sync(s.sampled)) {
                r.status = absl::InternalError("sampled token rejected by the grammar");
                break;
              }
              masked.assign(logits.begin(), logits.end());
              s.grammar->MaskLogits(masked, static_cast<int64_t>(p.max_tokens) -
                                                static_cast<int64_t>(s.sampled.size()));
              logits = masked;
            }
            ctx.output = s.sampled;
            SampleResult sr;
            if (rejection && j < num_draft) {
              sr = RejectionSampleRow(ctx, logits, &s.draft_q[j * vocab], item_drafts[j],
                                      &scratch, &probs);
            } else {
              sr = Sample(ctx, logits, &scratch);
            }
            s.sampled.push_back(sr.token);
            r.tokens.push_back(sr.token);
            if (p.logprobs >= 0) r.logprobs.push_back(std::move(sr.logprob));
            if (ends(sr.token)) {
              ended = true;
              break;
            }
            const size_t draft_at = item.tokens.size() - num_draft + j;
            if (j == num_draft || sr.token != item.tokens[draft_at]) break;
            // An accepted draft after which the grammar forces text ends the block: a
            // non-speculative run appends the forced tokens there (jump-forward, below) instead
            // of sampling them, so neither may the next verify row (the same tokens, and the
            // same RNG positions, as jump-forward alone).
            if (s.info->jump_forward && s.grammar && s.grammar->Sync(s.sampled) &&
                !s.grammar->ForcedTokens(1).empty()) {
              break;
            }
          }
          if (!r.status.ok()) continue;
          r.sampled = true;
          r.num_drafted = num_draft;
          for (int j = 0; j < num_draft && j < static_cast<int>(r.tokens.size()); ++j) {
            if (r.tokens[j] != item.tokens[item.tokens.size() - num_draft + j]) break;
            ++r.num_accepted;
          }
          if (num_draft > 0) {
            const int64_t known = static_cast<int64_t>(item.tokens.size()) - num_draft;
            r.end_pos = item.start_pos + known + r.num_accepted;
            if (r.num_accepted < num_draft) {
              // The state snapshot (if any) includes rejected drafts: drop it. Window state
              // goes back to before the step, which the next step then recomputes; with
              // frontier rollback it stays, and the next step continues at end_pos.
              r.snapshot_kind = PlanItem::Snapshot::kNone;
              r.snapshot = nullptr;
              if (!pre_verify[i].empty()) {
                std::memcpy(kv_.state_base + item.state_slot * state_bytes_,
                            pre_verify[i].data(), static_cast<size_t>(state_bytes_));
                r.end_pos = item.start_pos;
              }
            }
          }
          if (!ended && s.info->jump_forward && s.grammar && s.grammar->Sync(s.sampled)) {
            const int64_t room = std::min<int64_t>(
                p.max_tokens - static_cast<int64_t>(s.sampled.size()),
                model_->info().max_context - prompt_len - static_cast<int64_t>(s.sampled.size()));
            std::vector<int32_t> forced = s.grammar->ForcedTokens(room);
            s.sampled.insert(s.sampled.end(), forced.begin(), forced.end());
            r.tokens.insert(r.tokens.end(), forced.begin(), forced.end());
            r.num_forced = static_cast<int>(forced.size());
          }
        }
      };
      TraceSpan sample_span("sample");
      if (num_chunks >= 8 && vocab >= 4096) {
        ThreadPool::Default()->ParallelFor(num_chunks, work);
      } else {
        work(0, num_chunks);
      }
      sample_span.End();
      if (model_drafts_) ModelDrafts(plan, batch, item_of_chunk, &result);
    }
  }
  for (int64_t id : plan.released_seqs) seqs_.erase(id);
  return result;
}

void ModelRunner::ModelDrafts(const StepPlan& plan, const model::ForwardBatch& batch,
                              const std::vector<int>& item_of_chunk, StepResult* result) {
  const int64_t width = model_->draft_feature_floats();
  int64_t token_offset = 0;  // first row of chunk c in features_
  for (size_t c = 0; c < batch.chunks.size(); ++c) {
    const model::SequenceChunk& chunk = batch.chunks[c];
    const int64_t offset = token_offset;
    token_offset += static_cast<int64_t>(chunk.tokens.size());
    const int i = item_of_chunk[c];
    const PlanItem& item = plan.items[i];
    ItemResult& r = result->items[i];
    SeqState& s = seqs_.find(item.seq_id)->second;
    if (s.info->max_draft_tokens <= 0 || !r.status.ok() || s.failed) continue;
    // The draft head's row at position p pairs the main model's features at p with the token at
    // p + 1, so it runs over the chunk's valid positions whose next token is committed (§2.2).
    const std::vector<int32_t>& prompt = s.info->prompt;
    const int64_t known = static_cast<int64_t>(prompt.size() + s.sampled.size());
    auto token_at = [&](int64_t q) {
      return q < static_cast<int64_t>(prompt.size()) ? prompt[q] : s.sampled[q - prompt.size()];
    };
    const int64_t valid_end =
        item.num_draft > 0 ? r.end_pos : item.start_pos + static_cast<int64_t>(chunk.tokens.size());
    const int64_t end = std::min(valid_end, known - 1);
    if (end <= item.start_pos) continue;  // rolled back (slot restored): recomputed next step
    std::vector<int32_t> next;
    for (int64_t p = item.start_pos; p < end; ++p) next.push_back(token_at(p + 1));
    const int64_t count = end - item.start_pos;
    // Drafts only for the position right after the last committed token, and only for a
    // sequence that goes on with a one-token chunk (no jump-forward tokens to compute first).
    const bool propose = end + 1 == known && r.num_forced == 0 && r.sampled;
    const std::span<const float> feats(features_.data() + offset * width, count * width);
    const SamplingParams& sp = s.info->params;
    const bool sampled = sampled_drafts_ && propose && !sp.greedy() && !s.grammar &&
                         !GrammarConstraint::Needed(sp);
    absl::Status st;
    if (sampled) {
      // Draft j is the token at output index sampled.size() + j.
      std::vector<double> u(s.info->max_draft_tokens);
      for (size_t j = 0; j < u.size(); ++j) {
        u[j] = PhiloxUniform(s.info->seed ^ kDraftSalt, static_cast<uint32_t>(s.sample_index),
                             s.sampled.size() + j);
      }
      st = model_->ProposeSampledDrafts(item.start_pos, feats, next, item.state_slot, kv_,
                                        s.info->max_draft_tokens, sp.temperature, u, &proposal_);
    } else {
      st = model_->ProposeDrafts(item.start_pos, feats, next, item.state_slot, kv_,
                                 propose ? s.info->max_draft_tokens : 0, &proposal_);
    }
    s.draft_tokens.clear();
    s.draft_q.clear();
    if (sampled && st.ok()) {
      s.draft_tokens = proposal_.tokens;
      s.draft_q = proposal_.q;
    }
    if (!st.ok()) {
      r.status = st;
      s.failed = true;
      continue;
    }
    if (!propose) continue;
    r.next_draft = proposal_.tokens;
    r.next_draft_confidence = proposal_.confidence;
  }
}

}  // namespace deepinfer::engine
