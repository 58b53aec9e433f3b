// The `deepinfer` command-line entry point: dispatches to subcommands (tools/commands.h).
#include <cstdio>
#include <cstring>
#include <string>

#include "common/config.h"
#include "tools/commands.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int argc, char** argv);
  const char* help;
};

// Keep one line per command; each command's flags are described by `deepinfer CMD --help`.
const Command kCommands[] = {
    {"version", deepinfer::cli::RunVersion, "print version, CPU features and kernel ISA"},
    {"serve", deepinfer::cli::RunServe, "OpenAI-compatible HTTP server (all-in-one)"},
    {"kvstore", deepinfer::cli::RunKvstore, "run a KV store node (block records, GC, TTL)"},
    {"generate", deepinfer::cli::RunGenerate,
     "generate from a text prompt (engine, sampling, constraints) or token ids (greedy)"},
    {"bench", deepinfer::cli::RunBench,
     "engine throughput/latency table (batch 1/8/32, TTFT, TPOT)"},
    {"score", deepinfer::cli::RunScore, "per-token log-probabilities and perplexity of text"},
    {"sim", deepinfer::cli::RunSim, "discrete-event cluster simulator (docs/simulator.md)"},
    {"plan", deepinfer::cli::RunPlan, "KV store capacity plan with fault-domain/write/TTL checks"},
    {"make-test-model", deepinfer::cli::RunMakeTestModel,
     "write a random-weight checkpoint (DeepSeek-V4 presets tiny/demo/bench)"},
};

// To stdout when asked for or when no command is given (`deepinfer`, `--help`, `help`: pipes
// into less, as git does), to stderr after an unknown command.
void PrintUsage(std::FILE* out) {
  std::fprintf(out, "Usage: deepinfer <command> [flags]\n\nCommands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-16s %s\n", c.name, c.help);
  std::fprintf(out, "\nEnvironment:\n");
  for (const auto& d : deepinfer::EnvVarDocs()) {
    std::fprintf(out, "  %-40s %s (default '%s')\n", d.name, d.meaning, d.default_value);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    PrintUsage(stdout);
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "--version") == 0) return deepinfer::cli::RunVersion(0, nullptr);
  if (absl::Status s = deepinfer::InitEnvConfigFromProcess(); !s.ok()) {
    std::fprintf(stderr, "deepinfer: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  for (const Command& c : kCommands) {
    if (std::strcmp(argv[1], c.name) == 0) return c.run(argc - 2, argv + 2);
  }
  std::fprintf(stderr, "deepinfer: unknown command '%s'\n\n", argv[1]);
  PrintUsage(stderr);
  return 2;
}
