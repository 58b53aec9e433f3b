// Grammar IR for structured output (DEEPINFER-DESIGN.md §11).
//
// A Grammar is a list of named rules; each rule body is an expression tree over:
//   literal byte strings, character classes over Unicode code points (not bytes: `[é]` matches
//   the two-byte UTF-8 encoding of U+00E9), rule references, sequences, choices and bounded or
//   unbounded repetition. The EBNF front end (ebnf.h), the regex front end (regex.h) and the JSON
//   schema front end (json_schema.h) all produce this IR; the matcher (matcher.h) compiles it to a
//   byte-level pushdown automaton.
// Left recursion is rejected by the compiler (matcher.h) with a clear error.
#ifndef DEEPINFER_STRUCTURED_GRAMMAR_H_
#define DEEPINFER_STRUCTURED_GRAMMAR_H_

#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer::structured {

// An inclusive range of Unicode code points [lo, hi].
struct CodePointRange {
  uint32_t lo = 0;
  uint32_t hi = 0;
  bool operator==(const CodePointRange&) const = default;
};

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;
// Unbounded repetition maximum.
inline constexpr int kUnbounded = -1;

struct Expr {
  enum class Kind {
    kEmpty,      // matches the empty string
    kLiteral,    // `text`: exact bytes (UTF-8)
    kCharClass,  // one code point in `ranges` (normalised: sorted, non-overlapping)
    kRuleRef,    // rule `rule`
    kSequence,   // children in order
    kChoice,     // one of children
    kRepeat,     // children[0] repeated min..max times (max = kUnbounded for no limit)
  };
  Kind kind = Kind::kEmpty;
  std::string text;
  std::vector<CodePointRange> ranges;
  int rule = -1;
  int min = 0;
  int max = 0;
  std::vector<Expr> children;

  static Expr Empty() { return Expr{}; }
  static Expr Literal(std::string bytes);
  // `negated` complements the set within [0, kMaxCodePoint] (surrogates excluded).
  static Expr CharClass(std::vector<CodePointRange> ranges, bool negated = false);
  static Expr AnyChar() { return CharClass({{0, kMaxCodePoint}}); }
  static Expr Ref(int rule);
  static Expr Seq(std::vector<Expr> children);
  static Expr Choice(std::vector<Expr> children);
  static Expr Repeat(Expr child, int min, int max);
  static Expr Star(Expr child) { return Repeat(std::move(child), 0, kUnbounded); }
  static Expr Plus(Expr child) { return Repeat(std::move(child), 1, kUnbounded); }
  static Expr Optional(Expr child) { return Repeat(std::move(child), 0, 1); }
};

// Sorts, merges and clips ranges to valid code points (removing the surrogate block).
std::vector<CodePointRange> NormalizeRanges(std::vector<CodePointRange> ranges);
// The complement of normalised `ranges` within the valid code points.
std::vector<CodePointRange> ComplementRanges(const std::vector<CodePointRange>& ranges);

class Grammar {
 public:
  // Adds a rule with an empty body; returns its id. Names must be unique (CHECKed).
  int AddRule(const std::string& name);
  // Adds a rule named `prefix`, or `prefix_2`, `prefix_3`, ... if taken.
  int AddUniqueRule(const std::string& prefix);
  void SetBody(int rule, Expr body) { bodies_[rule] = std::move(body); }
  // The rule id for `name`, or -1.
  int FindRule(const std::string& name) const;

  int num_rules() const { return static_cast<int>(names_.size()); }
  const std::string& name(int rule) const { return names_[rule]; }
  const Expr& body(int rule) const { return bodies_[rule]; }
  int root() const { return root_; }
  void set_root(int rule) { root_ = rule; }

  // EBNF-like text for debugging and cache keys (stable for the same grammar).
  std::string ToString() const;

 private:
  std::vector<std::string> names_;
  std::vector<Expr> bodies_;
  int root_ = 0;
};

// Adds rules to `g` for `items` in the given order, each one present or absent (always present
// where `required[i]`), with `separator` between consecutive present items; returns the
// expression for the whole sequence. This is the language of a JSON object's properties in
// schema order (separator ",") and of DSML tool-call parameters (separator "\n").
// Linear construction (as XGrammar / llama.cpp's json-schema-to-grammar): 2n + 2 rules, each
// holding one item, so grammar, automaton and compile time grow linearly with the number of
// items (listing every possible next item instead is quadratic, enumerating subsets exponential).
// Rule names start with `prefix`. CHECKs that items and required have the same size.
Expr OptionalSequence(Grammar& g, std::vector<Expr> items, const std::vector<bool>& required,
                      const Expr& separator, const std::string& prefix);

}  // namespace deepinfer::structured

#endif  // DEEPINFER_STRUCTURED_GRAMMAR_H_
