#include "structured/matcher.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status.h"
#include "xxhash.h"

namespace deepinfer::structured {

// ---------------------------------------------------------------------------------------------
// UTF-8 range splitting: [lo, hi] -> sequences of byte ranges (same technique as RE2 / Rust's
// utf8-ranges: split until every byte position of lo and hi differs only in a full range).
namespace internal {
namespace {

int Utf8Len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

void EncodeUtf8(uint32_t cp, uint8_t* out) {
  switch (Utf8Len(cp)) {
    case 1:
      out[0] = static_cast<uint8_t>(cp);
      break;
    case 2:
      out[0] = 0xC0 | (cp >> 6);
      out[1] = 0x80 | (cp & 0x3F);
      break;
    case 3:
      out[0] = 0xE0 | (cp >> 12);
      out[1] = 0x80 | ((cp >> 6) & 0x3F);
      out[2] = 0x80 | (cp & 0x3F);
      break;
    default:
      out[0] = 0xF0 | (cp >> 18);
      out[1] = 0x80 | ((cp >> 12) & 0x3F);
      out[2] = 0x80 | ((cp >> 6) & 0x3F);
      out[3] = 0x80 | (cp & 0x3F);
  }
}

void Split(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>* out) {
  static const uint32_t kMaxForLen[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  for (uint32_t max : kMaxForLen) {
    if (lo <= max && hi > max) {
      Split(lo, max, out);
      Split(max + 1, hi, out);
      return;
    }
  }
  const int n = Utf8Len(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        Split(lo, lo | m, out);
        Split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        Split(lo, (hi & ~m) - 1, out);
        Split(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  EncodeUtf8(lo, a);
  EncodeUtf8(hi, b);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (int i = 0; i < n; ++i) seq.emplace_back(a[i], b[i]);
  out->push_back(std::move(seq));
}

}  // namespace

std::vector<std::vector<std::pair<uint8_t, uint8_t>>> Utf8Sequences(uint32_t lo, uint32_t hi) {
  std::vector<std::vector<std::pair<uint8_t, uint8_t>>> out;
  if (lo <= hi) Split(lo, hi, &out);
  return out;
}

}  // namespace internal

// ---------------------------------------------------------------------------------------------
// Vocabulary index.

std::string ControlTokenBytes(std::string_view content) {
  std::string out(1, kControlByte);
  out.append(content);
  out.push_back(kControlByte);
  return out;
}

namespace {
// True for ControlTokenBytes(c) with a non-empty c free of 0xFF; false for ordinary bytes.
bool IsControlSpelling(const std::string& t) {
  return t.size() >= 3 && t.front() == kControlByte && t.back() == kControlByte &&
         t.find(kControlByte, 1) == t.size() - 1;
}
}  // namespace

VocabularyIndex::VocabularyIndex(Vocabulary vocab) : vocab_(std::move(vocab)) {
  // A 0xFF byte outside a control spelling could be used to spell a control token piecewise.
  for (std::string& t : vocab_.token_bytes) {
    if (t.find(kControlByte) != std::string::npos && !IsControlSpelling(t)) t.clear();
  }
  std::vector<uint8_t> excluded(vocab_.size(), 0);
  for (int32_t id : vocab_.special_ids) {
    if (id >= 0 && id < vocab_.size()) excluded[id] = 1;
  }
  for (int32_t id : vocab_.eos_ids) {
    if (id >= 0 && id < vocab_.size()) excluded[id] = 1;
  }
  for (int32_t id = 0; id < vocab_.size(); ++id) {
    if (!excluded[id] && !vocab_.token_bytes[id].empty()) sorted_.push_back(id);
  }
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
    const auto& x = vocab_.token_bytes[a];
    const auto& y = vocab_.token_bytes[b];
    return x != y ? x < y : a < b;
  });
  lcp_.resize(sorted_.size(), 0);
  for (size_t i = 1; i < sorted_.size(); ++i) {
    const auto& x = vocab_.token_bytes[sorted_[i - 1]];
    const auto& y = vocab_.token_bytes[sorted_[i]];
    size_t n = 0;
    while (n < x.size() && n < y.size() && x[n] == y[n]) ++n;
    lcp_[i] = static_cast<int32_t>(n);
  }
  next_smaller_.assign(sorted_.size(), static_cast<int32_t>(sorted_.size()));
  std::vector<int32_t> stack;
  for (size_t k = 0; k < sorted_.size(); ++k) {
    while (!stack.empty() && lcp_[k] < lcp_[stack.back()]) {
      next_smaller_[stack.back()] = static_cast<int32_t>(k);
      stack.pop_back();
    }
    stack.push_back(static_cast<int32_t>(k));
  }
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  for (const auto& t : vocab_.token_bytes) {
    uint32_t len = static_cast<uint32_t>(t.size());
    XXH3_64bits_update(st, &len, sizeof(len));
    XXH3_64bits_update(st, t.data(), t.size());
  }
  for (int32_t id : vocab_.special_ids) XXH3_64bits_update(st, &id, sizeof(id));
  for (int32_t id : vocab_.eos_ids) XXH3_64bits_update(st, &id, sizeof(id));
  fingerprint_ = XXH3_64bits_digest(st);
  XXH3_freeState(st);
}

// ---------------------------------------------------------------------------------------------
// Grammar -> automaton.

class GrammarBuilder {
 public:
  static constexpr int kMaxStates = 4'000'000;

