// Engine options shared by the commands that build an engine::EngineConfig from flags
// (`deepinfer serve`, `deepinfer bench`): byte sizes and the prefix-cache flags.
//
//   FlagSet flags("serve");
//   AddPrefixCacheFlags(flags);
//   ...parse...
//   RETURN_IF_ERROR(ApplyPrefixCacheFlags(flags, &engine_config));
#ifndef DEEPINFER_TOOLS_ENGINE_FLAGS_H_
#define DEEPINFER_TOOLS_ENGINE_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "tools/cli_flags.h"

namespace deepinfer::cli {

// "1073741824", "512M", "2G", "1.5GiB" -> bytes (K/M/G with optional B / iB are powers of 1024).
// `allow_zero`: "0" (any suffix) is accepted and means 0. Errors: InvalidArgument naming
// `--<flag>` and the bad text.
absl::StatusOr<int64_t> ParseByteSize(const std::string& flag, const std::string& text,
                                      bool allow_zero = false);

// Declares --prefix-caching (default on; --no-prefix-caching turns it off),
// --prefix-cache-mode replay|exact and --snapshot-memory SIZE (default 1G; 0 = no snapshots).
void AddPrefixCacheFlags(FlagSet& flags);

// Sets EngineConfig::enable_prefix_caching, prefix_cache_mode and snapshot_memory_bytes from the
// flags AddPrefixCacheFlags declared. Errors: InvalidArgument naming the flag
// ("--prefix-cache-mode: 'fast' is not one of replay, exact").
absl::Status ApplyPrefixCacheFlags(const FlagSet& flags, engine::EngineConfig* config);

// Declares the decoding flags: --jump-forward (default on; --no-jump-forward turns it off),
// --speculative-method none|ngram|mtp|dspark|scripted, --num-speculative-tokens N,
// --prompt-lookup-min N and --prompt-lookup-max N (vLLM's names and rule: 5 / 5 when neither is
// given, one given sets both), --speculative-script FILE (the scripted testing drafter,
// engine/speculative/script_drafter.h), --speculative-draft-sampling greedy|sampled (DSpark),
// --speculative-varlen off|sync|async, --speculative-cost-table FILE|profile,
// --speculative-varlen-min-concurrency N and --speculative-varlen-gate measured|off.
void AddDecodingFlags(FlagSet& flags);

// Sets EngineConfig::jump_forward and EngineConfig::speculative from the flags
// AddDecodingFlags declared. DEEPINFER_USE_NEXTN_DECODE > 0 selects mtp when
// --speculative-method is absent and gives the draft length when --num-speculative-tokens is
// absent, DEEPINFER_ENABLE_MTP_VARLEN=1 selects --speculative-varlen async; flags win. Errors:
// InvalidArgument naming the flag (an unknown method, a length outside 1..5, min > max,
// scripted without a readable --speculative-script or a script without scripted, sampled drafts
// without dspark / mtp, varlen without a method, an unreadable cost table, a bad gate value). Whether the model can do mtp / dspark is Engine::Create's check, which
// also resolves dspark's default length (0 here) to the model's block.
absl::Status ApplyDecodingFlags(const FlagSet& flags, engine::EngineConfig* config);

}  // namespace deepinfer::cli

#endif  // DEEPINFER_TOOLS_ENGINE_FLAGS_H_
