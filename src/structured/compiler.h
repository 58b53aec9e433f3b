// Grammar compiler service (DEEPINFER-DESIGN.md §11): compiles JSON schema / JSON object /
// regex / EBNF constraints into CompiledGrammars on its own threads, off the engine thread,
// with a cache keyed by (constraint hash, vocabulary fingerprint). Requests wait for their
// grammar before entering the engine; a compile that exceeds the timeout ends in
// DeadlineExceeded and is cancelled (it polls a CompileBudget, compile_budget.h) once no
// request waits for it any more, so it does not hold its thread while later requests queue.
// Constraints are parsed into a Grammar on the caller's thread first (linear in their size),
// so a bad constraint is an immediate InvalidArgument, never queued behind other compiles.
//
// Also builds the matcher's Vocabulary from a Tokenizer: every added/special token is excluded
// from grammar output unless a grammar spells it as a control token (matcher.h,
// ControlTokenBytes); ids the tokenizer does not know (the model's padding rows) never match.
// Thread-safe.
#ifndef DEEPINFER_STRUCTURED_COMPILER_H_
#define DEEPINFER_STRUCTURED_COMPILER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "structured/json_schema.h"
#include "structured/matcher.h"

namespace deepinfer {
class Tokenizer;
}

namespace deepinfer::structured {

// What to constrain the output to (the offline API's so_args and the server's response_format).
struct ConstraintSpec {
  // kToolCalls: DSML tool calls (tool_call_grammar.h); `text` is
  // ToolCallGrammarOptionsToJson(options).
  enum class Kind { kJsonSchema, kJsonObject, kRegex, kEbnf, kToolCalls };
  Kind kind = Kind::kJsonObject;
  std::string text;  // the schema JSON, regex, EBNF or tool-call options (unused for kJsonObject)
  JsonSchemaOptions json_options;
};

// Parses `spec` into a Grammar (no vocabulary needed). Errors as the front ends'.
absl::StatusOr<Grammar> BuildGrammar(const ConstraintSpec& spec);

// The vocabulary of `tokenizer` for a model with `model_vocab_size` logits. `eos_ids` are the
// ids that end generation (tokenizer EOS plus the model's extra EOS ids).
Vocabulary VocabularyFromTokenizer(const Tokenizer& tokenizer, int64_t model_vocab_size,
                                   std::span<const int32_t> eos_ids);

class GrammarCompiler {
 public:
  struct Options {
    int num_threads = 1;
    int64_t compile_timeout_ms = 30000;
    size_t max_cache_entries = 256;
    // Bound on the compiled grammars' memory (CompiledGrammar::MemoryBytes at the end of their
    // compile). A grammar larger than this is used by its requests but not kept.
    size_t max_cache_bytes = size_t{1} << 30;
    // Compute every state's token sets at compile time (slower compile, faster first tokens).
    bool precompute_token_sets = true;
  };

  GrammarCompiler(std::shared_ptr<const VocabularyIndex> vocab, Options options);
  ~GrammarCompiler();
  GrammarCompiler(const GrammarCompiler&) = delete;
  GrammarCompiler& operator=(const GrammarCompiler&) = delete;

  // Returns the compiled grammar for `spec`, compiling it on a compiler thread if not cached.
  // Blocks the caller up to the compile timeout. Errors: InvalidArgument (bad constraint,
  // returned before queueing), DeadlineExceeded (compile took longer than the timeout; the
  // compile stops once every request waiting for it has timed out, and nothing is cached, so
  // a later identical request compiles afresh).
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Get(const ConstraintSpec& spec);

  const VocabularyIndex& vocab() const { return *vocab_; }
  int64_t cache_hits() const;
  int64_t compiles() const;

 private:
  struct Entry {
    bool done = false;                                               // guarded by mu_
    absl::StatusOr<std::shared_ptr<const CompiledGrammar>> result =  // guarded by mu_
        absl::UnknownError("pending");
    // The latest deadline (MonotonicNanos) of the requests waiting for this entry: the
    // compile's CompileBudget.
    std::atomic<int64_t> deadline_nanos{0};
    size_t bytes = 0;  // MemoryBytes() of the result once done; guarded by mu_
  };
  struct Job {
    std::string key;
    Grammar grammar;
    std::shared_ptr<Entry> entry;
  };
  void WorkerLoop();
  // Drops least recently used finished entries while the cache is over either bound (compiles
  // in flight stay). Requires mu_.
  void EvictLocked();
  static std::string CacheKey(const ConstraintSpec& spec);

  std::shared_ptr<const VocabularyIndex> vocab_;
  Options options_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  absl::flat_hash_map<std::string, std::shared_ptr<Entry>> cache_;  // guarded by mu_
  std::list<std::string> lru_;                                      // guarded by mu_
  std::list<Job> queue_;                                            // guarded by mu_
  bool stop_ = false;                                               // guarded by mu_
  int64_t hits_ = 0, compiles_ = 0;                                 // guarded by mu_
  size_t cached_bytes_ = 0;  // sum of the cached done entries' bytes; guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace deepinfer::structured

#endif  // DEEPINFER_STRUCTURED_COMPILER_H_
