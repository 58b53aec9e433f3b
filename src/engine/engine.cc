#include "engine/engine.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "engine/speculative/cost_profile.h"
#include "engine/step_trace.h"
#include "kv/block_pool.h"
#include "kv/state_cache.h"

namespace deepinfer::engine {

static_assert(kStepOutputDraftPositions >= kMaxSpeculativeTokens,
              "StepOutput counts accepted drafts at every draft position");
namespace {

using model::kBlockTokens;

// Methods whose drafts come from the model's own draft head (CausalLM::ProposeDrafts).
bool UsesModelDrafts(SpeculativeConfig::Method m) {
  return m == SpeculativeConfig::Method::kMtp || m == SpeculativeConfig::Method::kDspark;
}

int64_t BlocksFor(int64_t tokens) { return (tokens + kBlockTokens - 1) / kBlockTokens; }

SchedulerConfig MakeSchedulerConfig(const EngineConfig& config, const model::ModelInfo& info,
                                    const model::KvLayout& layout) {
  SchedulerConfig sc;
  sc.max_num_seqs = config.max_num_seqs;
  sc.max_num_batched_tokens = config.max_num_batched_tokens;
  sc.max_context = info.max_context;
  sc.prefix_caching = config.enable_prefix_caching;
  sc.exact = config.prefix_cache_mode == EngineConfig::PrefixCacheMode::kExact;
  sc.layout_id = layout.layout_id;
  sc.window_tokens = layout.window_tokens;
  sc.min_recompute_tokens = layout.min_recompute_tokens;
  sc.has_state = layout.StateBytes() > 0;
  return sc;
}

}  // namespace

class Engine::Impl {
 public:
  Impl(std::unique_ptr<model::CausalLM> model, const EngineConfig& config,
       std::unique_ptr<kv::BlockPool> blocks, std::unique_ptr<kv::StateCache> slots,
       std::unique_ptr<KvTiers> tiers)
      : model_(std::move(model)),
        config_(config),
        blocks_(std::move(blocks)),
        slots_(std::move(slots)),
        snapshots_(config.snapshot_memory_bytes),
        tiers_(std::move(tiers)),
        scheduler_(MakeSchedulerConfig(config, model_->info(), model_->kv_layout()), blocks_.get(),
                   slots_.get(), &snapshots_, tiers_.get()),
        runner_(model_.get(),
                model::KvCacheView{blocks_->base(), blocks_->num_blocks(), slots_->base(),
                                   slots_->num_slots()},
                model_->kv_layout().StateBytes(), UsesModelDrafts(config.speculative.method)) {
    std::random_device rd;
    seed_base_ = (uint64_t{rd()} << 32) ^ rd();
    const SpeculativeConfig& spec = config_.speculative;
    if (spec.method == SpeculativeConfig::Method::kNgram) {
      drafter_ = std::make_shared<NgramDrafter>(spec.prompt_lookup_min, spec.prompt_lookup_max);
    } else if (spec.method == SpeculativeConfig::Method::kCustom) {
      drafter_ = spec.drafter;
    }
    runner_.set_sampled_drafts(spec.sampled_drafts);
    if (spec.varlen != VarlenMode::kOff && spec.method != SpeculativeConfig::Method::kNone) {
      MakeVarlenController();
    }
    stats_.kv_blocks_total = blocks_->num_blocks();
    stats_.state_slots_total = slots_->num_slots();
    if (config_.async_scheduling) runner_thread_ = std::thread([this] { RunnerLoop(); });
    engine_thread_ = std::thread([this] { Loop(); });
  }

  ~Impl() { Shutdown(0); }

  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(GenerateRequest request);
  void Abort(const std::string& request_id) {
    {
      absl::MutexLock lock(&in_mu_);
      aborts_.push_back(request_id);
    }
    in_cv_.SignalAll();
  }
  EngineStats Stats() const {
    EngineStats s;
    {
      absl::MutexLock lock(&stats_mu_);
      s = stats_;
    }
    // The tiers' counters move on their own threads: read them live (KvTiers is thread-safe).
    if (tiers_ != nullptr) s.tiers = tiers_->Stats();
    return s;
  }
  void Shutdown(int64_t timeout_ns);
  void ResetPrefixCache() {
    absl::MutexLock lock(&in_mu_);
    const int64_t ticket = ++reset_requested_;
    in_cv_.SignalAll();
    while (reset_done_ < ticket && !engine_exited_) reset_cv_.Wait(&in_mu_);
  }

  const model::ModelInfo& info() const { return model_->info(); }
  const EngineConfig& config() const { return config_; }

 private:
  struct Pending {
    std::shared_ptr<RequestInfo> info;
    std::shared_ptr<RequestStream> stream;
  };
  struct RequestState {
    std::shared_ptr<const RequestInfo> info;
    std::shared_ptr<RequestStream> stream;
    std::vector<Sequence*> seqs;
    int open = 0;
  };

  void Loop();
  // Whether a sequence with multi-token steps has a sampled step in flight.
  bool MultiTokenStepInFlight() const;
  bool TakeInputs();  // returns true when stopping
  void Launch(StepPlan plan);
  StepResult WaitResult();
  void PostProcess(const StepResult& result);
  void FinishSeq(Sequence* seq, FinishReason reason, absl::Status error,
                 std::vector<int32_t> tokens, std::vector<TokenLogprob> logprobs);
  void AbortRequest(const std::string& request_id);
  StepOutput BaseOutput(const Sequence& seq) const;
  void UpdateStats();
  void RunnerLoop();
  // Asks the drafter for the next step's drafts of every running sequence that can verify.
  void Draft();
  // Variable-length verification: profiles the cost table if asked (before any block is handed
  // out) and creates varlen_.
  void MakeVarlenController();
  // Truncates each sequence's draft to the length the planner gives it (spec §5.2).
  void PlanVerifyLengths();