  GrammarBuilder(const Grammar& g, CompiledGrammar* out, const CompileBudget* budget)
      : g_(g), out_(out), budget_(budget) {}

  absl::Status Build() {
    const int n = g_.num_rules();
    if (n == 0) return absl::InvalidArgumentError("grammar has no rules");
    out_->rule_start_.resize(n);
    std::vector<int32_t> finals(n);
    ComputeInlinable();
    for (int r = 0; r < n; ++r) {
      out_->rule_start_[r] = NewState();
      finals[r] = NewState();
      out_->states_[finals[r]].final = true;
    }
    std::vector<int32_t> body_first(n), body_count(n);
    for (int r = 0; r < n; ++r) {
      body_first[r] = static_cast<int32_t>(out_->states_.size());
      RETURN_IF_ERROR(Emit(g_.body(r), out_->rule_start_[r], finals[r], r));
      body_count[r] = static_cast<int32_t>(out_->states_.size()) - body_first[r];
      if (out_->states_.size() > kMaxStates) {
        return absl::InvalidArgumentError(
            absl::StrCat("grammar too large: more than ", kMaxStates, " automaton states (rule '",
                         g_.name(r), "'); reduce repetition bounds such as maxLength / maxItems"));
      }
    }
    out_->root_ = g_.root();
    // The states an inlined copy of rule R creates inside its caller are emitted in the same
    // order as R's own (standalone) automaton, with R's start / final replaced by the caller's
    // from / to states; copies are recorded innermost first, so the outermost copy wins.
    out_->origin_.assign(out_->states_.size(), -1);
    for (const InlinedCopy& c : copies_) {
      if (c.count != body_count[c.rule]) continue;  // not expected; the copy is then computed
      for (int32_t k = 0; k < c.count; ++k) out_->origin_[c.first + k] = body_first[c.rule] + k;
    }
    RETURN_IF_ERROR(budget_->Check());
    ComputeClosures();
    RETURN_IF_ERROR(budget_->Check());
    RETURN_IF_ERROR(ComputeMinToEnd());
    return CheckLeftRecursion();
  }

 private:
  static constexpr int64_t kInlineLimit = 256;

  // inlinable_[r]: r is not (mutually) recursive and its fully expanded body is small.
  void ComputeInlinable() {
    const int n = g_.num_rules();
    std::vector<std::vector<int>> refs(n);
    for (int r = 0; r < n; ++r) CollectRefs(g_.body(r), &refs[r]);
    std::vector<bool> recursive(n, false);
    for (int r = 0; r < n; ++r) {
      // r is recursive if it can reach itself.
      std::vector<bool> seen(n, false);
      std::vector<int> todo(refs[r].begin(), refs[r].end());
      while (!todo.empty()) {
        int q = todo.back();
        todo.pop_back();
        if (q < 0 || q >= n || seen[q]) continue;
        seen[q] = true;
        if (q == r) {
          recursive[r] = true;
          break;
        }
        todo.insert(todo.end(), refs[q].begin(), refs[q].end());
      }
    }
    std::vector<int64_t> size(n, -1);
    inlinable_.assign(n, false);
    for (int r = 0; r < n; ++r) {
      if (recursive[r] || r == g_.root()) continue;
      int64_t sz = ExpandedSize(r, recursive, size);
      inlinable_[r] = sz <= kInlineLimit;
    }
  }

  static void CollectRefs(const Expr& e, std::vector<int>* out) {
    if (e.kind == Expr::Kind::kRuleRef) out->push_back(e.rule);
    for (const auto& c : e.children) CollectRefs(c, out);
  }

  int64_t ExprSize(const Expr& e, const std::vector<bool>& recursive, std::vector<int64_t>& memo) {
    switch (e.kind) {
      case Expr::Kind::kRuleRef:
        if (e.rule < 0 || e.rule >= g_.num_rules() || recursive[e.rule]) return 1;
        return ExpandedSize(e.rule, recursive, memo);
      case Expr::Kind::kLiteral:
        return static_cast<int64_t>(e.text.size());
      case Expr::Kind::kCharClass:
        return static_cast<int64_t>(e.ranges.size()) * 2;
      case Expr::Kind::kRepeat: {
        int64_t copies = e.max == kUnbounded ? e.min + 1 : e.max;
        return 1 + std::max<int64_t>(copies, 1) * ExprSize(e.children[0], recursive, memo);
      }
      default: {
        int64_t total = 1;
        for (const auto& c : e.children) {
          total += ExprSize(c, recursive, memo);
          if (total > kInlineLimit * 16) return total;
        }
        return total;
      }
    }
  }

