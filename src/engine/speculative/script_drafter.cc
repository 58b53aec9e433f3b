#include "engine/speculative/script_drafter.h"

#include <algorithm>
#include <climits>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace deepinfer::engine {

namespace {

// A non-negative decimal that fits int32 (the whole of `s`).
bool ParseId(std::string_view s, int32_t* out) {
  if (s.empty() || s.size() > 10) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v > INT32_MAX) return false;
  *out = static_cast<int32_t>(v);
  return true;
}

}  // namespace

absl::StatusOr<std::vector<ScriptDrafter::Line>> ScriptDrafter::Parse(std::string_view text,
                                                                      std::string_view source) {
  std::vector<Line> lines;
  std::istringstream in{std::string(text)};
  std::string raw;
  int number = 0;
  while (std::getline(in, raw)) {
    ++number;
    std::istringstream words(raw);
    std::string tok;
    Line parsed;
    while (words >> tok) {
      if (parsed.match.empty() && tok.front() == '#') break;  // a comment line
      const size_t slash = tok.find('/');
      int32_t match = 0;
      int32_t draft = 0;
      bool ok = slash == std::string::npos
                    ? ParseId(tok, &match)
                    : ParseId(std::string_view(tok).substr(0, slash), &match) &&
                          ParseId(std::string_view(tok).substr(slash + 1), &draft);
      if (!ok) {
        return absl::InvalidArgumentError(
            absl::StrCat(std::string(source), ":", number, ": '", tok,
                         "' is not a token id or A/B (match A, draft B) of two token ids"));
      }
      parsed.match.push_back(match);
      parsed.draft.push_back(slash == std::string::npos ? match : draft);
    }
    if (!parsed.match.empty()) lines.push_back(std::move(parsed));
  }
  return lines;
}

absl::StatusOr<std::shared_ptr<ScriptDrafter>> ScriptDrafter::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the draft script '", path, "'"));
  std::stringstream buf;
  buf << in.rdbuf();
  absl::StatusOr<std::vector<Line>> lines = Parse(buf.str(), path);
  if (!lines.ok()) return lines.status();
  return std::make_shared<ScriptDrafter>(*std::move(lines));
}

std::vector<int32_t> ScriptDrafter::Propose(const DraftContext& ctx, int max_tokens) {
  const size_t n = ctx.tokens.size();
  for (const Line& line : lines_) {
    if (line.match.size() <= n ||
        !std::equal(ctx.tokens.begin(), ctx.tokens.end(), line.match.begin())) {
      continue;
    }
    const size_t count = std::min<size_t>(max_tokens, line.match.size() - n);
    return std::vector<int32_t>(line.draft.begin() + n, line.draft.begin() + n + count);
  }
  return {};
}

}  // namespace deepinfer::engine