  std::unique_ptr<model::CausalLM> model_;
  const EngineConfig config_;
  std::unique_ptr<kv::BlockPool> blocks_;
  std::unique_ptr<kv::StateCache> slots_;
  kv::SnapshotCache snapshots_;
  std::unique_ptr<KvTiers> tiers_;  // null without tiers; outlives the scheduler's use
  Scheduler scheduler_;
  ModelRunner runner_;
  std::shared_ptr<Drafter> drafter_;  // null: no speculative decoding
  std::unique_ptr<VarlenController> varlen_;  // null: every draft is verified
  int64_t varlen_step_ = 0;                   // planning-step stamp for the stale rows
  // Per step in flight: launch time and target tokens (varlen_->ObserveStep); last result time.
  std::deque<std::pair<int64_t, int>> varlen_launches_;
  int64_t varlen_last_result_ns_ = 0;
  uint64_t seed_base_ = 0;

  // Submission side (any thread).
  absl::Mutex in_mu_;
  absl::CondVar in_cv_;
  std::deque<Pending> submissions_ ABSL_GUARDED_BY(in_mu_);
  std::vector<std::string> aborts_ ABSL_GUARDED_BY(in_mu_);
  std::unordered_set<std::string> live_ids_ ABSL_GUARDED_BY(in_mu_);
  int64_t next_request_number_ ABSL_GUARDED_BY(in_mu_) = 0;
  bool accepting_ ABSL_GUARDED_BY(in_mu_) = true;
  bool stop_ ABSL_GUARDED_BY(in_mu_) = false;
  absl::CondVar idle_cv_;  // signalled when live_ids_ empties
  int64_t reset_requested_ ABSL_GUARDED_BY(in_mu_) = 0;
  int64_t reset_done_ ABSL_GUARDED_BY(in_mu_) = 0;
  bool engine_exited_ ABSL_GUARDED_BY(in_mu_) = false;
  absl::CondVar reset_cv_;  // signalled when reset_done_ advances

  // Engine thread only.
  std::unordered_map<std::string, RequestState> requests_;
  std::unordered_map<int64_t, std::unique_ptr<Sequence>> seqs_;
  std::vector<int64_t> pending_releases_;
  std::deque<int64_t> in_flight_;
  std::deque<StepResult> sync_results_;
  int64_t next_seq_id_ = 0;
  int64_t next_order_ = 0;
  int64_t reset_done_seen_ = 0;
  int64_t num_forwards_ = 0;  // plans with items launched (EngineStats::num_forward_passes)
  EngineStats local_stats_;

  // Async runner hand-off.
  absl::Mutex run_mu_;
  absl::CondVar run_cv_;
  std::deque<StepPlan> plans_ ABSL_GUARDED_BY(run_mu_);
  std::deque<StepResult> results_ ABSL_GUARDED_BY(run_mu_);
  bool runner_stop_ ABSL_GUARDED_BY(run_mu_) = false;

  mutable absl::Mutex stats_mu_;
  EngineStats stats_ ABSL_GUARDED_BY(stats_mu_);

