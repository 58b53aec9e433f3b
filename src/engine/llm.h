// LLM: offline batch generation over an Engine (vLLM's `LLM.generate` shape). Submits every
// prompt at once, lets continuous batching run them together and collects complete outputs.
//
// Structured output (issue #11, DEEPINFER-DESIGN.md §11): SamplingParams::so_args is compiled by
// the LLM's structured::GrammarCompiler on the caller's side before any prompt is submitted —
// never on the engine thread. Distinct constraints of one Generate call compile in parallel on
// the compiler's threads; identical ones compile once (and are cached across calls).
#ifndef DEEPINFER_ENGINE_LLM_H_
#define DEEPINFER_ENGINE_LLM_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/statusor.h"
#include "common/thread_pool.h"
#include "engine/engine.h"
#include "structured/compiler.h"

namespace deepinfer::engine {

// One sample's complete result.
struct SampleOutput {
  std::vector<int32_t> token_ids;
  std::vector<TokenLogprob> logprobs;  // parallel to token_ids when params.logprobs >= 0
  FinishReason finish = FinishReason::kLength;
  int64_t first_token_ns = 0;  // MonotonicNanos
  int64_t finish_ns = 0;
  // Prefix cache (StepOutput): prompt tokens served from the cache, tokens a bounded replay
  // recomputed, and whether the sample descends from a replayed window state.
  int cached_tokens = 0;
  int replayed_tokens = 0;
  bool approximate = false;
};

// One prompt's result: `samples` has params.n entries, by sample index.
struct GenerateOutput {
  std::vector<int32_t> prompt;
  std::vector<TokenLogprob> prompt_logprobs;
  std::vector<SampleOutput> samples;
  int64_t arrival_ns = 0;
};

// Checks `args` without a vocabulary (Validate's rules, then parsing the schema / regex / EBNF
// into a grammar), so a front end can reject a bad constraint before loading a model.
// Errors: InvalidArgument with the front end's message (keyword and JSON pointer, position).
absl::Status CheckStructuredOutputArgs(const StructuredOutputArgs& args);

// Options of an LLM created with a tokenizer.
struct LLMOptions {
  // Threads, compile timeout and cache size of the grammar compiler that serves so_args.
  structured::GrammarCompiler::Options compiler = {.num_threads = 2};
};

class LLM {
 public:
  // Without a grammar compiler: so_args is rejected (FailedPrecondition); compiled grammars
  // (SamplingParams::grammar) still work.
  explicit LLM(std::unique_ptr<Engine> engine);
  // With a grammar compiler (may be shared, e.g. with a server on the same model); its
  // vocabulary must be the model's (VocabularyFromTokenizer of the model's tokenizer).
  // `parallel_compiles`: distinct constraints of one Generate call waited for at once (match the
  // compiler's num_threads).
  LLM(std::unique_ptr<Engine> engine, std::shared_ptr<structured::GrammarCompiler> compiler,
      int parallel_compiles = 1);
  ~LLM();

  static absl::StatusOr<std::unique_ptr<LLM>> Create(std::unique_ptr<model::CausalLM> model,
                                                     const EngineConfig& config);
  // Same, plus a grammar compiler over `tokenizer`'s vocabulary sized to the model's logits
  // (EOS ids: the model's and the tokenizer's), so that so_args can be used. The tokenizer is
  // only read during the call.
  static absl::StatusOr<std::unique_ptr<LLM>> Create(std::unique_ptr<model::CausalLM> model,
                                                     const EngineConfig& config,
                                                     const Tokenizer& tokenizer,
                                                     const LLMOptions& options = {});

  // Generates for every prompt (token ids) with the same parameters; outputs in prompt order.
  // Errors, each naming the prompt index ("prompt i: ..."), nothing left running:
  //   InvalidArgument: bad SamplingParams, or so_args that do not compile (bad JSON schema,
  //                    unsupported keyword, bad regex / EBNF with its position);
  //   FailedPrecondition: so_args without a grammar compiler (LLM created without tokenizer);
  //   DeadlineExceeded: a compile exceeding the compiler's timeout;
  //   the first Submit error, or the error of a sample that finished with FinishReason::kError.
  absl::StatusOr<std::vector<GenerateOutput>> Generate(
      const std::vector<std::vector<int32_t>>& prompts, const SamplingParams& params);
  // Same with per-prompt parameters (params.size() == prompts.size()).
  absl::StatusOr<std::vector<GenerateOutput>> Generate(
      const std::vector<std::vector<int32_t>>& prompts, const std::vector<SamplingParams>& params);
  // The submitting half of Generate, for callers that consume the streams themselves (the
  // Python package's streaming iterator; issue #28): compiles so_args, submits every prompt and
  // returns the streams in prompt order. All or nothing: on an error (Generate's, before
  // collection) every stream already submitted is aborted and drained.
  absl::StatusOr<std::vector<std::shared_ptr<RequestStream>>> Submit(
      const std::vector<std::vector<int32_t>>& prompts, const std::vector<SamplingParams>& params);

  Engine& engine() { return *engine_; }
  // Null when the LLM was created without a tokenizer / compiler.
  structured::GrammarCompiler* grammar_compiler() { return compiler_.get(); }

 private:
  // Replaces so_args by the compiled grammar in every params entry.
  absl::Status CompileSoArgs(std::vector<SamplingParams>& params);

  std::unique_ptr<Engine> engine_;
  std::shared_ptr<structured::GrammarCompiler> compiler_;
  // Callers waiting on the compiler, one per compiler thread (ParallelFor over the distinct
  // constraints); guarded by compile_mu_ (ParallelFor takes one caller at a time).
  int parallel_compiles_ = 1;
  std::unique_ptr<ThreadPool> compile_waiters_;
  std::mutex compile_mu_;
};

}  // namespace deepinfer::engine

#endif  // DEEPINFER_ENGINE_LLM_H_
