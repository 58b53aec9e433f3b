// A testing drafter driven by a script file (issue #26): `deepinfer serve --speculative-method
// scripted --speculative-script FILE` proposes drafts read from FILE, so end-to-end tests can
// place accepted blocks, rejections and finish conditions at chosen positions through the
// server (../shared/spec/speculative.md §7.1 item 4, "ScriptedDrafter"). Not for serving: the
// drafts are whatever the file says.
//
// File format: one sequence per line, token ids separated by spaces; blank lines and lines
// starting with '#' are ignored. A token written `A/B` matches as A and is drafted as B (a
// corrupted draft position: the target rejects B unless it happens to predict it). Every other
// token is drafted as itself. A line is typically a prompt's ids followed by the target's own
// greedy continuation, taken from a run without speculation.
//
// Propose: among the lines whose matched ids start with every committed token (prompt + output)
// and extend past them, the first one in the file proposes its next up-to-k drafted ids. No line
// matches -> no draft (the step decodes one token as without speculation).
//
// Thread-safety: immutable after Load; Propose is const in effect and called by the engine
// thread only.
#ifndef DEEPINFER_ENGINE_SPECULATIVE_SCRIPT_DRAFTER_H_
#define DEEPINFER_ENGINE_SPECULATIVE_SCRIPT_DRAFTER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/speculative/drafter.h"

namespace deepinfer::engine {

class ScriptDrafter : public Drafter {
 public:
  // One script line: the ids committed tokens are matched against, and the ids drafted at the
  // same positions (equal except at corrupted positions).
  struct Line {
    std::vector<int32_t> match;
    std::vector<int32_t> draft;
  };

  explicit ScriptDrafter(std::vector<Line> lines) : lines_(std::move(lines)) {}

  // Parses the format above. Errors: InvalidArgument with the line number for a token that is
  // not a non-negative 32-bit integer (or `A/B` of two); `source` names the file in messages.
  static absl::StatusOr<std::vector<Line>> Parse(std::string_view text, std::string_view source);
  // Reads and parses `path`. Errors: NotFound when it cannot be read, Parse's errors.
  static absl::StatusOr<std::shared_ptr<ScriptDrafter>> Load(const std::string& path);

  std::vector<int32_t> Propose(const DraftContext& ctx, int max_tokens) override;

  const std::vector<Line>& lines() const { return lines_; }

 private:
  std::vector<Line> lines_;
};

}  // namespace deepinfer::engine

#endif  // DEEPINFER_ENGINE_SPECULATIVE_SCRIPT_DRAFTER_H_
