// Grammar matcher: compiles a Grammar (grammar.h) to a byte-level pushdown automaton and, at
// each decode step, produces the bitmask of vocabulary tokens whose bytes the grammar can accept
// next (DEEPINFER-DESIGN.md §11).
//
// Automaton: every rule becomes an NFA over byte ranges with call edges to other rules (code
// point classes are expanded into UTF-8 byte-range sequences). A matcher configuration is a set
// of stacks; each stack is a hash-consed linked list of NFA states (top = current position,
// below = return states), so equal stacks share one id and sets stay small.
//
// Token masks follow the XGrammar idea of context-independent token sets: for each NFA state s
// the compiled grammar caches (lazily, thread-safe) the tokens accepted from s without leaving
// s's rule frame ("accepted") and those whose acceptance depends on the frames below
// ("uncertain"). A step's mask is the union of the cached accepted sets of the configuration's
// top states plus the uncertain tokens that survive a full simulation on the actual stacks.
// States of an inlined copy of a rule derive their sets from the rule's own states (only the
// tokens that leave the rule are walked again), so a rule inlined in many places costs one
// vocabulary walk.
// The vocabulary is walked as a sorted trie (shared prefixes are simulated once).
//
// EOS tokens are allowed only when the grammar can terminate; special tokens never, control
// tokens (see ControlTokenBytes) only where the grammar spells them.
// Thread-safety: CompiledGrammar is immutable apart from its internal, mutex-protected caches
// and may be shared by many matchers; a GrammarMatcher is used by one thread at a time.
#ifndef DEEPINFER_STRUCTURED_MATCHER_H_
#define DEEPINFER_STRUCTURED_MATCHER_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "structured/compile_budget.h"
#include "structured/grammar.h"

namespace deepinfer::structured {

// Control tokens: special tokens that a grammar may require by id, e.g. DeepSeek's `｜DSML｜`
// tag prefix, which the output parser recognises only as that single id (spec §2.3). In the
// vocabulary such a token's bytes are the reserved spelling ControlTokenBytes(content) =
// 0xFF + content + 0xFF; a grammar asks for the token with Expr::Literal(ControlTokenBytes(..)).
// 0xFF never occurs in UTF-8 and no front end emits it, so grammars without such a literal never
// allow a control token, and ordinary tokens containing 0xFF (raw byte tokens) are excluded by
// VocabularyIndex so that they cannot spell a control token piece by piece.
inline constexpr char kControlByte = '\xFF';
std::string ControlTokenBytes(std::string_view content);

// The token vocabulary as bytes: what the matcher needs from a tokenizer.
struct Vocabulary {
  // token_bytes[id] = the exact bytes token `id` decodes to ("" for ids that never match);
  // ControlTokenBytes(content) for control tokens.
  std::vector<std::string> token_bytes;
  // Ids that can never be generated under a grammar (special/control tokens). EOS ids are
  // handled separately and should also be listed here.
  std::vector<int32_t> special_ids;
  // End-of-sequence ids: allowed exactly when the grammar can terminate.
  std::vector<int32_t> eos_ids;

  int64_t size() const { return static_cast<int64_t>(token_bytes.size()); }
};

// The vocabulary in trie order (sorted by bytes), shared by every grammar compiled for it.
class VocabularyIndex {
 public:
  explicit VocabularyIndex(Vocabulary vocab);
  const Vocabulary& vocab() const { return vocab_; }
  int64_t size() const { return vocab_.size(); }
  // Number of 32-bit words of a token bitmask.
  int64_t mask_words() const { return (vocab_.size() + 31) / 32; }
  // Ordinary tokens sorted by bytes; lcp_[i] = common prefix length of sorted_[i-1], sorted_[i].
  const std::vector<int32_t>& sorted() const { return sorted_; }
  const std::vector<int32_t>& lcp() const { return lcp_; }
  // next_smaller()[j] = the first k > j with lcp[k] < lcp[j] (size() if none): skipping from
  // j to it passes only tokens that share at least lcp[j] bytes with token j-1.
  const std::vector<int32_t>& next_smaller() const { return next_smaller_; }
  // A stable fingerprint of the vocabulary (cache key part).
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  Vocabulary vocab_;
  std::vector<int32_t> sorted_;
  std::vector<int32_t> lcp_;
  std::vector<int32_t> next_smaller_;
  uint64_t fingerprint_ = 0;
};

class CompiledGrammar {
 public:
  // Compiles `grammar` for `vocab`. Errors: InvalidArgument for left recursion (naming the
  // rule), undefined rules, or an automaton larger than the state limit; DeadlineExceeded when
  // `budget` expires first (polled while building).
  static absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Compile(
      const Grammar& grammar, std::shared_ptr<const VocabularyIndex> vocab,
      const CompileBudget& budget = CompileBudget());

