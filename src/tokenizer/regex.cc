#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/thread_pool.h"
#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer_internal {

namespace {

// Per-thread match data and JIT stack. The JIT stack is enlarged from PCRE2's 32 KiB default so
// that long runs (e.g. megabytes of whitespace) cannot hit the JIT stack limit.
struct ThreadMatchState {
  pcre2_match_data* match_data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  ThreadMatchState() {
    match_data = pcre2_match_data_create(64, nullptr);
    context = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadMatchState() {
    pcre2_match_data_free(match_data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
  }
};

ThreadMatchState& MatchState() {
  thread_local ThreadMatchState state;
  return state;
}

std::string EscapeLiteral(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.[]|()?*+{}-#/").find(c) != std::string_view::npos) {
      out.push_back('\\');
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error_code,
                                   &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer regex \"", absl::string_view(pattern.data(), pattern.size()),
                     "\" does not compile at offset ", error_offset, ": ",
                     reinterpret_cast<const char*>(message)));
  }
  // JIT is an optimisation: without it (unsupported CPU) the interpreter gives the same matches.
  const bool jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  auto regex = std::unique_ptr<Regex>(new Regex());
  regex->jit_ = jit;
  regex->pattern_ = std::string(pattern);
  regex->code_ = code;
  return regex;
}

absl::StatusOr<std::unique_ptr<Regex>> Regex::Literal(std::string_view literal) {
  return Compile(EscapeLiteral(literal));
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* matches) const {
  Scan(text, 0, std::string_view::npos, matches);
}

bool Regex::Scan(std::string_view text, size_t pos, size_t stop,
                 std::vector<std::pair<size_t, size_t>>* matches) const {
  auto* code = static_cast<pcre2_code*>(code_);
  ThreadMatchState& state = MatchState();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  while (pos <= n) {
    // pcre2_jit_match skips pcre2_match's per-call checks; the subject may still hold invalid
    // UTF-8, which PCRE2_MATCH_INVALID_UTF (a compile option) makes safe for both paths.
    const int rc = jit_ ? pcre2_jit_match(code, subject, n, pos, 0, state.match_data, state.context)
                        : pcre2_match(code, subject, n, pos, 0, state.match_data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      LOG(ERROR) << "tokenizer regex match failed (" << reinterpret_cast<const char*>(message)
                 << "); rest of the text is treated as one gap";
      break;
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.match_data);
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (end > begin) {
      matches->emplace_back(begin, end);
      pos = end;
      if (begin >= stop) return true;
    } else {
      // Empty match: advance by one character (not byte) to stay on a code point boundary.
      if (begin >= n) break;
      pos = begin + 1;
      while (pos < n && pos - begin < 4 && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
  return false;
}

void Regex::FindAllParallel(std::string_view text, ThreadPool* pool,
                            std::vector<std::pair<size_t, size_t>>* matches) const {
  const int chunks = pool == nullptr ? 1 : pool->num_threads();
  if (chunks <= 1 || text.size() < static_cast<size_t>(chunks) * 1024) {
    FindAll(text, matches);
    return;
  }
  // Chunk starts on code point boundaries (never inside a UTF-8 sequence).
  std::vector<size_t> starts(chunks + 1);
  for (int k = 0; k <= chunks; ++k) {
    size_t q = k == chunks ? text.size() : text.size() * k / chunks;
    while (q < text.size() && q > 0 && (static_cast<uint8_t>(text[q]) & 0xC0) == 0x80) ++q;
    starts[k] = q;
  }
  std::vector<std::vector<std::pair<size_t, size_t>>> lists(chunks);
  std::vector<char> open(chunks, 0);
  pool->ParallelFor(chunks, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const size_t stop = k + 1 < chunks ? starts[k + 1] : std::string_view::npos;
      open[k] = Scan(text, starts[k], stop, &lists[k]) ? 1 : 0;
    }
  });
  // Stitch. Invariant: `matches` (from `first`) is a prefix of the sequential match list;
  // `is_open` says whether the sequential scan continues after its last element.
  matches->insert(matches->end(), lists[0].begin(), lists[0].end());
  bool is_open = open[0] != 0;
  for (int k = 1; k < chunks && is_open; ++k) {
    const std::pair<size_t, size_t> m = matches->back();  // begins at or after starts[k]
    const auto& list = lists[k];
    auto it = std::lower_bound(list.begin(), list.end(), m);
    if (it != list.end() && *it == m) {
      matches->insert(matches->end(), it + 1, list.end());
      is_open = open[k] != 0;
    } else {
      // No common match: continue the sequential scan through chunk k.
      const size_t stop = k + 1 < chunks ? starts[k + 1] : std::string_view::npos;
      is_open = Scan(text, m.second, stop, matches);
    }
  }
}

}  // namespace deepinfer::tokenizer_internal