  std::thread runner_thread_;
  std::thread engine_thread_;
  std::once_flag shutdown_once_;
};

absl::StatusOr<std::shared_ptr<RequestStream>> Engine::Impl::Submit(GenerateRequest request) {
  const model::ModelInfo& mi = model_->info();
  const SamplingParams& p = request.params;
  RETURN_IF_ERROR(p.Validate());
  if (p.so_args.has_value()) {
    // The engine never compiles (DEEPINFER-DESIGN.md §11: not on the engine thread, and it has
    // no tokenizer); the offline LLM compiles so_args into `grammar` before Submit.
    return absl::FailedPreconditionError(
        "SamplingParams::so_args must be compiled into SamplingParams::grammar before "
        "Engine::Submit (engine::LLM does this when created with a tokenizer)");
  }
  if (request.prompt.empty()) return absl::InvalidArgumentError("prompt is empty");
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    if (request.prompt[i] < 0 || request.prompt[i] >= mi.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("prompt token ", i, " (id ", request.prompt[i],
                                                     ") is outside the vocabulary [0, ",
                                                     mi.vocab_size, ")"));
    }
  }
  for (const auto& [id, bias] : p.logit_bias) {
    if (id >= mi.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "logit_bias token id ", id, " is outside the vocabulary [0, ", mi.vocab_size, ")"));
    }
  }
  const int64_t prompt_len = static_cast<int64_t>(request.prompt.size());
  if (prompt_len >= mi.max_context) {
    return absl::OutOfRangeError(absl::StrCat("prompt has ", prompt_len,
                                              " tokens; the model's maximum context is ",
                                              mi.max_context, " tokens"));
  }
  if (prompt_len + p.max_tokens > mi.max_context) {
    return absl::OutOfRangeError(
        absl::StrCat("prompt (", prompt_len, " tokens) + max_tokens (", p.max_tokens,
                     ") exceeds the model's maximum context of ", mi.max_context, " tokens"));
  }
  // The last sampled token is never fed back, so a sequence holds at most this many positions.
  const int64_t blocks_needed = BlocksFor(prompt_len + p.max_tokens - 1);
  if (blocks_needed > blocks_->num_blocks()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("request needs ", blocks_needed, " KV blocks (", prompt_len, " prompt + ",
                     p.max_tokens, " max_tokens) but the KV budget holds only ",
                     blocks_->num_blocks(), " blocks; raise --kv-memory or lower max_tokens"));
  }
  auto info = std::make_shared<RequestInfo>();
  info->prompt = std::move(request.prompt);
  info->params = std::move(request.params);
  info->arrival_ns = MonotonicNanos();
  info->cache_salt = kv::CacheSaltFromString(request.cache_salt);
  info->traffic_class = request.traffic_class;
  if (!info->params.ignore_eos) info->eos_token_ids = mi.eos_token_ids;
  info->jump_forward =
      config_.jump_forward && info->params.grammar != nullptr && info->params.logprobs < 0;
  if ((drafter_ != nullptr || UsesModelDrafts(config_.speculative.method)) &&
      request.speculative) {
    info->max_draft_tokens = config_.speculative.num_speculative_tokens;
  }
  std::shared_ptr<RequestStream> stream;
  {
    absl::MutexLock lock(&in_mu_);
    if (!accepting_) return absl::FailedPreconditionError("the engine is shutting down");
    if (request.request_id.empty()) {
      request.request_id = absl::StrCat("req-", next_request_number_);
    }
    const uint64_t number = static_cast<uint64_t>(next_request_number_++);
    info->seed = info->params.seed.has_value() ? *info->params.seed
                                               : seed_base_ ^ (number * 0x9E3779B97F4A7C15ull);
    if (live_ids_.count(request.request_id) > 0) {
      return absl::AlreadyExistsError(
          absl::StrCat("request id '", request.request_id, "' is already running"));
    }
    if (static_cast<int64_t>(live_ids_.size()) >=
        int64_t{config_.max_waiting_requests} + config_.max_num_seqs) {
      return absl::ResourceExhaustedError(absl::StrCat("the engine's request queue is full (",
                                                       live_ids_.size(), " live requests)"));
    }
    info->request_id = request.request_id;
    live_ids_.insert(info->request_id);
    stream = std::make_shared<RequestStream>(info->request_id, info->params.n);
    submissions_.push_back(Pending{info, stream});
  }
  in_cv_.SignalAll();
  return stream;
}

void Engine::Impl::Shutdown(int64_t timeout_ns) {
  std::call_once(shutdown_once_, [&] {
    {
      absl::MutexLock lock(&in_mu_);
      accepting_ = false;
      if (timeout_ns > 0) {
        const absl::Time deadline = absl::Now() + absl::Nanoseconds(timeout_ns);
        while (!live_ids_.empty() && !idle_cv_.WaitWithDeadline(&in_mu_, deadline)) {
        }
      }
      stop_ = true;
    }
    in_cv_.SignalAll();
    engine_thread_.join();
    if (runner_thread_.joinable()) {
      {
        absl::MutexLock lock(&run_mu_);
        runner_stop_ = true;
      }
      run_cv_.SignalAll();
      runner_thread_.join();
    }
    // Let the blocks written so far reach their tiers (bounded), so that a restarted engine
    // finds them, and publish the tiers' final counters.
    if (tiers_ != nullptr) {
      tiers_->Flush(/*timeout_ms=*/5000);
      absl::MutexLock lock(&stats_mu_);
      stats_.tiers = tiers_->Stats();
    }
  });
}

bool Engine::Impl::TakeInputs() {
  std::deque<Pending> subs;
  std::vector<std::string> aborts;
  bool stop;
  int64_t reset = 0;
  {
    absl::MutexLock lock(&in_mu_);
    subs.swap(submissions_);
    aborts.swap(aborts_);
    stop = stop_;
    reset = reset_requested_;
  }
  if (reset > reset_done_seen_) {
    scheduler_.ResetPrefixCache();
    UpdateStats();  // the caller sees the emptied cache in Stats()
    reset_done_seen_ = reset;
    {
      absl::MutexLock lock(&in_mu_);
      reset_done_ = reset;
    }
    reset_cv_.SignalAll();
  }
  for (Pending& p : subs) {
    RequestState& rs = requests_[p.info->request_id];
    rs.info = p.info;
    rs.stream = p.stream;
    rs.open = p.info->params.n;
    for (int s = 0; s < p.info->params.n; ++s) {
      auto seq = std::make_unique<Sequence>();
      seq->seq_id = next_seq_id_++;
      seq->order = next_order_++;
      seq->info = p.info;
      seq->sample_index = s;
      seq->tokens = p.info->prompt;
      if (s > 0) seq->first_sample = rs.seqs.front();
      rs.seqs.push_back(seq.get());
      scheduler_.AddWaiting(seq.get());
      seqs_[seq->seq_id] = std::move(seq);
    }
  }
  for (const std::string& id : aborts) AbortRequest(id);
  return stop;
}

