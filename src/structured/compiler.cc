#include "structured/compiler.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/status.h"
#include "structured/ebnf.h"
#include "structured/regex.h"
#include "structured/tool_call_grammar.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::structured {

absl::StatusOr<Grammar> BuildGrammar(const ConstraintSpec& spec) {
  switch (spec.kind) {
    case ConstraintSpec::Kind::kJsonSchema:
      return JsonSchemaToGrammar(spec.text, spec.json_options);
    case ConstraintSpec::Kind::kJsonObject:
      return AnyJsonGrammar(true, spec.json_options);
    case ConstraintSpec::Kind::kRegex:
      return RegexToGrammar(spec.text);
    case ConstraintSpec::Kind::kEbnf:
      return ParseEbnf(spec.text);
    case ConstraintSpec::Kind::kToolCalls: {
      ASSIGN_OR_RETURN(ToolCallGrammarOptions options, ToolCallGrammarOptionsFromJson(spec.text));
      return ToolCallGrammar(options);
    }
  }
  return absl::InvalidArgumentError("unknown constraint kind");
}

Vocabulary VocabularyFromTokenizer(const Tokenizer& tokenizer, int64_t model_vocab_size,
                                   std::span<const int32_t> eos_ids) {
  Vocabulary v;
  const int64_t n = std::max<int64_t>(model_vocab_size, tokenizer.vocab_size());
  v.token_bytes.resize(n);
  for (int64_t id = 0; id < n; ++id) {
    if (id >= tokenizer.vocab_size()) continue;
    TokenInfo info = tokenizer.GetTokenInfo(static_cast<int32_t>(id));
    if (info.is_added || info.is_special) {
      // Control token: only a grammar that spells ControlTokenBytes(content) allows it (EOS ids
      // are handled by eos_ids and never get a spelling).
      const std::string_view content = tokenizer.TokenBytes(static_cast<int32_t>(id));
      const bool is_eos = std::find(eos_ids.begin(), eos_ids.end(), id) != eos_ids.end();
      if (is_eos || content.empty() || content.find(kControlByte) != std::string_view::npos) {
        v.special_ids.push_back(static_cast<int32_t>(id));
      } else {
        v.token_bytes[id] = ControlTokenBytes(content);
      }
      continue;
    }
    v.token_bytes[id] = std::string(tokenizer.TokenBytes(static_cast<int32_t>(id)));
  }
  for (int32_t id : eos_ids) {
    if (id >= 0 && id < n) v.eos_ids.push_back(id);
  }
  return v;
}

GrammarCompiler::GrammarCompiler(std::shared_ptr<const VocabularyIndex> vocab, Options options)
    : vocab_(std::move(vocab)), options_(options) {
  for (int i = 0; i < std::max(1, options_.num_threads); ++i) {
    threads_.emplace_back([this] { WorkerLoop(); });
  }
}

GrammarCompiler::~GrammarCompiler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    // Cancel compiles in flight so that the threads join promptly.
    for (auto& [key, entry] : cache_) {
      if (!entry->done) entry->deadline_nanos.store(0);
    }
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

std::string GrammarCompiler::CacheKey(const ConstraintSpec& spec) {
  return absl::StrCat(static_cast<int>(spec.kind), ":",
                      static_cast<int>(spec.json_options.whitespace), ":",
                      spec.json_options.max_whitespace, ":", spec.text);
}

