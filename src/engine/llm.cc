#include "engine/llm.h"

#include <algorithm>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/strings.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::engine {
namespace {

structured::ConstraintSpec ToSpec(const StructuredOutputArgs& a) {
  using Type = StructuredOutputArgs::SchemaType;
  using Kind = structured::ConstraintSpec::Kind;
  structured::ConstraintSpec spec;
  switch (a.schema_type) {
    case Type::kJsonSchema:
      spec.kind = Kind::kJsonSchema;
      break;
    case Type::kJsonObject:
      spec.kind = Kind::kJsonObject;
      break;
    case Type::kRegex:
      spec.kind = Kind::kRegex;
      break;
    case Type::kEbnf:
      spec.kind = Kind::kEbnf;
      break;
  }
  spec.text = a.schema;
  spec.json_options.whitespace = a.whitespace == StructuredOutputArgs::Whitespace::kFlexible
                                     ? structured::WhitespacePolicy::kFlexible
                                     : structured::WhitespacePolicy::kCompact;
  return spec;
}

// Identity of a constraint within one Generate call (the compiler has its own cache key).
std::string SpecKey(const StructuredOutputArgs& a) {
  return absl::StrCat(static_cast<int>(a.schema_type), ":", static_cast<int>(a.whitespace), ":",
                      a.schema);
}

}  // namespace

absl::Status CheckStructuredOutputArgs(const StructuredOutputArgs& args) {
  SamplingParams p;
  p.so_args = args;
  RETURN_IF_ERROR(p.Validate());
  return structured::BuildGrammar(ToSpec(args)).status();
}

LLM::LLM(std::unique_ptr<Engine> engine) : engine_(std::move(engine)) {}

LLM::LLM(std::unique_ptr<Engine> engine, std::shared_ptr<structured::GrammarCompiler> compiler,
         int parallel_compiles)
    : engine_(std::move(engine)),
      compiler_(std::move(compiler)),
      parallel_compiles_(std::max(1, parallel_compiles)) {}

LLM::~LLM() = default;

absl::StatusOr<std::unique_ptr<LLM>> LLM::Create(std::unique_ptr<model::CausalLM> model,
                                                 const EngineConfig& config) {
  ASSIGN_OR_RETURN(auto engine, Engine::Create(std::move(model), config));
  return std::make_unique<LLM>(std::move(engine));
}

absl::StatusOr<std::unique_ptr<LLM>> LLM::Create(std::unique_ptr<model::CausalLM> model,
                                                 const EngineConfig& config,
                                                 const Tokenizer& tokenizer,
                                                 const LLMOptions& options) {
  const model::ModelInfo& info = model->info();
  std::vector<int32_t> eos = info.eos_token_ids;
  if (tokenizer.eos_id() >= 0) eos.push_back(tokenizer.eos_id());
  auto vocab = std::make_shared<structured::VocabularyIndex>(
      structured::VocabularyFromTokenizer(tokenizer, info.vocab_size, eos));
  auto compiler = std::make_shared<structured::GrammarCompiler>(std::move(vocab), options.compiler);
  ASSIGN_OR_RETURN(auto engine, Engine::Create(std::move(model), config));
  return std::make_unique<LLM>(std::move(engine), std::move(compiler),
                               options.compiler.num_threads);
}