StepOutput Engine::Impl::BaseOutput(const Sequence& seq) const {
  StepOutput out;
  out.sample_index = seq.sample_index;
  out.arrival_ns = seq.info->arrival_ns;
  out.first_token_ns = seq.first_token_ns;
  out.scheduled_ns = seq.first_scheduled_ns;
  out.now_ns = MonotonicNanos();
  out.prompt_tokens = seq.prompt_len();
  out.cached_tokens = seq.cached_tokens;
  out.replayed_tokens = seq.replayed_tokens;
  out.approximate = seq.output_approximate;
  out.cached_host_tokens = seq.cached_host_tokens;
  out.cached_store_tokens = seq.cached_store_tokens;
  out.output_tokens = static_cast<int>(seq.num_output_resolved());
  out.drafted_tokens = seq.drafted_tokens;
  out.accepted_tokens = seq.accepted_tokens;
  out.forced_tokens = seq.forced_tokens;
  out.forward_passes = seq.forward_passes;
  out.trimmed_drafts = seq.trimmed_drafts;
  out.verify_steps = seq.verify_steps;
  out.accepted_per_position = seq.accepted_per_position;
  return out;
}

void Engine::Impl::FinishSeq(Sequence* seq, FinishReason reason, absl::Status error,
                             std::vector<int32_t> tokens, std::vector<TokenLogprob> logprobs) {
  scheduler_.Remove(seq);
  if (seq->registered_with_runner) pending_releases_.push_back(seq->seq_id);
  auto it = requests_.find(seq->info->request_id);
  CHECK(it != requests_.end());
  RequestState& rs = it->second;
  StepOutput out = BaseOutput(*seq);
  out.token_ids = std::move(tokens);
  out.logprobs = std::move(logprobs);
  out.finish = reason;
  out.error = std::move(error);
  std::shared_ptr<RequestStream> stream = rs.stream;
  if (--rs.open == 0) {
    ++local_stats_.num_finished_requests;
    for (Sequence* s : rs.seqs) seqs_.erase(s->seq_id);
    const std::string id = rs.info->request_id;
    requests_.erase(it);
    absl::MutexLock lock(&in_mu_);
    live_ids_.erase(id);
    if (live_ids_.empty()) idle_cv_.SignalAll();
  }
  // Release the id and publish the counters before the client can see the finish: Stats()
  // read after a request's last message counts its steps and tokens, and the id is free again.
  UpdateStats();
  stream->Push(std::move(out));
}

void Engine::Impl::AbortRequest(const std::string& request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  std::vector<Sequence*> open;
  for (Sequence* s : it->second.seqs) {
    if (s->status != SeqStatus::kFinished) open.push_back(s);
  }
  for (Sequence* s : open) FinishSeq(s, FinishReason::kAbort, absl::OkStatus(), {}, {});
}

void Engine::Impl::PostProcess(const StepResult& result) {
  TraceSpan trace_span("post_process");
  local_stats_.swap_in_bytes += result.swap_in.bytes;
  local_stats_.swap_in_copy_ns += result.swap_in.copy_ns;
  local_stats_.swap_in_wait_ns += result.swap_in.wait_ns;
  for (const ItemResult& r : result.items) {
    auto it = seqs_.find(r.seq_id);
    if (it == seqs_.end()) continue;
    Sequence* seq = it->second.get();
    if (seq->status == SeqStatus::kFinished) continue;
    if (!r.status.ok()) {
      FinishSeq(seq, FinishReason::kError, r.status, {}, {});
      continue;
    }
    ++seq->forward_passes;
    if (varlen_ != nullptr && seq->info->max_draft_tokens > 0 && !r.tokens.empty()) {
      varlen_->OnCommitted(static_cast<int>(r.tokens.size()));
    }
    if (r.num_drafted > 0) {
      scheduler_.OnVerified(seq, r.admission, r.end_pos);
      seq->drafted_tokens += r.num_drafted;
      seq->accepted_tokens += r.num_accepted;
      ++seq->verify_steps;
      for (int j = 0; j < r.num_accepted && j < kStepOutputDraftPositions; ++j) {
        ++seq->accepted_per_position[j];
      }
      ++local_stats_.spec_verify_steps;
      local_stats_.spec_draft_tokens += r.num_drafted;
      local_stats_.spec_accepted_tokens += r.num_accepted;
      if (varlen_ != nullptr) varlen_->OnVerified(r.num_drafted, r.num_accepted);
      for (int j = 0; j < r.num_accepted && j < kMaxSpeculativeTokens; ++j) {
        ++local_stats_.spec_accepted_per_position[j];
      }
    }
    // Commit: the step's tokens one at a time through the finish rules, exactly as if each had
    // been its own step; a finish drops the rest (never emitted, never counted).
    const SamplingParams& p = seq->info->params;
    const int64_t resolved_before = seq->num_output_resolved();
    size_t committed = 0;
    std::optional<FinishReason> finish;
    if (r.sampled) {
      CHECK(seq->num_pending > 0);
      --seq->num_pending;
      auto contains = [](const std::vector<int32_t>& v, int32_t t) {
        return std::find(v.begin(), v.end(), t) != v.end();
      };
      const size_t first_forced = r.tokens.size() - static_cast<size_t>(r.num_forced);
      for (size_t k = 0; k < r.tokens.size() && !finish.has_value(); ++k) {
        const int32_t t = r.tokens[k];
        seq->tokens.push_back(t);
        ++committed;
        ++local_stats_.total_output_tokens;
        if (k >= first_forced) {
          ++seq->forced_tokens;
          ++local_stats_.jump_forward_tokens;
        }
        if (contains(p.stop_token_ids, t) || contains(seq->info->eos_token_ids, t)) {
          finish = FinishReason::kStop;
        } else if (seq->num_output_resolved() >= p.max_tokens ||
                   static_cast<int64_t>(seq->tokens.size()) >= model_->info().max_context) {
          finish = FinishReason::kLength;
        }
      }
      if (seq->first_token_ns == 0 && committed > 0) seq->first_token_ns = MonotonicNanos();
    }
    if (!r.next_draft.empty() && !finish.has_value()) {
      seq->draft = r.next_draft;
      seq->draft_confidence = r.next_draft_confidence;
    }
    scheduler_.OnExecuted(seq, r.admission,
                          std::min<int64_t>(r.end_pos, static_cast<int64_t>(seq->tokens.size())),
                          r.snapshot_kind, r.snapshot);
    if (!r.prompt_logprobs.empty() && !seq->prompt_logprobs_sent) {
      seq->prompt_logprobs.insert(seq->prompt_logprobs.end(), r.prompt_logprobs.begin(),
                                  r.prompt_logprobs.end());
    }
    RequestStream& stream = *requests_[seq->info->request_id].stream;
    for (size_t k = 0; k < committed; ++k) {
      std::vector<TokenLogprob> lps;
      if (p.logprobs >= 0 && k < r.logprobs.size()) lps.push_back(r.logprobs[k]);
      const bool want_prompt_lps =
          !seq->prompt_logprobs_sent && p.prompt_logprobs >= 0 && seq->sample_index == 0;
      if (k + 1 == committed && finish.has_value()) {
        if (want_prompt_lps) {
          // Delivered with the first message; a one-token answer finishes in that message.
          StepOutput out = BaseOutput(*seq);
          out.prompt_logprobs = std::move(seq->prompt_logprobs);
          seq->prompt_logprobs_sent = true;
          stream.Push(std::move(out));
        }
        FinishSeq(seq, *finish, absl::OkStatus(), {r.tokens[k]}, std::move(lps));
        break;
      }
      StepOutput out = BaseOutput(*seq);
      out.output_tokens = static_cast<int>(resolved_before + static_cast<int64_t>(k) + 1);
      out.token_ids = {r.tokens[k]};
      out.logprobs = std::move(lps);
      if (want_prompt_lps) {
        out.prompt_logprobs = std::move(seq->prompt_logprobs);
        seq->prompt_logprobs_sent = true;
      }
      stream.Push(std::move(out));
    }
  }
}

