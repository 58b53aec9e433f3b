#include "tools/cli_flags.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/check.h"
#include "nlohmann/json.hpp"

namespace deepinfer::cli {
namespace {

// Levenshtein distance, for "did you mean" hints.
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// Every flag is single-valued: a second occurrence (also `--x` then `--no-x`) is an error
// rather than a silent last-one-wins, so a mistyped script cannot quietly drop a constraint.
absl::Status Repeated(const std::string& command, const std::string& name) {
  return absl::InvalidArgumentError(
      absl::StrCat("deepinfer ", command, ": flag --", name, " given more than once"));
}

}  // namespace

void FlagSet::AddString(const std::string& name, const std::string& default_value,
                        const std::string& help) {
  CHECK(flags_.find(name) == flags_.end()) << name;
  flags_[name] = Flag{default_value, help, default_value, false, false};
  order_.push_back(name);
}

void FlagSet::AddBool(const std::string& name, bool default_value, const std::string& help) {
  CHECK(flags_.find(name) == flags_.end()) << name;
  flags_[name] = Flag{default_value ? "true" : "false", help, "", true, false};
  order_.push_back(name);
}

void FlagSet::AddList(const std::string& name, const std::string& default_value,
                      const std::string& help) {
  CHECK(flags_.find(name) == flags_.end()) << name;
  Flag f{default_value, help, default_value, false, false};
  f.is_list = true;
  flags_[name] = std::move(f);
  order_.push_back(name);
}

int PrintCommandError(const std::string& command, const absl::Status& status, int rc) {
  const std::string prefix = absl::StrCat("deepinfer ", command, ": ");
  absl::string_view m = status.message();
  while (absl::ConsumePrefix(&m, prefix)) {
  }
  std::fprintf(stderr, "%s%.*s\n", prefix.c_str(), static_cast<int>(m.size()), m.data());
  return rc;
}

std::optional<int> FlagSet::ParseCommandLine(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fprintf(stdout, "%s", Usage().c_str());
      return 0;
    }
  }
  if (absl::Status s = Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "%s\n\n%s", std::string(s.message()).c_str(), Usage().c_str());
    return 2;
  }
  return std::nullopt;
}

absl::Status FlagSet::Parse(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (!absl::StartsWith(arg, "--") || arg.size() == 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("deepinfer ", command_, ": unexpected argument '", arg, "'"));
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto it = flags_.find(name);
    if (it == flags_.end() && absl::StartsWith(name, "no-") && !has_value) {
      auto neg = flags_.find(name.substr(3));
      if (neg != flags_.end() && neg->second.is_bool) {
        if (neg->second.set) return Repeated(command_, neg->first);
        neg->second.value = "false";
        neg->second.set = true;
        continue;
      }
    }
    if (it == flags_.end()) {
      std::string best;
      size_t best_d = 3;
      for (const auto& [n, f] : flags_) {
        size_t d = EditDistance(n, name);
        if (d < best_d) best_d = d, best = n;
      }
      return absl::InvalidArgumentError(
          absl::StrCat("deepinfer ", command_, ": unknown flag --", name,
                       best.empty() ? "" : absl::StrCat(" (did you mean --", best, "?)"),
                       "; see deepinfer ", command_, " --help"));
    }
    Flag& f = it->second;
    if (f.set) return Repeated(command_, name);
    if (f.is_bool) {
      if (!has_value) value = "true";
      std::string v = absl::AsciiStrToLower(value);
      if (v != "true" && v != "false" && v != "1" && v != "0") {
        return absl::InvalidArgumentError(absl::StrCat("deepinfer ", command_, ": flag --", name,
                                                       " takes true or false, got '", value, "'"));
      }
      f.value = (v == "true" || v == "1") ? "true" : "false";
    } else {
      if (!has_value) {
        if (i + 1 >= argc) {
          return absl::InvalidArgumentError(
              absl::StrCat("deepinfer ", command_, ": flag --", name, " needs a value"));
        }
        value = argv[++i];
        // A list flag takes every argument up to the next flag.
        while (f.is_list && i + 1 < argc && !absl::StartsWith(argv[i + 1], "--")) {
          absl::StrAppend(&value, "\n", argv[++i]);
        }
      }
      f.value = value;
    }
    f.set = true;
  }
  return absl::OkStatus();
}

