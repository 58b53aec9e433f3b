// The one place where DEEPINFER_* environment variables are read (ARCHITECTURE.md §7).
//
// Variables (all optional; the README's "Environment" table is generated from the same list):
//   DEEPINFER_HF_MODEL_DIR                 model directory used when --model is absent ("")
//   DEEPINFER_BATCH_INVARIANT              0|1: every op reduces in an order independent of batch
//                                          size and position (default 0)
//   DEEPINFER_ENABLE_MTP_VARLEN            0|1: confidence-scheduled variable-length verify (0)
//   DEEPINFER_USE_NEXTN_DECODE             0..5: maximum draft length for speculative decode
//                                          (0 = off)
//   DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE none|compact: V4.1 decoder-side prefill truncation
//                                          (compact)
//   DEEPINFER_YOCO_PREFILL_KEEP_TOKENS     >= 1: prompt rows kept by compact truncation (140;
//                                          the model raises it to its window + 6)
//   DEEPINFER_ACCELERATOR                  cpu|cuda: kernel backend (cpu)
//   DEEPINFER_NUM_THREADS                  kernel threads, 0 = all cores (0)
//   DEEPINFER_FORCE_ISA                    auto|scalar|avx2|avx512|avx512bf16|amx: cap the CPU
//                                          kernel ISA (auto = the best up to avx512bf16: the AMX
//                                          tiles are opt-in); amxemu|avx512bf16emu: the best
//                                          vector ISA up to avx512 plus the emulated BF16-dot GEMM
//                                          (kernels/cpu/bf16_dot.h; tests)
//   DEEPINFER_REPACK_WEIGHTS               0|1: repack FP4 experts at load for the CPU kernels (1)
//   DEEPINFER_BF16_ACTIVATIONS             0|1: Llama rounds each linear's input to BF16, as
//                                          llama.cpp does for BF16 weights, so BF16 weights take
//                                          the BF16 dot-product kernels (0: FP32 inputs)
//   DEEPINFER_LOG_LEVEL                    debug|info|warning|error (info)
//   DEEPINFER_SHARED_DIR                   tests only: path to ../shared (models, goldens)
// A DEEPINFER_* variable not in this list produces a warning (likely a typo); a bad value is an
// InvalidArgument naming the variable, the value and what is accepted.
#ifndef DEEPINFER_COMMON_CONFIG_H_
#define DEEPINFER_COMMON_CONFIG_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/logging.h"

namespace deepinfer {

// Kernel instruction set cap (DEEPINFER_FORCE_ISA), in increasing order. kAvx512Bf16: the
// AVX-512 kernels plus VDPBF16PS dot products for exact BF16 x BF16 linears; kAmx: the same with
// AMX-BF16 tiles (kernels/cpu/bf16_dot.h).
enum class IsaLevel { kAuto = 0, kScalar = 1, kAvx2 = 2, kAvx512 = 3, kAvx512Bf16 = 4, kAmx = 5 };

// DEEPINFER_FORCE_ISA=amxemu / avx512bf16emu: the BF16-dot GEMM in its portable emulation of
// the AMX / VDPBF16PS arithmetic order, on any CPU (kernels/cpu/bf16_dot.h).
enum class Bf16DotEmulation { kNone = 0, kAmx = 1, kVdp = 2 };

// Parsed DEEPINFER_* environment. Defaults are the documented ones above.
struct EnvConfig {
  std::string hf_model_dir;
  bool batch_invariant = false;
  bool enable_mtp_varlen = false;
  int use_nextn_decode = 0;
  std::string yoco_prefill_truncation_mode = "compact";
  int yoco_prefill_keep_tokens = 140;
  std::string accelerator = "cpu";
  int num_threads = 0;
  IsaLevel force_isa = IsaLevel::kAuto;
  Bf16DotEmulation bf16_dot_emulation = Bf16DotEmulation::kNone;
  bool repack_weights = true;
  bool bf16_activations = false;
  LogLevel log_level = LogLevel::kInfo;
};

// One documented variable: name, default (as text) and meaning. Used for warnings, --help and
// the README.
struct EnvVarDoc {
  const char* name;
  const char* default_value;
  const char* meaning;
};
const std::vector<EnvVarDoc>& EnvVarDocs();

// Parses `env` (name -> value; entries not starting with DEEPINFER_ are ignored). Unknown
// DEEPINFER_* names are appended to `warnings` (may be null). Errors: InvalidArgument for a
// value that does not parse or is out of range, naming the variable.
absl::StatusOr<EnvConfig> ParseEnvConfig(const std::map<std::string, std::string>& env,
                                         std::vector<std::string>* warnings);

// Reads the process environment, parses it, logs warnings and installs the result as the
// process-wide config returned by Env(). Call once at program start; returns the parse error.
absl::Status InitEnvConfigFromProcess();

// Settings this build parses but cannot honour. Returns FailedPrecondition for a backend that
// is not built (DEEPINFER_ACCELERATOR=cuda: there is no CUDA backend yet); appends a warning for
// each setting that asks for a feature not implemented yet (none today).
// DEEPINFER_ENABLE_MTP_VARLEN=1 selects --speculative-varlen async (tools/engine_flags.cc).
// InitEnvConfigFromProcess() calls it.
absl::Status CheckEnvConfigSupported(const EnvConfig& config, std::vector<std::string>* warnings);

// The process-wide config. If InitEnvConfigFromProcess() was not called, the process
// environment is parsed on first use; a bad value then logs an error and defaults are used.
const EnvConfig& Env();

// Replaces the process-wide config (tests only; not thread-safe against concurrent Env()).
void SetEnvConfigForTesting(const EnvConfig& config);

}  // namespace deepinfer

#endif  // DEEPINFER_COMMON_CONFIG_H_
