#include "tools/engine_flags.h"

#include <cctype>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "engine/speculative/script_drafter.h"
#include "engine/speculative/varlen_controller.h"
#include "engine/speculative/verify_planner.h"

namespace deepinfer::cli {

absl::StatusOr<int64_t> ParseByteSize(const std::string& flag, const std::string& text,
                                      bool allow_zero) {
  std::string num = text;
  double scale = 1;
  while (!num.empty() && std::isalpha(static_cast<unsigned char>(num.back()))) num.pop_back();
  std::string suffix = text.substr(num.size());
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (suffix == "" || suffix == "B") {
    scale = 1;
  } else if (suffix == "K" || suffix == "KB" || suffix == "KIB") {
    scale = 1024.0;
  } else if (suffix == "M" || suffix == "MB" || suffix == "MIB") {
    scale = 1024.0 * 1024;
  } else if (suffix == "G" || suffix == "GB" || suffix == "GIB") {
    scale = 1024.0 * 1024 * 1024;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": '", text, "' is not a size (e.g. 512M, 2G)"));
  }
  double v = 0;
  const bool parsed = absl::SimpleAtod(num, &v) && std::isfinite(v);
  if (!parsed || !(v > 0 || (allow_zero && v == 0)) || v * scale >= 9.2e18) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": '", text, "' is not a ", allow_zero ? "size" : "positive size",
                     " (e.g. 512M, 2G", allow_zero ? ", 0" : "", ")"));
  }
  return static_cast<int64_t>(v * scale);
}

void AddPrefixCacheFlags(FlagSet& flags) {
  flags.AddBool("prefix-caching", true,
                "reuse the KV of earlier requests' shared prompt prefixes (--no-prefix-caching: "
                "recompute every prompt)");
  flags.AddString("prefix-cache-mode", "replay",
                  "replay: hit up to the last cached block, rebuilding the window state by a "
                  "bounded replay when no snapshot exists; exact: reuse only exact blocks and end "
                  "the hit at a snapshot (outputs equal an uncached run)");
  flags.AddString("snapshot-memory", "1G",
                  "host memory for sliding-window state snapshots (e.g. 512M; 0 = none)");
}

absl::Status ApplyPrefixCacheFlags(const FlagSet& flags, engine::EngineConfig* config) {
  const std::string mode = flags.GetString("prefix-cache-mode");
  if (mode == "replay") {
    config->prefix_cache_mode = engine::EngineConfig::PrefixCacheMode::kReplay;
  } else if (mode == "exact") {
    config->prefix_cache_mode = engine::EngineConfig::PrefixCacheMode::kExact;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--prefix-cache-mode: '", mode, "' is not one of replay, exact"));
  }
  absl::StatusOr<int64_t> snapshot =
      ParseByteSize("snapshot-memory", flags.GetString("snapshot-memory"), /*allow_zero=*/true);
  if (!snapshot.ok()) return snapshot.status();
  config->snapshot_memory_bytes = *snapshot;
  config->enable_prefix_caching = flags.GetBool("prefix-caching");
  return absl::OkStatus();
}