  int64_t ExpandedSize(int r, const std::vector<bool>& recursive, std::vector<int64_t>& memo) {
    if (memo[r] >= 0) return memo[r];
    memo[r] = kInlineLimit * 16;  // guards against cycles (recursive rules are excluded anyway)
    memo[r] = ExprSize(g_.body(r), recursive, memo);
    return memo[r];
  }

  int32_t NewState() {
    out_->states_.emplace_back();
    return static_cast<int32_t>(out_->states_.size()) - 1;
  }
  void Eps(int32_t a, int32_t b) { out_->states_[a].eps.push_back(b); }

  absl::Status Emit(const Expr& e, int32_t from, int32_t to, int rule) {
    if (out_->states_.size() > kMaxStates) return absl::OkStatus();  // reported by caller
    if ((++emit_calls_ & 0xFFF) == 0) RETURN_IF_ERROR(budget_->Check());
    using K = Expr::Kind;
    switch (e.kind) {
      case K::kEmpty:
        Eps(from, to);
        return absl::OkStatus();
      case K::kLiteral: {
        int32_t cur = from;
        for (size_t i = 0; i < e.text.size(); ++i) {
          int32_t next = (i + 1 == e.text.size()) ? to : NewState();
          uint8_t b = static_cast<uint8_t>(e.text[i]);
          out_->states_[cur].bytes.push_back({b, b, next});
          cur = next;
        }
        return absl::OkStatus();
      }
      case K::kCharClass: {
        for (const auto& r : e.ranges) {
          for (const auto& seq : internal::Utf8Sequences(r.lo, r.hi)) {
            int32_t cur = from;
            for (size_t i = 0; i < seq.size(); ++i) {
              int32_t next = (i + 1 == seq.size()) ? to : NewState();
              out_->states_[cur].bytes.push_back({seq[i].first, seq[i].second, next});
              cur = next;
            }
          }
        }
        return absl::OkStatus();
      }
      case K::kRuleRef:
        if (e.rule < 0 || e.rule >= g_.num_rules()) {
          return absl::InvalidArgumentError(
              absl::StrCat("rule '", g_.name(rule), "' references an undefined rule"));
        }
        if (inlinable_[e.rule]) {
          // Small non-recursive rules are expanded in place: their bytes then stay inside the
          // caller's frame, which keeps most tokens context-independent (see matcher.h).
          const int32_t first_new = static_cast<int32_t>(out_->states_.size());
          RETURN_IF_ERROR(Emit(g_.body(e.rule), from, to, rule));
          copies_.push_back(
              {e.rule, first_new, static_cast<int32_t>(out_->states_.size()) - first_new});
          return absl::OkStatus();
        }
        out_->states_[from].calls.push_back({e.rule, to});
        return absl::OkStatus();
      case K::kSequence: {
        int32_t cur = from;
        for (size_t i = 0; i < e.children.size(); ++i) {
          int32_t next = (i + 1 == e.children.size()) ? to : NewState();
          RETURN_IF_ERROR(Emit(e.children[i], cur, next, rule));
          cur = next;
        }
        if (e.children.empty()) Eps(from, to);
        return absl::OkStatus();
      }
      case K::kChoice:
        for (const auto& c : e.children) RETURN_IF_ERROR(Emit(c, from, to, rule));
        if (e.children.empty()) Eps(from, to);
        return absl::OkStatus();
      case K::kRepeat: {
        const Expr& child = e.children[0];
        int32_t cur = from;
        for (int i = 0; i < e.min; ++i) {
          int32_t next = NewState();
          RETURN_IF_ERROR(Emit(child, cur, next, rule));
          cur = next;
        }
        if (e.max == kUnbounded) {
          // cur -> loop; loop --child--> loop_end --eps--> loop; loop --eps--> to
          int32_t loop = NewState();
          int32_t loop_end = NewState();
          Eps(cur, loop);
          RETURN_IF_ERROR(Emit(child, loop, loop_end, rule));
          Eps(loop_end, loop);
          Eps(loop, to);
        } else {
          for (int i = e.min; i < e.max; ++i) {
            Eps(cur, to);
            int32_t next = (i + 1 == e.max) ? to : NewState();
            RETURN_IF_ERROR(Emit(child, cur, next, rule));
            cur = next;
          }
          if (e.max == e.min) Eps(cur, to);
        }
        return absl::OkStatus();
      }
    }
    return absl::InternalError("unknown expression kind");
  }