absl::Status LLM::CompileSoArgs(std::vector<SamplingParams>& params) {
  // Distinct constraints, each with the first prompt that uses it (errors name that prompt).
  absl::flat_hash_map<std::string, size_t> index_of;
  std::vector<size_t> first_prompt;
  std::vector<size_t> constraint_of(params.size(), 0);
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].so_args.has_value()) continue;
    RETURN_IF_ERROR(Annotate(params[i].Validate(), absl::StrCat("prompt ", i)));
    if (compiler_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "prompt ", i,
          ": SamplingParams::so_args needs a grammar compiler; create the LLM with the model's "
          "tokenizer (LLM::Create(model, config, tokenizer))"));
    }
    auto [it, inserted] = index_of.try_emplace(SpecKey(*params[i].so_args), first_prompt.size());
    if (inserted) first_prompt.push_back(i);
    constraint_of[i] = it->second;
  }
  if (first_prompt.empty()) return absl::OkStatus();

  // Each waiter blocks in GrammarCompiler::Get while the compiler's threads work, so up to
  // num_threads distinct constraints compile at once.
  const int64_t n = static_cast<int64_t>(first_prompt.size());
  std::vector<absl::StatusOr<std::shared_ptr<const structured::CompiledGrammar>>> compiled(
      n, absl::UnknownError("not compiled"));
  if (n == 1 || parallel_compiles_ == 1) {
    for (int64_t c = 0; c < n; ++c) {
      compiled[c] = compiler_->Get(ToSpec(*params[first_prompt[c]].so_args));
    }
  } else {
    std::lock_guard<std::mutex> lock(compile_mu_);  // one ParallelFor caller at a time
    if (compile_waiters_ == nullptr) {
      compile_waiters_ = std::make_unique<ThreadPool>(parallel_compiles_);
    }
    compile_waiters_->ParallelFor(n, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        compiled[c] = compiler_->Get(ToSpec(*params[first_prompt[c]].so_args));
      }
    });
  }
  for (int64_t c = 0; c < n; ++c) {
    if (!compiled[c].ok()) {
      const StructuredOutputArgs& a = *params[first_prompt[c]].so_args;
      return Annotate(compiled[c].status(),
                      absl::StrCat("prompt ", first_prompt[c], ": so_args (",
                                   AbslView(SchemaTypeName(a.schema_type)), ")"));
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].so_args.has_value()) continue;
    params[i].grammar = *compiled[constraint_of[i]];
    params[i].so_args.reset();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<GenerateOutput>> LLM::Generate(
    const std::vector<std::vector<int32_t>>& prompts, const SamplingParams& params) {
  return Generate(prompts, std::vector<SamplingParams>(prompts.size(), params));
}

absl::StatusOr<std::vector<std::shared_ptr<RequestStream>>> LLM::Submit(
    const std::vector<std::vector<int32_t>>& prompts, const std::vector<SamplingParams>& params) {
  if (params.size() != prompts.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("LLM::Generate: ", prompts.size(), " prompts but ", params.size(), " params"));
  }
  // Compile every so_args before submitting anything: a bad constraint fails the whole call
  // with nothing started.
  std::vector<SamplingParams> compiled_params = params;
  RETURN_IF_ERROR(CompileSoArgs(compiled_params));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateRequest req;
    req.prompt = prompts[i];
    req.params = std::move(compiled_params[i]);
    absl::StatusOr<std::shared_ptr<RequestStream>> stream = engine_->Submit(std::move(req));
    if (!stream.ok()) {
      for (const auto& s : streams) engine_->Abort(s->request_id());
      for (const auto& s : streams) {
        while (s->Next().has_value()) {
        }
      }
      return Annotate(stream.status(), absl::StrCat("prompt ", i));
    }
    streams.push_back(*stream);
  }
  return streams;
}

absl::StatusOr<std::vector<GenerateOutput>> LLM::Generate(
    const std::vector<std::vector<int32_t>>& prompts, const std::vector<SamplingParams>& params) {
  ASSIGN_OR_RETURN(std::vector<std::shared_ptr<RequestStream>> streams, Submit(prompts, params));
  std::vector<GenerateOutput> outputs(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    outputs[i].prompt = prompts[i];
    outputs[i].samples.resize(params[i].n);
  }
  absl::Status first_error;
  for (size_t i = 0; i < streams.size(); ++i) {
    while (std::optional<StepOutput> out = streams[i]->Next()) {
      GenerateOutput& g = outputs[i];
      g.arrival_ns = out->arrival_ns;
      if (!out->prompt_logprobs.empty()) g.prompt_logprobs = std::move(out->prompt_logprobs);
      SampleOutput& s = g.samples[out->sample_index];
      s.token_ids.insert(s.token_ids.end(), out->token_ids.begin(), out->token_ids.end());
      s.logprobs.insert(s.logprobs.end(), out->logprobs.begin(), out->logprobs.end());
      if (out->first_token_ns != 0) s.first_token_ns = out->first_token_ns;
      s.cached_tokens = out->cached_tokens;
      s.replayed_tokens = out->replayed_tokens;
      s.approximate = out->approximate;
      if (out->finish.has_value()) {
        s.finish = *out->finish;
        s.finish_ns = out->now_ns;
        if (*out->finish == FinishReason::kError && first_error.ok()) {
          first_error = Annotate(out->error, absl::StrCat("prompt ", i));
        }
      }
    }
  }
  if (!first_error.ok()) return first_error;
  return outputs;
}

}  // namespace deepinfer::engine