void AddDecodingFlags(FlagSet& flags) {
  flags.AddBool("jump-forward", true,
                "append the text a grammar forces in one step (jump-forward decoding; "
                "--no-jump-forward: one token per forward pass)");
  flags.AddString("speculative-method", "",
                  "none|ngram|mtp|dspark|scripted: speculative decoding drafter (ngram: prompt "
                  "lookup; mtp: the model's MTP block, DeepSeek-V4; dspark: the model's DSpark "
                  "block, DeepSeek-V4.1; scripted: a testing drafter that "
                  "proposes what --speculative-script lists; default none, or mtp when "
                  "DEEPINFER_USE_NEXTN_DECODE > 0)");
  flags.AddString("num-speculative-tokens", "",
                  "draft tokens verified per step, 1..5 (mtp: the MTP block chained on its own "
                  "output; default: DEEPINFER_USE_NEXTN_DECODE, else 1 for mtp, the model's "
                  "block (5) for dspark and 3 for ngram)");
  flags.AddString("prompt-lookup-min", "",
                  "ngram: shortest n-gram looked up (as vLLM: 5 when neither size is given, "
                  "--prompt-lookup-max when only that is)");
  flags.AddString("prompt-lookup-max", "",
                  "ngram: longest n-gram looked up (as vLLM: 5 when neither size is given, "
                  "--prompt-lookup-min when only that is)");
  flags.AddString("speculative-script", "",
                  "scripted (testing only): file of token-id sequences to draft from, one per "
                  "line, `A/B` = match A, draft B (engine/speculative/script_drafter.h)");
  flags.AddString("speculative-varlen", "",
                  "off|sync|async: confidence-scheduled variable-length verification (sync: "
                  "the paper's greedy stop; async: budget from 2-step-stale confidences, split "
                  "by current ones; default async when DEEPINFER_ENABLE_MTP_VARLEN=1, else off)");
  flags.AddString("speculative-cost-table", "profile",
                  "FILE|profile: step time vs verified tokens for --speculative-varlen (JSON "
                  "{\"verify\": [{\"tokens\": M, \"ms\": t}, ...]}, or timed at start-up)");
  flags.AddString("speculative-varlen-min-concurrency", "0",
                  "verify the full block in steps with fewer speculating requests than this");
  flags.AddString("speculative-draft-sampling", "greedy",
                  "greedy|sampled: how DSpark drafts (spec speculative.md 5.9): greedy drafts "
                  "keep seeded outputs identical to speculation off (sample-and-compare); "
                  "sampled draws them at the request's temperature and verifies by rejection "
                  "sampling (same output law, higher acceptance, other seeded outputs)");
  flags.AddString("speculative-varlen-gate", "measured",
                  "measured|off: with --speculative-varlen, plan variable lengths only at the "
                  "concurrency levels where they measured faster (committed tokens per ms) than "
                  "verifying full blocks (spec speculative.md 5.8); off: plan every step");
}