void Engine::Impl::Draft() {
  if (drafter_ == nullptr) return;
  for (auto& [id, owned] : seqs_) {
    Sequence* seq = owned.get();
    seq->draft.clear();
    seq->draft_confidence.clear();
    if (seq->status != SeqStatus::kRunning || seq->info->max_draft_tokens <= 0 ||
        seq->num_pending > 0 || seq->num_computed >= static_cast<int64_t>(seq->tokens.size())) {
      continue;
    }
    const int64_t left = seq->info->params.max_tokens - seq->num_output_resolved() - 1;
    const int k = static_cast<int>(std::min<int64_t>(seq->info->max_draft_tokens, left));
    if (k <= 0) continue;
    DraftContext ctx;
    ctx.request_id = seq->info->request_id;
    ctx.sample_index = seq->sample_index;
    ctx.tokens = seq->tokens;
    ctx.prompt_len = seq->prompt_len();
    seq->draft = drafter_->Propose(ctx, k);
    const int64_t vocab = model_->info().vocab_size;
    for (size_t j = 0; j < seq->draft.size(); ++j) {
      if (seq->draft[j] < 0 || seq->draft[j] >= vocab) {  // a drafter bug must not crash
        seq->draft.resize(j);
        break;
      }
    }
  }
}

void Engine::Impl::MakeVarlenController() {
  const SpeculativeConfig& spec = config_.speculative;
  VarlenController::Options o;
  o.mode = spec.varlen;
  o.min_concurrency = spec.varlen_min_concurrency;
  o.benefit_gate = spec.varlen_benefit_gate;
  o.table = spec.cost_table;
  o.k_max = spec.num_speculative_tokens;
  o.observer = spec.varlen_observer;
  if (o.table == nullptr && spec.profile_cost_table) {
    CostProfileOptions po;
    po.tokens_per_seq = 1 + spec.num_speculative_tokens;
    po.max_seqs = config_.max_num_seqs;
    po.max_tokens = std::min(config_.max_num_batched_tokens, po.max_seqs * po.tokens_per_seq);
    const int64_t t0 = MonotonicNanos();
    absl::StatusOr<CostTable> t = ProfileVerifyCost(
        *model_,
        model::KvCacheView{blocks_->base(), blocks_->num_blocks(), slots_->base(),
                           slots_->num_slots()},
        po);
    if (t.ok()) {
      LOG(INFO) << "speculative cost table profiled in " << (MonotonicNanos() - t0) / 1000000
                << " ms: " << t->ToJson();
      o.table = std::make_shared<const CostTable>(*std::move(t));
    } else {
      LOG(WARNING) << "speculative cost table profiling failed (" << t.status()
                   << "); variable-length verification verifies every draft";
    }
  }
  if (o.table == nullptr) {
    LOG(WARNING) << "speculative varlen " << VarlenModeName(o.mode)
                 << " without a cost table: every draft is verified";
  }
  varlen_ = std::make_unique<VarlenController>(std::move(o));
}