std::string FlagSet::GetString(const std::string& name) const {
  auto it = flags_.find(name);
  CHECK(it != flags_.end()) << "undeclared flag " << name;
  return it->second.value;
}

bool FlagSet::IsSet(const std::string& name) const {
  auto it = flags_.find(name);
  CHECK(it != flags_.end()) << "undeclared flag " << name;
  return it->second.set;
}

absl::StatusOr<int64_t> FlagSet::GetInt(const std::string& name) const {
  std::string v = GetString(name);
  int64_t out;
  if (!absl::SimpleAtoi(v, &out)) {
    return absl::InvalidArgumentError(absl::StrCat("deepinfer ", command_, ": flag --", name,
                                                   " expects an integer, got '", v, "'"));
  }
  return out;
}

absl::StatusOr<double> FlagSet::GetDouble(const std::string& name) const {
  std::string v = GetString(name);
  double out;
  if (!absl::SimpleAtod(v, &out)) {
    return absl::InvalidArgumentError(absl::StrCat("deepinfer ", command_, ": flag --", name,
                                                   " expects a number, got '", v, "'"));
  }
  return out;
}

absl::StatusOr<uint64_t> FlagSet::GetSeed(const std::string& name) const {
  const std::string v = GetString(name);
  uint64_t u;
  if (absl::SimpleAtoi(v, &u)) return u;
  int64_t i;
  if (absl::SimpleAtoi(v, &i)) return static_cast<uint64_t>(i);  // negative: modulo 2^64
  return absl::InvalidArgumentError(absl::StrCat(
      "deepinfer ", command_, ": flag --", name,
      " expects an integer in [-9223372036854775808, 18446744073709551615], got '", v, "'"));
}

bool FlagSet::GetBool(const std::string& name) const { return GetString(name) == "true"; }

absl::StatusOr<std::vector<int32_t>> FlagSet::GetIntList(const std::string& name) const {
  std::vector<int32_t> out;
  std::string v = GetString(name);
  if (v.empty()) return out;
  for (absl::string_view piece : absl::StrSplit(v, ',')) {
    int32_t x;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(piece), &x)) {
      return absl::InvalidArgumentError(absl::StrCat("deepinfer ", command_, ": flag --", name,
                                                     ": '", piece, "' is not an integer"));
    }
    out.push_back(x);
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> FlagSet::GetList(const std::string& name) const {
  std::vector<std::string> out;
  for (absl::string_view arg : absl::StrSplit(GetString(name), '\n')) {
    arg = absl::StripAsciiWhitespace(arg);
    if (absl::StartsWith(arg, "[")) {
      const nlohmann::json j = nlohmann::json::parse(arg, nullptr, /*allow_exceptions=*/false);
      bool strings = j.is_array();
      for (const auto& e : j) strings = strings && e.is_string();
      if (!strings) {
        return absl::InvalidArgumentError(
            absl::StrCat("deepinfer ", command_, ": flag --", name,
                         " expects a JSON array of strings or comma-separated values, got '",
                         arg, "'"));
      }
      for (const auto& e : j) {
        if (!e.get<std::string>().empty()) out.push_back(e.get<std::string>());
      }
      continue;
    }
    for (absl::string_view piece : absl::StrSplit(arg, ',')) {
      piece = absl::StripAsciiWhitespace(piece);
      if (!piece.empty()) out.emplace_back(piece);
    }
  }
  return out;
}

std::string FlagSet::Usage() const {
  std::string out = absl::StrCat("Usage: deepinfer ", command_, " [flags]\n");
  for (const auto& n : order_) {
    const Flag& f = flags_.at(n);
    absl::StrAppend(&out, "  --", n, f.is_bool ? "" : f.is_list ? " VALUE..." : " VALUE",
                    "\n      ", f.help);
    if (!f.is_bool && !f.default_value.empty()) {
      absl::StrAppend(&out, " (default: ", f.default_value, ")");
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

}  // namespace deepinfer::cli