absl::Status ApplyDecodingFlags(const FlagSet& flags, engine::EngineConfig* config) {
  using Method = engine::SpeculativeConfig::Method;
  config->jump_forward = flags.GetBool("jump-forward");
  engine::SpeculativeConfig& spec = config->speculative;
  std::string method = flags.GetString("speculative-method");
  // DEEPINFER_USE_NEXTN_DECODE (the seed's switch): MTP with that many drafts, unless a flag
  // says otherwise.
  if (method.empty()) method = Env().use_nextn_decode > 0 ? "mtp" : "none";
  if (method == "none") {
    spec.method = Method::kNone;
  } else if (method == "ngram") {
    spec.method = Method::kNgram;
  } else if (method == "mtp") {
    spec.method = Method::kMtp;
  } else if (method == "dspark") {
    spec.method = Method::kDspark;
  } else if (method == "scripted") {
    spec.method = Method::kCustom;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--speculative-method: '", method, "' is not one of none, ngram, mtp, dspark, scripted"));
  }
  const std::string script = flags.GetString("speculative-script");
  if ((method == "scripted") != !script.empty()) {
    return absl::InvalidArgumentError(
        method == "scripted" ? "--speculative-method scripted needs --speculative-script FILE"
                             : "--speculative-script is only for --speculative-method scripted");
  }
  if (!script.empty()) {
    absl::StatusOr<std::shared_ptr<engine::ScriptDrafter>> drafter =
        engine::ScriptDrafter::Load(script);
    if (!drafter.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--speculative-script: ", drafter.status().message()));
    }
    spec.drafter = *std::move(drafter);
  }
  auto int_flag = [&](const std::string& name, int lo, int hi, int* out) -> absl::Status {
    absl::StatusOr<int64_t> v = flags.GetInt(name);
    if (!v.ok()) return v.status();
    if (*v < lo || *v > hi) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, ": ", *v, " is outside [", lo, ", ", hi, "]"));
    }
    *out = static_cast<int>(*v);
    return absl::OkStatus();
  };
  // 0 for dspark: the model's block size, resolved by Engine::Create.
  spec.num_speculative_tokens =
      spec.method == Method::kMtp ? 1 : (spec.method == Method::kDspark ? 0 : 3);
  if (flags.IsSet("num-speculative-tokens")) {
    absl::Status s = int_flag("num-speculative-tokens", 1, engine::kMaxSpeculativeTokens,
                              &spec.num_speculative_tokens);
    if (!s.ok()) return s;
  } else if (Env().use_nextn_decode > 0) {
    if (Env().use_nextn_decode > engine::kMaxSpeculativeTokens) {
      return absl::InvalidArgumentError(
          absl::StrCat("DEEPINFER_USE_NEXTN_DECODE=", Env().use_nextn_decode, " is outside [0, ",
                       engine::kMaxSpeculativeTokens, "]"));
    }
    spec.num_speculative_tokens = Env().use_nextn_decode;
  }
  // vLLM's rule: neither size given = 5 and 5; one given = both that value.
  const bool has_min = flags.IsSet("prompt-lookup-min"), has_max = flags.IsSet("prompt-lookup-max");
  spec.prompt_lookup_min = spec.prompt_lookup_max = 5;
  if (has_min) {
    if (absl::Status s = int_flag("prompt-lookup-min", 1, 64, &spec.prompt_lookup_min); !s.ok()) {
      return s;
    }
    if (!has_max) spec.prompt_lookup_max = spec.prompt_lookup_min;
  }
  if (has_max) {
    if (absl::Status s = int_flag("prompt-lookup-max", 1, 64, &spec.prompt_lookup_max); !s.ok()) {
      return s;
    }
    if (!has_min) spec.prompt_lookup_min = spec.prompt_lookup_max;
  }
  if (spec.prompt_lookup_min > spec.prompt_lookup_max) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--prompt-lookup-min (", spec.prompt_lookup_min, ") exceeds --prompt-lookup-max (",
        spec.prompt_lookup_max, ")"));
  }
  // Variable-length verification: the flag wins over DEEPINFER_ENABLE_MTP_VARLEN.
  const std::string varlen = flags.GetString("speculative-varlen");
  spec.varlen = engine::VarlenMode::kOff;
  if (!varlen.empty()) {
    if (!engine::ParseVarlenMode(varlen, &spec.varlen)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--speculative-varlen: '", varlen, "' is not one of off, sync, async"));
    }
    if (spec.varlen != engine::VarlenMode::kOff && spec.method == Method::kNone) {
      return absl::InvalidArgumentError(
          "--speculative-varlen needs speculative decoding (--speculative-method)");
    }
  } else if (Env().enable_mtp_varlen && spec.method != Method::kNone) {
    spec.varlen = engine::VarlenMode::kAsyncBudget;
  }
  if (absl::Status s = int_flag("speculative-varlen-min-concurrency", 0, 1 << 20,
                                &spec.varlen_min_concurrency);
      !s.ok()) {
    return s;
  }
  const std::string sampling = flags.GetString("speculative-draft-sampling");
  if (sampling != "greedy" && sampling != "sampled") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--speculative-draft-sampling: '", sampling, "' is not one of greedy, sampled"));
  }
  spec.sampled_drafts = sampling == "sampled";
  if (spec.sampled_drafts && spec.method != Method::kDspark && spec.method != Method::kMtp) {
    return absl::InvalidArgumentError(
        "--speculative-draft-sampling sampled needs --speculative-method dspark (or mtp on a "
        "DSpark model)");
  }
  const std::string gate = flags.GetString("speculative-varlen-gate");
  if (gate != "measured" && gate != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("--speculative-varlen-gate: '", gate, "' is not one of measured, off"));
  }
  spec.varlen_benefit_gate = gate == "measured";
  const std::string table = flags.GetString("speculative-cost-table");
  if (spec.varlen != engine::VarlenMode::kOff) {
    if (table == "profile" || table.empty()) {
      spec.profile_cost_table = true;
    } else {
      absl::StatusOr<engine::CostTable> t = engine::CostTable::Load(table);
      if (!t.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--speculative-cost-table: ", t.status().message()));
      }
      spec.cost_table = std::make_shared<const engine::CostTable>(*std::move(t));
    }
  }
  return absl::OkStatus();
}

}  // namespace deepinfer::cli