void Engine::Impl::PlanVerifyLengths() {
  if (varlen_ == nullptr) return;
  std::vector<Sequence*> spec;
  int running = 0;
  for (auto& [id, owned] : seqs_) {
    Sequence* seq = owned.get();
    if (seq->status != SeqStatus::kRunning) continue;
    ++running;
    if (!seq->draft.empty() && seq->num_pending == 0 &&
        seq->num_computed < static_cast<int64_t>(seq->tokens.size())) {
      spec.push_back(seq);
    }
  }
  if (spec.empty()) return;
  // Request order fixes the (−a, j, r) tie-break: make it the sequence id, not hash order.
  std::sort(spec.begin(), spec.end(),
            [](const Sequence* a, const Sequence* b) { return a->seq_id < b->seq_id; });
  std::vector<VarlenController::Input> in;
  for (Sequence* seq : spec) {
    const int64_t known = static_cast<int64_t>(seq->tokens.size());
    int64_t cap = std::min<int64_t>(seq->draft.size(), seq->info->max_draft_tokens);
    cap = std::min<int64_t>(cap, seq->info->params.max_tokens - seq->num_output_resolved() - 1);
    cap = std::min<int64_t>(cap, model_->info().max_context - 1 - known);
    VarlenController::Input i;
    i.slot = static_cast<uint64_t>(seq->seq_id);
    i.owner = static_cast<uint64_t>(seq->seq_id);
    i.cap = static_cast<int>(std::max<int64_t>(cap, 0));
    i.drafter_confidence = seq->draft_confidence;
    in.push_back(i);
  }
  const int others = running - static_cast<int>(spec.size());
  const std::vector<int> len = varlen_->Plan(varlen_step_++, in, others, others, running);
  for (size_t r = 0; r < spec.size(); ++r) {
    Sequence* seq = spec[r];
    if (static_cast<int>(seq->draft.size()) > len[r]) {
      seq->trimmed_drafts += in[r].cap - len[r];
      seq->draft.resize(len[r]);
    }
    if (static_cast<int>(seq->draft_confidence.size()) > len[r]) {
      seq->draft_confidence.resize(len[r]);
    }
  }
}

void Engine::Impl::Launch(StepPlan plan) {
  ++local_stats_.num_steps;
  bool computes = false;
  for (const PlanItem& item : plan.items) computes = computes || item.num_tokens() > 0;
  if (computes) ++num_forwards_;
  for (const PlanItem& item : plan.items) {
    if (item.use_last_sample) continue;
    const Sequence* seq = seqs_.at(item.seq_id).get();
    const int64_t prompt_part = std::max<int64_t>(
        0,
        std::min<int64_t>(seq->prompt_len(), item.start_pos + item.num_tokens()) - item.start_pos);
    local_stats_.total_prompt_tokens += prompt_part;
  }
  in_flight_.push_back(plan.step_id);
  if (varlen_ != nullptr) {
    int tokens = 0;
    for (const PlanItem& item : plan.items) tokens += static_cast<int>(item.num_tokens());
    varlen_launches_.emplace_back(MonotonicNanos(), tokens);
  }
  if (!config_.async_scheduling) {
    sync_results_.push_back(runner_.Execute(plan));
    return;
  }
  {
    absl::MutexLock lock(&run_mu_);
    plans_.push_back(std::move(plan));
  }
  run_cv_.SignalAll();
}

StepResult Engine::Impl::WaitResult() {
  CHECK(!in_flight_.empty());
  in_flight_.pop_front();
  StepResult r;
  if (!config_.async_scheduling) {
    r = std::move(sync_results_.front());
    sync_results_.pop_front();
  } else {
    absl::MutexLock lock(&run_mu_);
    while (results_.empty()) run_cv_.Wait(&run_mu_);
    r = std::move(results_.front());
    results_.pop_front();
  }
  if (varlen_ != nullptr && !varlen_launches_.empty()) {
    // The step occupied the runner from its launch (or the previous result, if it queued
    // behind it) until now.
    const int64_t now = MonotonicNanos();
    const auto [launch_ns, tokens] = varlen_launches_.front();
    varlen_launches_.pop_front();
    varlen_->ObserveStep(tokens, now - std::max(launch_ns, varlen_last_result_ns_));
    varlen_last_result_ns_ = now;
  }
  return r;
}

void Engine::Impl::RunnerLoop() {
  while (true) {
    StepPlan plan;
    {
      absl::MutexLock lock(&run_mu_);
      while (!runner_stop_ && plans_.empty()) run_cv_.Wait(&run_mu_);
      if (plans_.empty()) return;
      plan = std::move(plans_.front());
      plans_.pop_front();
    }
    StepResult result = runner_.Execute(plan);
    {
      absl::MutexLock lock(&run_mu_);
      results_.push_back(std::move(result));
    }
    run_cv_.SignalAll();
  }
}