  void ComputeClosures() {
    const int n = static_cast<int>(out_->states_.size());
    out_->eps_closure_.assign(n, {});
    std::vector<int32_t> mark(n, -1), stack;
    for (int s = 0; s < n; ++s) {
      auto& cl = out_->eps_closure_[s];
      stack.assign(1, s);
      mark[s] = s;
      while (!stack.empty()) {
        int32_t x = stack.back();
        stack.pop_back();
        cl.push_back(x);
        for (int32_t y : out_->states_[x].eps) {
          if (mark[y] != s) {
            mark[y] = s;
            stack.push_back(y);
          }
        }
      }
    }
  }

  // min_to_end_[s]: shortest path (in bytes) from s to its rule's final state, where a call
  // costs its callee's shortest sentence. Bellman-Ford style relaxation to a fixed point.
  absl::Status ComputeMinToEnd() {
    const auto& st = out_->states_;
    const int64_t kInf = INT64_MAX / 4;
    auto& m = out_->min_to_end_;
    m.assign(st.size(), kInf);
    for (size_t s = 0; s < st.size(); ++s) {
      if (st[s].final) m[s] = 0;
    }
    for (bool changed = true; changed;) {
      RETURN_IF_ERROR(budget_->Check());
      changed = false;
      for (size_t s = st.size(); s-- > 0;) {
        int64_t best = m[s];
        for (int32_t t : st[s].eps) best = std::min(best, m[t]);
        for (const auto& e : st[s].bytes) best = std::min(best, 1 + m[e.target]);
        for (const auto& c : st[s].calls) {
          best = std::min(best, m[out_->rule_start_[c.callee_rule]] + m[c.return_state]);
        }
        if (best < m[s]) {
          m[s] = best;
          changed = true;
        }
      }
    }
    return absl::OkStatus();
  }

  // A rule is left-recursive if it can call itself (directly or through other rules) before
  // consuming any byte: the stack would grow without bound.
  absl::Status CheckLeftRecursion() {
    const int n = g_.num_rules();
    const auto& st = out_->states_;
    // nullable[r]: rule r can match the empty string.
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (int r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        if (ReachesFinalWithoutBytes(r, nullable)) {
          nullable[r] = true;
          changed = true;
        }
      }
    }
    // first_calls[r]: rules r may call before consuming a byte.
    std::vector<std::vector<int>> first_calls(n);
    for (int r = 0; r < n; ++r) {
      std::vector<int32_t> todo{out_->rule_start_[r]};
      std::vector<bool> seen(st.size(), false);
      while (!todo.empty()) {
        int32_t s = todo.back();
        todo.pop_back();
        for (int32_t x : out_->eps_closure_[s]) {
          if (seen[x]) continue;
          seen[x] = true;
          for (const auto& c : st[x].calls) {
            first_calls[r].push_back(c.callee_rule);
            if (nullable[c.callee_rule]) todo.push_back(c.return_state);
          }
        }
      }
    }
    // Cycle detection (iterative DFS colouring).
    std::vector<int> color(n, 0);
    for (int r0 = 0; r0 < n; ++r0) {
      if (color[r0]) continue;
      std::vector<std::pair<int, size_t>> stack{{r0, 0}};
      color[r0] = 1;
      while (!stack.empty()) {
        auto& [r, i] = stack.back();
        if (i < first_calls[r].size()) {
          int q = first_calls[r][i++];
          if (color[q] == 1) {
            return absl::InvalidArgumentError(absl::StrCat(
                "left recursion through rule '", g_.name(q),
                "' is not supported; rewrite it with repetition (e.g. a ::= b (op b)*)"));
          }
          if (color[q] == 0) {
            color[q] = 1;
            stack.push_back({q, 0});
          }
        } else {
          color[r] = 2;
          stack.pop_back();
        }
      }
    }
    return absl::OkStatus();
  }

  bool ReachesFinalWithoutBytes(int r, const std::vector<bool>& nullable) {
    const auto& st = out_->states_;
    std::vector<int32_t> todo{out_->rule_start_[r]};
    std::vector<bool> seen(st.size(), false);
    while (!todo.empty()) {
      int32_t s = todo.back();
      todo.pop_back();
      for (int32_t x : out_->eps_closure_[s]) {
        if (seen[x]) continue;
        seen[x] = true;
        if (st[x].final) return true;
        for (const auto& c : st[x].calls) {
          if (nullable[c.callee_rule]) todo.push_back(c.return_state);
        }
      }
    }
    return false;
  }

  // The states [first, first + count) are an inlined copy of rule `rule`'s body.
  struct InlinedCopy {
    int rule;
    int32_t first;
    int32_t count;
  };

