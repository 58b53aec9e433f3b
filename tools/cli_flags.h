// A small command-line flag parser for `deepinfer <command> [--flag value | --flag=value]...`.
//
// Each command declares its flags (name, default, help) up front; Parse() rejects unknown flags,
// missing values, stray positional arguments and a flag given twice (every flag is
// single-valued except list flags; `--x` then `--no-x` counts as twice) with InvalidArgument errors that name the
// flag, so the CLI can print "deepinfer serve: unknown flag --prot (did you mean --port?)".
#ifndef DEEPINFER_TOOLS_CLI_FLAGS_H_
#define DEEPINFER_TOOLS_CLI_FLAGS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace deepinfer::cli {

class FlagSet {
 public:
  explicit FlagSet(std::string command) : command_(std::move(command)) {}

  // Declares a flag taking a value. `default_value` is text; "" means unset.
  void AddString(const std::string& name, const std::string& default_value,
                 const std::string& help);
  // Declares a boolean flag: `--name` sets it, `--no-name` or `--name=false` clears it.
  void AddBool(const std::string& name, bool default_value, const std::string& help);
  // Declares a list flag (vLLM's nargs='+' and JSON-list flags): `--name a b c` takes every
  // following argument up to the next `--flag`; each value may also be a comma-separated list
  // or a JSON array of strings (`--name '["a", "b"]'`). Read it with GetList().
  void AddList(const std::string& name, const std::string& default_value,
               const std::string& help);

  // Parses argv[0..argc) (not including the program and command names).
  absl::Status Parse(int argc, char** argv);

  // What every command does with its argv: `--help`/`-h` prints Usage() to stdout and yields
  // exit code 0; a parse error prints the message and Usage() to stderr and yields 2; a good
  // command line yields nullopt (go on).
  std::optional<int> ParseCommandLine(int argc, char** argv);

  // Typed accessors; errors name the flag and the bad value.
  std::string GetString(const std::string& name) const;
  bool IsSet(const std::string& name) const;  // given on the command line
  absl::StatusOr<int64_t> GetInt(const std::string& name) const;
  absl::StatusOr<double> GetDouble(const std::string& name) const;
  // A sampler seed: an integer in [-2^63, 2^64-1]; negative values are taken modulo 2^64
  // (-1 -> 2^64-1), the same rule as the HTTP APIs' `seed` (docs/protocol.md). Error:
  // InvalidArgument naming the flag and the accepted range.
  absl::StatusOr<uint64_t> GetSeed(const std::string& name) const;
  bool GetBool(const std::string& name) const;
  // "1,2,3" -> {1,2,3}; errors name the flag and the bad element.
  absl::StatusOr<std::vector<int32_t>> GetIntList(const std::string& name) const;
  // The values of a list flag (AddList), blanks dropped, in order. Error: InvalidArgument naming
  // the flag when a JSON array does not parse or holds something other than strings.
  absl::StatusOr<std::vector<std::string>> GetList(const std::string& name) const;

  // "Usage: deepinfer <command> [flags]" plus one line per flag with its declared default (never
  // a value given on the command line).
  std::string Usage() const;

 private:
  struct Flag {
    std::string value;
    std::string help;
    std::string default_value;  // shown by Usage() (value may hold what was parsed)
    bool is_bool = false;
    bool set = false;
    bool is_list = false;  // values joined with '\n'

  };
  std::string command_;
  std::map<std::string, Flag> flags_;
  std::vector<std::string> order_;
};

// Prints "deepinfer <command>: <message>" to stderr with the prefix once (FlagSet's messages
// already carry it) and returns `rc`.
int PrintCommandError(const std::string& command, const absl::Status& status, int rc);

}  // namespace deepinfer::cli

#endif  // DEEPINFER_TOOLS_CLI_FLAGS_H_