void Engine::Impl::UpdateStats() {
  EngineStats s = local_stats_;
  s.num_running = scheduler_.num_running();
  s.num_waiting = scheduler_.num_waiting();
  s.kv_blocks_used = blocks_->num_used();
  s.kv_blocks_total = blocks_->num_blocks();
  s.state_slots_used = slots_->num_used();
  s.state_slots_total = slots_->num_slots();
  s.num_preemptions = scheduler_.num_preemptions();
  s.num_forward_passes = num_forwards_;
  if (varlen_ != nullptr) {
    s.spec_varlen_steps = varlen_->planned_steps();
    s.spec_verify_budget_total = varlen_->budget_total();
    s.spec_verify_budget_last = varlen_->last_budget();
    s.spec_varlen_candidates_total = varlen_->candidates_total();
    s.spec_varlen_gated_steps = varlen_->gated_steps();
    s.spec_varlen_benefit_gated_steps = varlen_->benefit_gated_steps();
    s.spec_planner_no_table = varlen_->no_table_fallbacks();
    s.spec_planner_no_stale_row = varlen_->neutral_rows();
  }
  const PrefixCacheCounters& pc = scheduler_.prefix_counters();
  s.prefix_cache_query_tokens = pc.query_tokens;
  s.prefix_cache_hit_tokens = pc.hit_tokens;
  s.prefix_cache_replayed_tokens = pc.replayed_tokens;
  s.prefix_cache_replays = pc.replays;
  s.prefix_cache_evicted_blocks = blocks_->num_evicted();
  s.prefix_cache_blocks = blocks_->num_cached();
  s.snapshots = snapshots_.size();
  s.snapshot_bytes = snapshots_.bytes();
  s.snapshot_evictions = snapshots_.num_evicted();
  s.prefix_cache_host_hit_tokens = pc.host_hit_tokens;
  s.prefix_cache_store_hit_tokens = pc.store_hit_tokens;
  if (tiers_ != nullptr) s.tiers = tiers_->Stats();
  absl::MutexLock lock(&stats_mu_);
  stats_ = s;
}

bool Engine::Impl::MultiTokenStepInFlight() const {
  for (const auto& [id, seq] : seqs_) {
    if (seq->num_pending > 0 && seq->info->multi_token_steps()) return true;
  }
  return false;
}