  const Grammar& g_;
  CompiledGrammar* out_;
  const CompileBudget* budget_;
  int64_t emit_calls_ = 0;
  std::vector<bool> inlinable_;
  std::vector<InlinedCopy> copies_;
};

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::Compile(
    const Grammar& grammar, std::shared_ptr<const VocabularyIndex> vocab,
    const CompileBudget& budget) {
  std::shared_ptr<CompiledGrammar> out(new CompiledGrammar());
  out->vocab_ = std::move(vocab);
  GrammarBuilder builder(grammar, out.get(), &budget);
  RETURN_IF_ERROR(builder.Build());
  out->token_sets_.resize(out->states_.size());
  return std::shared_ptr<const CompiledGrammar>(std::move(out));
}

// ---------------------------------------------------------------------------------------------
// Stacks, closure and byte steps.

int32_t StackArena::Intern(int32_t state, int32_t parent) {
  uint64_t key =
      (static_cast<uint64_t>(static_cast<uint32_t>(state)) << 32) | static_cast<uint32_t>(parent);
  auto [it, inserted] = index_.try_emplace(key, static_cast<int32_t>(nodes_.size()));
  if (inserted) nodes_.emplace_back(state, parent);
  return it->second;
}

namespace internal {

void Close(const CompiledGrammar& g, StackArena& arena, const std::vector<int32_t>& seeds,
           Configuration* out) {
  out->nodes.clear();
  out->can_end = false;
  out->popped_unknown = false;
  // Scratch buffers reused across calls (this is the matcher's hot loop).
  thread_local std::vector<int32_t> work;
  thread_local std::vector<int32_t> visited;
  work.assign(seeds.begin(), seeds.end());
  visited.clear();
  while (!work.empty()) {
    int32_t n = work.back();
    work.pop_back();
    // Closures are small: a linear scan beats hashing here.
    if (std::find(visited.begin(), visited.end(), n) != visited.end()) continue;
    visited.push_back(n);
    const int32_t parent = arena.parent(n);
    for (int32_t s : g.closure(arena.state(n))) {
      const auto& st = g.state(s);
      if (!st.bytes.empty()) out->nodes.push_back(arena.Intern(s, parent));
      for (const auto& c : st.calls) {
        work.push_back(
            arena.Intern(g.rule_start(c.callee_rule), arena.Intern(c.return_state, parent)));
      }
      if (st.final) {
        if (parent == StackArena::kRoot) {
          out->can_end = true;
        } else if (parent == StackArena::kUnknown) {
          out->popped_unknown = true;
        } else {
          work.push_back(parent);
        }
      }
    }
  }
  if (out->nodes.size() > 1) {
    std::sort(out->nodes.begin(), out->nodes.end());
    out->nodes.erase(std::unique(out->nodes.begin(), out->nodes.end()), out->nodes.end());
  }
}

void StepByte(const CompiledGrammar& g, StackArena& arena, const Configuration& from, uint8_t b,
              Configuration* out) {
  thread_local std::vector<int32_t> seeds;
  seeds.clear();
  for (int32_t n : from.nodes) {
    for (const auto& e : g.state(arena.state(n)).bytes) {
      if (b >= e.lo && b <= e.hi) seeds.push_back(arena.Intern(e.target, arena.parent(n)));
    }
  }
  if (seeds.empty()) {
    out->nodes.clear();
    out->can_end = false;
    out->popped_unknown = false;
    return;
  }
  Close(g, arena, seeds, out);
}

}  // namespace internal

// ---------------------------------------------------------------------------------------------
// Context-independent token sets.

namespace {

// Classifies the tokens `ids` (sorted by bytes; lcp[k] = common prefix length of ids[k-1] and
// ids[k], lcp[0] unused) from stable state `s` in an unknown context: all bytes consumed
// in-frame -> `accepted` bit; the outcome depends on the frames below -> `uncertain`; otherwise
// rejected. Accepted ids go to `accepted_bits` (a bitmask) if set, else to `accepted_ids`.
// `next_smaller` (may be null) lets rejected subtrees be skipped in one jump.
// Returns false (leaving `sets` partial) when `budget` expired.
bool WalkTokens(const CompiledGrammar& g, int s, std::span<const int32_t> ids,
                std::span<const int32_t> lcp, const int32_t* next_smaller,
                const CompileBudget* budget, std::vector<uint32_t>* accepted_bits,
                std::vector<int32_t>* accepted_ids, std::vector<int32_t>* uncertain_ids) {
  const auto& token_bytes = g.vocab().vocab().token_bytes;
  StackArena arena;
  // cfg[d]: configuration after d bytes of the current prefix; consumed[d]: byte d-1 was
  // consumed in-frame; unknown[d]: some path popped into unknown context after <= d bytes.
  std::vector<Configuration> cfg(1);
  cfg[0].nodes.push_back(arena.Intern(s, StackArena::kUnknown));
  std::vector<uint8_t> consumed(1, 1), unknown(1, 0);
  int valid = 0;  // cfg[0..valid] describe the previous token's prefix
  size_t i = 0;
  size_t next_check = 0;
  while (i < ids.size()) {
    if (budget != nullptr && i >= next_check) {
      if (budget->Expired()) return false;
      next_check = i + 4096;
    }
    const int32_t id = ids[i];
    const std::string& t = token_bytes[id];
    const int L = static_cast<int>(t.size());
    int d = std::min<int>(i == 0 ? 0 : lcp[i], valid);
    if (static_cast<int>(cfg.size()) < L + 1) {
      cfg.resize(L + 1);
      consumed.resize(L + 1);
      unknown.resize(L + 1);
    }
    // Extend the prefix byte by byte while some in-frame stack survives.
    bool byte_failed = false;
    while (d < L && !cfg[d].nodes.empty()) {
      internal::StepByte(g, arena, cfg[d], static_cast<uint8_t>(t[d]), &cfg[d + 1]);
      // The byte was taken by some stack iff the step produced anything at all.
      consumed[d + 1] =
          !cfg[d + 1].nodes.empty() || cfg[d + 1].popped_unknown || cfg[d + 1].can_end;
      unknown[d + 1] = unknown[d] || cfg[d + 1].popped_unknown;
      ++d;
      if (!consumed[d]) {
        byte_failed = true;
        break;
      }
    }
    valid = d;
    if (!byte_failed && d == L) {
      if (accepted_bits != nullptr) {
        (*accepted_bits)[id >> 5] |= 1u << (id & 31);
      } else {
        accepted_ids->push_back(id);
      }
      ++i;
      continue;
    }
    // Every following token that shares the first `d` bytes has the same fate: either byte d-1
    // failed (byte_failed), or no in-frame stack can take byte d. It depends on the frames below
    // (uncertain) iff some path popped out of the frame before the failure point.
    const bool uncertain = byte_failed ? unknown[d - 1] != 0 : unknown[d] != 0;
    size_t j = i + 1;
    if (uncertain) {
      uncertain_ids->push_back(id);
      while (j < ids.size() && lcp[j] >= d) uncertain_ids->push_back(ids[j++]);
    } else if (next_smaller != nullptr) {
      // Skip the whole subtree: jumps over runs whose common prefix stays >= d.
      while (j < ids.size() && lcp[j] >= d) j = next_smaller[j];
    } else {
      while (j < ids.size() && lcp[j] >= d) ++j;
    }
    i = j;
  }
  return true;
}

}  // namespace

const CompiledGrammar::TokenSets* CompiledGrammar::ComputeTokenSets(
    int s, const CompileBudget* budget) const {
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (token_sets_[s]) return token_sets_[s].get();
  }
  auto sets = std::make_unique<TokenSets>();
  const VocabularyIndex& vi = *vocab_;
  const int32_t origin = origin_[s];
  if (origin >= 0) {
    // An inlined copy of a rule's state: it accepts what the rule's own state accepts (those
    // tokens stay inside the copy), and only the tokens that leave the rule (the origin's
    // uncertain ones, typically a few hundred) are walked again in the copy's context. This
    // makes a rule inlined in many places cost one vocabulary walk, not one per copy.
    const TokenSets* base = ComputeTokenSets(origin, budget);
    if (base == nullptr) return nullptr;
    sets->accepted = base->accepted;
    sets->accepted_extra = base->accepted_extra;
    const auto& bytes = vi.vocab().token_bytes;
    std::vector<int32_t> lcp(base->uncertain.size(), 0);
    for (size_t k = 1; k < lcp.size(); ++k) {
      const std::string& x = bytes[base->uncertain[k - 1]];
      const std::string& y = bytes[base->uncertain[k]];
      size_t n = 0;
      while (n < x.size() && n < y.size() && x[n] == y[n]) ++n;
      lcp[k] = static_cast<int32_t>(n);
    }
    if (!WalkTokens(*this, s, base->uncertain, lcp, nullptr, budget, nullptr, &sets->accepted_extra,
                    &sets->uncertain)) {
      return nullptr;
    }
  } else {
    auto bits = std::make_shared<std::vector<uint32_t>>(vi.mask_words(), 0u);
    if (!WalkTokens(*this, s, vi.sorted(), vi.lcp(), vi.next_smaller().data(), budget, bits.get(),
                    nullptr, &sets->uncertain)) {
      return nullptr;
    }
    // Most states of schema-heavy grammars (enum values, literal keys) accept a handful of
    // tokens: a list of ids is then far smaller than the vocabulary-wide mask (16 KiB for 129K
    // tokens), which would otherwise dominate the grammar's memory.
    int64_t count = 0;
    for (uint32_t word : *bits) count += __builtin_popcount(word);
    if (count < vi.mask_words()) {
      for (int64_t w = 0; w < vi.mask_words(); ++w) {
        for (uint32_t word = (*bits)[w]; word != 0; word &= word - 1) {
          sets->accepted_extra.push_back(static_cast<int32_t>(w * 32 + __builtin_ctz(word)));
        }
      }
    } else {
      sets->accepted = std::move(bits);
    }
  }
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (!token_sets_[s]) token_sets_[s] = std::move(sets);
  return token_sets_[s].get();
}

