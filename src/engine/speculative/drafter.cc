#include "engine/speculative/drafter.h"

#include <algorithm>

#include "common/check.h"

namespace deepinfer::engine {

NgramDrafter::NgramDrafter(int min_n, int max_n) : min_n_(min_n), max_n_(max_n) {
  CHECK(min_n >= 1 && min_n <= max_n) << "prompt lookup n-gram sizes " << min_n << ".." << max_n;
}

std::vector<int32_t> NgramDrafter::Propose(const DraftContext& ctx, int max_tokens) {
  const std::span<const int32_t> t = ctx.tokens;
  const int64_t len = static_cast<int64_t>(t.size());
  for (int n = std::min<int64_t>(max_n_, len - 1); n >= min_n_; --n) {
    const std::span<const int32_t> suffix = t.subspan(len - n);
    // Most recent occurrence ending before the suffix itself: start s with s + n < len.
    for (int64_t s = len - n - 1; s >= 0; --s) {
      if (!std::equal(suffix.begin(), suffix.end(), t.begin() + s)) continue;
      const int64_t from = s + n;
      const int64_t count = std::min<int64_t>(max_tokens, len - from);
      return std::vector<int32_t>(t.begin() + from, t.begin() + from + count);
    }
  }
  return {};
}

}  // namespace deepinfer::engine