void GrammarCompiler::WorkerLoop() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    // The budget follows the entry's deadline, which later requests for the same grammar push
    // back; once every waiter has timed out the compile stops at its next poll.
    const CompileBudget budget(&job.entry->deadline_nanos);
    absl::StatusOr<std::shared_ptr<const CompiledGrammar>> result =
        absl::DeadlineExceededError("grammar compilation was cancelled before it started");
    const bool started = !budget.Expired();  // else nobody waits for it any more: skip
    if (started) {
      result = CompiledGrammar::Compile(job.grammar, vocab_, budget);
      if (result.ok() && options_.precompute_token_sets) {
        const absl::Status precomputed = (*result)->Precompute(budget);
        if (!precomputed.ok()) result = precomputed;
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (started) ++compiles_;
      if (absl::IsDeadlineExceeded(result.status()) &&
          MonotonicNanos() < job.entry->deadline_nanos.load()) {
        // A request joined after the budget ran out (it moved the deadline under mu_): start
        // over for it rather than fail it early.
        queue_.push_front(std::move(job));
        continue;
      }
      job.entry->result = std::move(result);
      job.entry->done = true;
      if (job.entry->result.ok()) {
        auto it = cache_.find(job.key);
        if (it != cache_.end() && it->second == job.entry) {
          job.entry->bytes = (*job.entry->result)->MemoryBytes();
          cached_bytes_ += job.entry->bytes;
          EvictLocked();
        }
      }
      // Failed or cancelled compiles are not cached: the next request retries (and gets the
      // same error, or a complete grammar), never a partial one.
      if (!job.entry->result.ok()) {
        auto it = cache_.find(job.key);
        if (it != cache_.end() && it->second == job.entry) {
          cache_.erase(it);
          lru_.remove(job.key);
        }
      }
    }
    done_cv_.notify_all();
  }
}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarCompiler::Get(
    const ConstraintSpec& spec) {
  const std::string key = CacheKey(spec);
  const int64_t deadline = MonotonicNanos() + options_.compile_timeout_ms * 1'000'000;
  std::shared_ptr<Entry> entry;
  // Joins the cache entry for `key` if there is one (guarded by mu_).
  auto join_existing = [&]() {
    auto it = cache_.find(key);
    if (it == cache_.end()) return false;
    entry = it->second;
    ++hits_;
    lru_.remove(key);
    lru_.push_front(key);
    if (entry->deadline_nanos.load() < deadline) entry->deadline_nanos.store(deadline);
    return true;
  };
  bool queued = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    join_existing();
  }
  if (entry == nullptr) {
    // Parse on the caller's thread: linear in the constraint's size, and a bad constraint is
    // an immediate InvalidArgument instead of a wait behind other requests' compiles.
    absl::StatusOr<Grammar> grammar = BuildGrammar(spec);
    if (!grammar.ok()) return grammar.status();
    std::lock_guard<std::mutex> lock(mu_);
    if (!join_existing()) {  // another request may have queued it meanwhile
      entry = std::make_shared<Entry>();
      entry->deadline_nanos.store(deadline);
      cache_[key] = entry;
      lru_.push_front(key);
      queue_.push_back(Job{key, *std::move(grammar), entry});
      queued = true;
      EvictLocked();
    }
  }
  if (queued) work_cv_.notify_one();
  std::unique_lock<std::mutex> lock(mu_);
  const bool finished = done_cv_.wait_until(
      lock, std::chrono::steady_clock::time_point(std::chrono::nanoseconds(deadline)),
      [&] { return entry->done; });
  if (!finished) {
    return absl::DeadlineExceededError(
        absl::StrCat("grammar compilation took longer than ", options_.compile_timeout_ms, " ms"));
  }
  return entry->result;
}

void GrammarCompiler::EvictLocked() {
  for (auto it = lru_.end();
       (lru_.size() > options_.max_cache_entries || cached_bytes_ > options_.max_cache_bytes) &&
       it != lru_.begin();) {
    --it;
    auto victim = cache_.find(*it);
    if (victim != cache_.end() && !victim->second->done) continue;
    if (victim != cache_.end()) {
      cached_bytes_ -= victim->second->bytes;
      cache_.erase(victim);
    }
    it = lru_.erase(it);
  }
}

int64_t GrammarCompiler::cache_hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

int64_t GrammarCompiler::compiles() const {
  std::lock_guard<std::mutex> lock(mu_);
  return compiles_;
}

}  // namespace deepinfer::structured