size_t CompiledGrammar::MemoryBytes() const {
  size_t bytes = sizeof(*this);
  for (const State& st : states_) {
    bytes += sizeof(State) + st.bytes.size() * sizeof(ByteEdge) +
             st.calls.size() * sizeof(CallEdge) + st.eps.size() * sizeof(int32_t);
  }
  for (const std::vector<int32_t>& c : eps_closure_) bytes += c.size() * sizeof(int32_t);
  std::lock_guard<std::mutex> lock(cache_mu_);
  for (size_t s = 0; s < token_sets_.size(); ++s) {
    const TokenSets* t = token_sets_[s].get();
    if (t == nullptr) continue;
    bytes += sizeof(TokenSets) + (t->accepted_extra.size() + t->uncertain.size()) * sizeof(int32_t);
    if (t->accepted != nullptr && origin_[s] < 0) bytes += t->accepted->size() * sizeof(uint32_t);
  }
  return bytes;
}

const CompiledGrammar::TokenSets& CompiledGrammar::TokenSetsOf(int s) const {
  const TokenSets* sets = ComputeTokenSets(s, nullptr);
  CHECK(sets != nullptr);
  return *sets;
}

std::vector<int32_t> CompiledGrammar::ReachableStates() const {
  std::vector<uint8_t> seen(states_.size(), 0);
  std::vector<int32_t> todo{rule_start_[root_]}, out;
  seen[rule_start_[root_]] = 1;
  auto visit = [&](int32_t x) {
    if (!seen[x]) {
      seen[x] = 1;
      todo.push_back(x);
    }
  };
  while (!todo.empty()) {
    const int32_t x = todo.back();
    todo.pop_back();
    out.push_back(x);
    for (const auto& e : states_[x].bytes) visit(e.target);
    for (int32_t y : states_[x].eps) visit(y);
    for (const auto& c : states_[x].calls) {
      visit(rule_start_[c.callee_rule]);
      visit(c.return_state);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

void CompiledGrammar::Precompute() const {
  const absl::Status status = Precompute(CompileBudget());
  CHECK(status.ok());
}

absl::Status CompiledGrammar::Precompute(const CompileBudget& budget) const {
  // Only states a matcher can reach: rules that are only ever inlined also have a standalone
  // automaton, whose sets are computed on demand as the base of their copies'.
  for (int32_t s : ReachableStates()) {
    if (states_[s].bytes.empty()) continue;
    RETURN_IF_ERROR(budget.Check());
    if (ComputeTokenSets(s, &budget) == nullptr) return budget.Check();
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Matcher.

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)) {
  const auto& v = grammar_->vocab().vocab();
  is_special_.assign(v.size(), 0);
  is_eos_.assign(v.size(), 0);
  for (int32_t id : v.special_ids) {
    if (id >= 0 && id < v.size()) is_special_[id] = 1;
  }
  for (int32_t id : v.eos_ids) {
    if (id >= 0 && id < v.size()) is_eos_[id] = 1;
  }
  Reset();
}

void GrammarMatcher::Reset() {
  arena_ = StackArena();
  history_.clear();
  terminated_history_.clear();
  terminated_ = false;
  Configuration start;
  internal::Close(*grammar_, arena_,
                  {arena_.Intern(grammar_->rule_start(grammar_->root_rule()), StackArena::kRoot)},
                  &start);
  history_.push_back(std::move(start));
  terminated_history_.push_back(false);
}

bool GrammarMatcher::Advance(const Configuration& from, std::string_view bytes, Configuration* to) {
  if (bytes.empty()) {
    *to = from;
    return true;
  }
  thread_local Configuration a, b;
  const Configuration* cur = &from;
  Configuration* next = &a;
  for (char c : bytes) {
    internal::StepByte(*grammar_, arena_, *cur, static_cast<uint8_t>(c), next);
    if (next->nodes.empty() && !next->can_end) return false;
    cur = next;
    next = (next == &a) ? &b : &a;
  }
  *to = *cur;
  return true;
}

std::string GrammarMatcher::ForcedBytes(size_t max_bytes) {
  std::string out;
  if (terminated_) return out;
  Configuration cur = history_.back();
  Configuration next;
  while (out.size() < max_bytes && !cur.can_end) {
    // The configuration's stable nodes hold every way the text can go on: the next byte is
    // forced when all their byte edges are the same single byte.
    int forced = -1;
    bool ambiguous = false;
    for (int32_t node : cur.nodes) {
      for (const CompiledGrammar::ByteEdge& e : grammar_->state(arena_.state(node)).bytes) {
        if (e.lo != e.hi || (forced >= 0 && forced != e.lo)) {
          ambiguous = true;
          break;
        }
        forced = e.lo;
      }
      if (ambiguous) break;
    }
    if (ambiguous || forced < 0) break;
    internal::StepByte(*grammar_, arena_, cur, static_cast<uint8_t>(forced), &next);
    if (next.nodes.empty() && !next.can_end) break;
    out.push_back(static_cast<char>(forced));
    std::swap(cur, next);
  }
  return out;
}

bool GrammarMatcher::AcceptBytes(std::string_view bytes) {
  if (terminated_) return false;
  Configuration next;
  if (!Advance(history_.back(), bytes, &next)) return false;
  history_.push_back(std::move(next));
  terminated_history_.push_back(false);
  return true;
}

bool GrammarMatcher::AcceptToken(int32_t token_id) {
  const auto& v = grammar_->vocab().vocab();
  if (terminated_ || token_id < 0 || token_id >= v.size()) return false;
  if (is_eos_[token_id]) {
    if (!history_.back().can_end) return false;
    history_.push_back(history_.back());
    terminated_history_.push_back(true);
    terminated_ = true;
    return true;
  }
  if (is_special_[token_id] || v.token_bytes[token_id].empty()) return false;
  return AcceptBytes(v.token_bytes[token_id]);
}

void GrammarMatcher::Rollback(int num_tokens) {
  CHECK_GE(num_tokens, 0);
  CHECK_LE(num_tokens, num_accepted_tokens());
  history_.resize(history_.size() - num_tokens);
  terminated_history_.resize(terminated_history_.size() - num_tokens);
  terminated_ = terminated_history_.back();
}

int64_t GrammarMatcher::MinBytesToTerminate() const {
  const Configuration& cur = history_.back();
  if (cur.can_end) return 0;
  int64_t best = INT64_MAX;
  for (int32_t n : cur.nodes) {
    int64_t d = 0;
    for (int32_t x = n; x >= 0; x = arena_.parent(x)) {
      d += grammar_->min_bytes_to_rule_end(arena_.state(x));
    }
    best = std::min(best, d);
  }
  return best;
}

int64_t GrammarMatcher::MinBytesToTerminateAfter(int32_t token_id) {
  if (!AcceptToken(token_id)) return -1;
  int64_t d = MinBytesToTerminate();
  Rollback(1);
  return d;
}

std::vector<uint32_t> GrammarMatcher::NextTokenBitmask() {
  std::vector<uint32_t> mask(grammar_->vocab().mask_words());
  FillNextTokenBitmask(std::span<uint32_t>(mask));
  return mask;
}

void GrammarMatcher::FillNextTokenBitmask(std::span<uint32_t> bitmask) {
  const VocabularyIndex& vi = grammar_->vocab();
  CHECK_EQ(static_cast<int64_t>(bitmask.size()), vi.mask_words());
  std::fill(bitmask.begin(), bitmask.end(), 0u);
  if (terminated_) return;
  const Configuration& cur = history_.back();
  std::vector<const std::vector<int32_t>*> uncertain;
  for (int32_t n : cur.nodes) {
    const auto& sets = grammar_->TokenSetsOf(arena_.state(n));
    if (sets.accepted != nullptr) {
      const std::vector<uint32_t>& accepted = *sets.accepted;
      for (size_t w = 0; w < accepted.size(); ++w) bitmask[w] |= accepted[w];
    }
    for (int32_t id : sets.accepted_extra) bitmask[id >> 5] |= 1u << (id & 31);
    if (!sets.uncertain.empty()) uncertain.push_back(&sets.uncertain);
  }
  const auto& tokens = vi.vocab().token_bytes;
  Configuration scratch;
  for (const auto* list : uncertain) {
    for (int32_t id : *list) {
      if (bitmask[id >> 5] & (1u << (id & 31))) continue;
      if (Advance(cur, tokens[id], &scratch)) bitmask[id >> 5] |= 1u << (id & 31);
    }
  }
  if (cur.can_end) {
    for (int32_t id : vi.vocab().eos_ids) {
      if (id >= 0 && id < vi.size()) bitmask[id >> 5] |= 1u << (id & 31);
    }
  }
}

}  // namespace deepinfer::structured