  const VocabularyIndex& vocab() const { return *vocab_; }
  int num_states() const { return static_cast<int>(states_.size()); }
  // Approximate heap bytes held: the automaton plus the token sets computed so far (a mask
  // shared by inlined copies counted once). For cache accounting.
  size_t MemoryBytes() const;
  // Computes the context-independent token sets of every state a matcher can reach now (e.g.
  // on a compiler thread) instead of lazily on first use.
  void Precompute() const;
  // The same, polling `budget`: DeadlineExceeded when it expires (the sets computed so far stay
  // valid; the rest are computed lazily if the grammar is used anyway).
  absl::Status Precompute(const CompileBudget& budget) const;

  // --- internal representation (used by GrammarMatcher) ---
  struct ByteEdge {
    uint8_t lo, hi;
    int32_t target;
  };
  struct CallEdge {
    int32_t callee_rule;
    int32_t return_state;
  };
  struct State {
    std::vector<ByteEdge> bytes;
    std::vector<CallEdge> calls;
    std::vector<int32_t> eps;
    bool final = false;  // end of its rule
  };
  struct TokenSets {
    // Bitmask [mask_words] of accepted tokens, or null when they are few (fewer than
    // mask_words: then they are all in accepted_extra); inlined copies of a rule's state share
    // their origin's (memory: one mask per distinct rule state, not per copy).
    std::shared_ptr<const std::vector<uint32_t>> accepted;
    std::vector<int32_t> accepted_extra;  // further accepted token ids
    std::vector<int32_t> uncertain;       // token ids needing a full simulation
  };
  const State& state(int s) const { return states_[s]; }
  const std::vector<int32_t>& closure(int s) const { return eps_closure_[s]; }
  int rule_start(int rule) const { return rule_start_[rule]; }
  int root_rule() const { return root_; }
  // Context-independent token sets of stable state `s` (computed on first use).
  const TokenSets& TokenSetsOf(int s) const;
  // For a state of an inlined copy of a rule (matcher.cc, GrammarBuilder): the corresponding
  // state of the rule's own automaton, whose token sets the copy's are derived from; else -1.
  int32_t origin(int s) const { return origin_[s]; }
  // Fewest bytes that take state `s` to the end of its rule (callees counted in full).
  int64_t min_bytes_to_rule_end(int s) const { return min_to_end_[s]; }

 private:
  CompiledGrammar() = default;
  // TokenSetsOf with a budget: null when it expired before the sets were complete.
  const TokenSets* ComputeTokenSets(int s, const CompileBudget* budget) const;
  // States reachable from the root rule's start (byte, epsilon and call edges), ascending.
  std::vector<int32_t> ReachableStates() const;

  std::shared_ptr<const VocabularyIndex> vocab_;
  std::vector<State> states_;
  std::vector<int32_t> origin_;
  std::vector<std::vector<int32_t>> eps_closure_;
  std::vector<int32_t> rule_start_;
  std::vector<int64_t> min_to_end_;
  int root_ = 0;
  mutable std::mutex cache_mu_;
  mutable std::vector<std::unique_ptr<TokenSets>> token_sets_;  // guarded by cache_mu_