void Engine::Impl::Loop() {
  const size_t depth = config_.async_scheduling ? 2 : 1;
  while (true) {
    if (TakeInputs()) {
      std::vector<std::string> ids;
      for (const auto& [id, rs] : requests_) ids.push_back(id);
      for (const std::string& id : ids) AbortRequest(id);
      while (!in_flight_.empty()) PostProcess(WaitResult());
      UpdateStats();
      {
        absl::MutexLock lock(&in_mu_);
        engine_exited_ = true;
      }
      reset_cv_.SignalAll();
      return;
    }
    // Sequences with multi-token steps (speculation, jump-forward) are planned one step at a
    // time. Launching a step while one of theirs is in flight would plan only the others, and a
    // batch of them splits into groups computed on alternate steps (twice the forward passes):
    // wait for the step instead.
    if (!in_flight_.empty() && MultiTokenStepInFlight()) {
      PostProcess(WaitResult());
      UpdateStats();
      continue;
    }
    Draft();
    PlanVerifyLengths();
    TraceSpan schedule_span("schedule");
    StepPlan plan = scheduler_.Schedule();
    schedule_span.End();
    plan.released_seqs = std::move(pending_releases_);
    pending_releases_.clear();
    const bool has_items = !plan.items.empty();
    if (has_items || !plan.released_seqs.empty()) Launch(std::move(plan));
    if (!in_flight_.empty() && (in_flight_.size() >= depth || !has_items)) {
      PostProcess(WaitResult());
      UpdateStats();
      continue;
    }
    UpdateStats();
    if (in_flight_.empty() && !has_items) {
      absl::MutexLock lock(&in_mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(in_mu_) {
        return stop_ || !submissions_.empty() || !aborts_.empty() ||
               reset_requested_ > reset_done_;
      };
      if (seqs_.empty()) {
        while (!ready()) in_cv_.Wait(&in_mu_);
      } else {
        const absl::Time deadline = absl::Now() + absl::Milliseconds(1);
        while (!ready() && !in_cv_.WaitWithDeadline(&in_mu_, deadline)) {
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(std::unique_ptr<model::CausalLM> model,
                                                       const EngineConfig& config_in) {
  if (model == nullptr) return absl::InvalidArgumentError("Engine::Create: no model");
  EngineConfig config = config_in;
  // V4.1 names its DSpark stages mtp.* (num_nextn_predict_layers), and the seed's
  // DEEPINFER_USE_NEXTN_DECODE (which selects mtp) means DSpark there: mtp on a model whose
  // draft head is DSpark runs it.
  if (config.speculative.method == SpeculativeConfig::Method::kMtp &&
      model->draft_head() == "dspark") {
    LOG(INFO) << "speculative method mtp on " << model->info().architecture
              << ": its next-n head is DSpark, drafting with it";
    config.speculative.method = SpeculativeConfig::Method::kDspark;
  }
  // Default draft lengths: DSpark its block (spec §3.1: 5 in the release), MTP 1 (spec §2.1:
  // the one draft it was trained for), n-gram and custom drafters 3.
  if (config.speculative.num_speculative_tokens == 0) {
    switch (config.speculative.method) {
      case SpeculativeConfig::Method::kDspark:
        config.speculative.num_speculative_tokens =
            std::clamp(model->max_model_drafts(), 1, kMaxSpeculativeTokens);
        break;
      case SpeculativeConfig::Method::kMtp:
        config.speculative.num_speculative_tokens = 1;
        break;
      default:
        config.speculative.num_speculative_tokens = 3;
        break;
    }
  }
  if (config.max_num_seqs < 1 || config.max_num_batched_tokens < 1 ||
      config.max_waiting_requests < 0 || config.kv_memory_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("engine config: max_num_seqs (", config.max_num_seqs,
                     "), max_num_batched_tokens (", config.max_num_batched_tokens,
                     ") and kv_memory_bytes (", config.kv_memory_bytes, ") must be >= 1"));
  }
  if (config.snapshot_memory_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine config: snapshot_memory_bytes must be >= 0, got ", config.snapshot_memory_bytes));
  }
  const SpeculativeConfig& spec = config.speculative;
  if (spec.method != SpeculativeConfig::Method::kNone) {
    if (spec.num_speculative_tokens < 1 || spec.num_speculative_tokens > kMaxSpeculativeTokens) {
      return absl::InvalidArgumentError(
          absl::StrCat("engine config: num_speculative_tokens must be in [1, ",
                       kMaxSpeculativeTokens, "], got ", spec.num_speculative_tokens));
    }
    if (spec.varlen_min_concurrency < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "engine config: varlen_min_concurrency must be >= 0, got ", spec.varlen_min_concurrency));
    }
    if (spec.method == SpeculativeConfig::Method::kNgram &&
        (spec.prompt_lookup_min < 1 || spec.prompt_lookup_min > spec.prompt_lookup_max)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "engine config: prompt lookup needs 1 <= prompt_lookup_min <= prompt_lookup_max, got ",
          spec.prompt_lookup_min, " and ", spec.prompt_lookup_max));
    }
    if (spec.method == SpeculativeConfig::Method::kCustom && spec.drafter == nullptr) {
      return absl::InvalidArgumentError("engine config: speculative method custom needs a drafter");
    }
    if (spec.sampled_drafts && spec.method != SpeculativeConfig::Method::kDspark) {
      return absl::InvalidArgumentError(
          "engine config: sampled_drafts (--speculative-draft-sampling sampled) needs speculative "
          "method dspark, i.e. a model with a DSpark block");
    }
    if (spec.method == SpeculativeConfig::Method::kDspark) {
      if (model->draft_head() != "dspark" || model->max_model_drafts() <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "engine config: speculative method dspark needs a model with a DSpark block (",
            model->info().architecture, " has none)"));
      }
      if (spec.num_speculative_tokens > model->max_model_drafts()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "engine config: speculative method dspark drafts at most ", model->max_model_drafts(),
            " token(s) per step with this model (its block), got num_speculative_tokens ",
            spec.num_speculative_tokens));
      }
    }
    if (spec.method == SpeculativeConfig::Method::kMtp) {
      if (model->draft_feature_floats() <= 0 || model->max_model_drafts() <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "engine config: speculative method mtp needs a model with an MTP block (",
            model->info().architecture, " has none)"));
      }
      if (spec.num_speculative_tokens > model->max_model_drafts()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "engine config: speculative method mtp drafts at most ", model->max_model_drafts(),
            " token(s) per step with this model, got num_speculative_tokens ",
            spec.num_speculative_tokens));
      }
    }
  }
  const model::KvLayout& layout = model->kv_layout();
  const int64_t block_bytes = layout.BlockBytes();
  const int64_t state_bytes = layout.StateBytes();
  if (block_bytes <= 0) {
    return absl::InvalidArgumentError("model KvLayout has no paged cache (BlockBytes() == 0)");
  }
  const int64_t state_total = state_bytes * config.max_num_seqs;
  const int64_t num_blocks = (config.kv_memory_bytes - state_total) / block_bytes;
  if (num_blocks < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV memory budget of ", config.kv_memory_bytes, " bytes is too small: ", state_total,
        " bytes of state slots (", config.max_num_seqs, " x ", state_bytes, ") plus at least one ",
        block_bytes, "-byte block are needed"));
  }
  ASSIGN_OR_RETURN(auto blocks, kv::BlockPool::Create(num_blocks, block_bytes));
  blocks->set_observer(config.prefix_index_observer);
  ASSIGN_OR_RETURN(auto slots, kv::StateCache::Create(config.max_num_seqs, state_bytes));
  std::unique_ptr<KvTiers> tiers;
  if (config.tiers.enabled() && config.enable_prefix_caching) {
    ASSIGN_OR_RETURN(tiers, KvTiers::Create(config.tiers, layout.layout_id,
                                            static_cast<size_t>(state_bytes)));
    if (config.tiers.host_tier != nullptr) {
      const size_t need = kv::kBlockRecordHeaderBytes + static_cast<size_t>(block_bytes);
      if (config.tiers.host_tier->slot_bytes() < need) {
        return absl::InvalidArgumentError(absl::StrCat(
            "host KV tier slots hold ", config.tiers.host_tier->slot_bytes(),
            " bytes; this model's block records need ", need));
      }
    }
  }
  auto impl = std::make_unique<Impl>(std::move(model), config, std::move(blocks), std::move(slots),
                                     std::move(tiers));
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() { impl_->Shutdown(0); }

absl::StatusOr<std::shared_ptr<RequestStream>> Engine::Submit(GenerateRequest request) {
  return impl_->Submit(std::move(request));
}
void Engine::Abort(const std::string& request_id) { impl_->Abort(request_id); }
EngineStats Engine::Stats() const { return impl_->Stats(); }
void Engine::ResetPrefixCache() { impl_->ResetPrefixCache(); }
void Engine::Shutdown(int64_t timeout_ns) { impl_->Shutdown(timeout_ns); }
const model::ModelInfo& Engine::model_info() const { return impl_->info(); }
const EngineConfig& Engine::config() const { return impl_->config(); }

}  // namespace deepinfer::engine