  friend class GrammarBuilder;
};

// Hash-consed stacks of NFA states. Node ids index nodes(); parent -1 = bottom of a stack
// (the root rule's frame), parent -2 = "unknown context" (used for context-independent sets).
class StackArena {
 public:
  static constexpr int32_t kRoot = -1;
  static constexpr int32_t kUnknown = -2;
  int32_t Intern(int32_t state, int32_t parent);
  int32_t state(int32_t node) const { return nodes_[node].first; }
  int32_t parent(int32_t node) const { return nodes_[node].second; }
  size_t size() const { return nodes_.size(); }

 private:
  std::vector<std::pair<int32_t, int32_t>> nodes_;
  absl::flat_hash_map<uint64_t, int32_t> index_;
};

// A set of stacks after epsilon closure: stable nodes (top state has byte edges), plus whether
// the grammar can end here and whether a path popped into unknown context.
struct Configuration {
  std::vector<int32_t> nodes;  // sorted, unique
  bool can_end = false;
  bool popped_unknown = false;
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  // Advances by one token. Returns false (and leaves the state unchanged) if the grammar does
  // not allow it. An EOS id is accepted iff the grammar can terminate; it terminates the match.
  bool AcceptToken(int32_t token_id);
  // Advances by raw bytes (for tests and forced prefixes). False = rejected, state unchanged.
  bool AcceptBytes(std::string_view bytes);
  // Writes the allowed-token bitmask for the next token: bit (id % 32) of word id / 32.
  // `bitmask` has vocab().mask_words() words.
  void FillNextTokenBitmask(std::span<uint32_t> bitmask);
  std::vector<uint32_t> NextTokenBitmask();
  // True when the text so far is a complete sentence of the grammar.
  bool CanTerminate() const { return history_.back().can_end; }
  // Fewest bytes still needed to complete the grammar (0 when CanTerminate()). Lets callers
  // steer towards termination when a token budget runs out.
  int64_t MinBytesToTerminate() const;
  // The same for the configuration reached after accepting `token_id` (-1 if not allowed).
  int64_t MinBytesToTerminateAfter(int32_t token_id);
  // True after an EOS token was accepted.
  bool IsTerminated() const { return terminated_; }
  // Jump-forward decoding (issue #22 part 3): the bytes the grammar forces from the current
  // state, i.e. the longest string s (at most `max_bytes`) such that every sentence of the
  // grammar continuing the text so far continues it with s: it stops where two or more bytes are
  // possible or where the grammar could also end. "" when nothing is forced. Does not advance.
  std::string ForcedBytes(size_t max_bytes);
  // Undoes the last `num_tokens` accepted tokens (speculative decoding). CHECKs the count.
  void Rollback(int num_tokens);
  int num_accepted_tokens() const { return static_cast<int>(history_.size()) - 1; }
  void Reset();
  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  bool Advance(const Configuration& from, std::string_view bytes, Configuration* to);

  std::shared_ptr<const CompiledGrammar> grammar_;
  StackArena arena_;
  std::vector<Configuration> history_;  // history_[0] = start; back() = current
  std::vector<bool> terminated_history_;
  bool terminated_ = false;
  std::vector<uint8_t> is_special_;
  std::vector<uint8_t> is_eos_;
};

// Closure and byte steps shared by the matcher and the token-set precomputation.
namespace internal {
// Epsilon-closes the stacks `seeds` (node ids in `arena`) into `out`.
void Close(const CompiledGrammar& g, StackArena& arena, const std::vector<int32_t>& seeds,
           Configuration* out);
// Consumes one byte from `from`; returns false if no stack survives and nothing popped.
void StepByte(const CompiledGrammar& g, StackArena& arena, const Configuration& from, uint8_t b,
              Configuration* out);
// UTF-8 byte-range sequences matching exactly the code points of [lo, hi] (one vector of
// (lo, hi) byte ranges per sequence).
std::vector<std::vector<std::pair<uint8_t, uint8_t>>> Utf8Sequences(uint32_t lo, uint32_t hi);
}  // namespace internal

}  // namespace deepinfer::structured

#endif  // DEEPINFER_STRUCTURED_MATCHER_H_
