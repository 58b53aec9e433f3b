#include "structured/regex.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "structured/text_util.h"

namespace deepinfer::structured {
namespace {

const std::vector<CodePointRange>& Digits() {
  static const auto* r = new std::vector<CodePointRange>{{'0', '9'}};
  return *r;
}
const std::vector<CodePointRange>& WordChars() {
  static const auto* r =
      new std::vector<CodePointRange>{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
  return *r;
}
const std::vector<CodePointRange>& Spaces() {
  // ECMA-262 WhiteSpace + LineTerminator.
  static const auto* r = new std::vector<CodePointRange>{
      {0x09, 0x0D},     {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
      {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
  return *r;
}

class RegexParser {
 public:
  RegexParser(std::string_view p, Grammar* g) : p_(p), g_(g) {}

  absl::StatusOr<Expr> Parse(RegexAnchoring anchoring) {
    bool anchored_start = false, anchored_end = false;
    if (!p_.empty() && p_[0] == '^') {
      anchored_start = true;
      pos_ = 1;
    }
    end_ = p_.size();
    if (end_ > pos_ && p_[end_ - 1] == '$' && !EscapedAt(end_ - 1)) {
      anchored_end = true;
      --end_;
    }
    ASSIGN_OR_RETURN(Expr e, ParseAlt());
    if (pos_ != end_) return Error("unbalanced ')'");
    if (anchoring == RegexAnchoring::kSearch) {
      std::vector<Expr> seq;
      if (!anchored_start) seq.push_back(Expr::Star(Expr::AnyChar()));
      seq.push_back(std::move(e));
      if (!anchored_end) seq.push_back(Expr::Star(Expr::AnyChar()));
      return Expr::Seq(std::move(seq));
    }
    return e;
  }

 private:
  bool EscapedAt(size_t i) const {
    size_t n = 0;
    while (i > n && p_[i - n - 1] == '\\') ++n;
    return n % 2 == 1;
  }

  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("regex '", std::string(p_), "' at position ", pos_, ": ", what));
  }

  bool AtEnd() const { return pos_ >= end_; }

  absl::StatusOr<Expr> ParseAlt() {
    std::vector<Expr> alts;
    ASSIGN_OR_RETURN(Expr first, ParseConcat());
    alts.push_back(std::move(first));
    while (!AtEnd() && p_[pos_] == '|') {
      ++pos_;
      ASSIGN_OR_RETURN(Expr next, ParseConcat());
      alts.push_back(std::move(next));
    }
    return Expr::Choice(std::move(alts));
  }

  absl::StatusOr<Expr> ParseConcat() {
    std::vector<Expr> items;
    while (!AtEnd() && p_[pos_] != '|' && p_[pos_] != ')') {
      ASSIGN_OR_RETURN(Expr atom, ParseAtom());
      ASSIGN_OR_RETURN(atom, ParseQuantifier(std::move(atom)));
      items.push_back(std::move(atom));
    }
    return Expr::Seq(std::move(items));
  }

  bool ReadInt(int* v) {
    size_t start = pos_;
    *v = 0;
    while (!AtEnd() && p_[pos_] >= '0' && p_[pos_] <= '9' && pos_ - start < 6) {
      *v = *v * 10 + (p_[pos_++] - '0');
    }
    return pos_ > start;
  }

  absl::StatusOr<Expr> ParseQuantifier(Expr atom) {
    for (;;) {
      if (AtEnd()) return atom;
      char c = p_[pos_];
      int lo, hi;
      if (c == '*') {
        lo = 0, hi = kUnbounded, ++pos_;
      } else if (c == '+') {
        lo = 1, hi = kUnbounded, ++pos_;
      } else if (c == '?') {
        lo = 0, hi = 1, ++pos_;
      } else if (c == '{') {
        size_t save = pos_++;
        if (!ReadInt(&lo)) {
          pos_ = save;
          return Error("'{' must start a quantifier {m}, {m,} or {m,n}");
        }
        hi = lo;
        if (!AtEnd() && p_[pos_] == ',') {
          ++pos_;
          if (!AtEnd() && p_[pos_] == '}') {
            hi = kUnbounded;
          } else if (!ReadInt(&hi)) {
            return Error("bad quantifier upper bound");
          }
        }
        if (AtEnd() || p_[pos_] != '}') return Error("unterminated quantifier");
        ++pos_;
        if (hi != kUnbounded && hi < lo) return Error("quantifier {m,n} with n < m");
        if (lo > 5000 || hi > 5000) return Error("quantifier bound above 5000 is not supported");
      } else {
        return atom;
      }
      if (!AtEnd() && p_[pos_] == '?') ++pos_;  // lazy: same language
      if (!AtEnd() && (p_[pos_] == '*' || p_[pos_] == '+')) {
        return Error("possessive / stacked quantifiers are not supported");
      }
      atom = Expr::Repeat(std::move(atom), lo, hi);
    }
  }

  absl::StatusOr<std::vector<CodePointRange>> ClassEscape(char e, bool* is_set) {
    *is_set = true;
    switch (e) {
      case 'd':
        return Digits();
      case 'D':
        return ComplementRanges(NormalizeRanges(Digits()));
      case 'w':
        return WordChars();
      case 'W':
        return ComplementRanges(NormalizeRanges(WordChars()));
      case 's':
        return Spaces();
      case 'S':
        return ComplementRanges(NormalizeRanges(Spaces()));
      default:
        *is_set = false;
        return std::vector<CodePointRange>{};
    }
  }

  absl::StatusOr<uint32_t> ParseChar() {
    if (p_[pos_] == '\\' && pos_ + 1 < end_) {
      char e = p_[pos_ + 1];
      if (e == 'b' || e == 'B') return Error("word boundaries (\\b, \\B) are not supported");
      if (e >= '1' && e <= '9') return Error("backreferences are not supported");
      if (e == 'k') return Error("named backreferences are not supported");
      if (e == 'p' || e == 'P')
        return Error("Unicode property escapes (\\p{..}) are not supported");
      if (e == 'c') return Error("control escapes (\\cX) are not supported");
    }
    size_t used = 0;
    auto cp = DecodeEscapedChar(p_.substr(pos_, end_ - pos_), &used);
    if (!cp.ok()) return Error(std::string(cp.status().message()));
    pos_ += used;
    return *cp;
  }

  absl::StatusOr<Expr> ParseAtom() {
    char c = p_[pos_];
    if (c == '(') {
      ++pos_;
      if (p_.substr(pos_, 2) == "?:") {
        pos_ += 2;
      } else if (!AtEnd() && p_[pos_] == '?') {
        return Error("lookaround and named groups are not supported");
      }
      ASSIGN_OR_RETURN(Expr inner, ParseAlt());
      if (AtEnd() || p_[pos_] != ')') return Error("missing ')'");
      ++pos_;
      return inner;
    }
    if (c == '[') return ParseClass();
    if (c == '.') {
      ++pos_;
      return Expr::CharClass({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}, /*negated=*/true);
    }
    if (c == '^' || c == '$') return Error("anchors are only supported at the ends of the pattern");
    if (c == '*' || c == '+' || c == '?') return Error("quantifier without an operand");
    if (c == '\\' && pos_ + 1 < end_) {
      bool is_set;
      ASSIGN_OR_RETURN(auto set, ClassEscape(p_[pos_ + 1], &is_set));
      if (is_set) {
        pos_ += 2;
        return Expr::CharClass(std::move(set));
      }
    }
    ASSIGN_OR_RETURN(uint32_t cp, ParseChar());
    std::string bytes;
    AppendUtf8(cp, &bytes);
    return Expr::Literal(std::move(bytes));
  }

  absl::StatusOr<Expr> ParseClass() {
    ++pos_;  // [
    bool negated = false;
    if (!AtEnd() && p_[pos_] == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<CodePointRange> ranges;
    bool first = true;
    while (!AtEnd() && (p_[pos_] != ']' || (first && false))) {
      first = false;
      if (p_[pos_] == '\\' && pos_ + 1 < end_) {
        bool is_set;
        ASSIGN_OR_RETURN(auto set, ClassEscape(p_[pos_ + 1], &is_set));
        if (is_set) {
          pos_ += 2;
          ranges.insert(ranges.end(), set.begin(), set.end());
          continue;
        }
      }
      ASSIGN_OR_RETURN(uint32_t lo, ParseChar());
      uint32_t hi = lo;
      if (pos_ + 1 < end_ && p_[pos_] == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        ASSIGN_OR_RETURN(hi, ParseChar());
        if (hi < lo) return Error("character range out of order");
      }
      ranges.push_back({lo, hi});
    }
    if (AtEnd()) return Error("unterminated character class");
    ++pos_;  // ]
    return Expr::CharClass(std::move(ranges), negated);
  }

  std::string_view p_;
  Grammar* g_;
  size_t pos_ = 0;
  size_t end_ = 0;
};

}  // namespace

absl::StatusOr<Expr> RegexToExpr(std::string_view pattern, RegexAnchoring anchoring,
                                 Grammar* grammar) {
  return RegexParser(pattern, grammar).Parse(anchoring);
}

absl::StatusOr<Grammar> RegexToGrammar(std::string_view pattern) {
  Grammar g;
  int root = g.AddRule("root");
  ASSIGN_OR_RETURN(Expr e, RegexToExpr(pattern, RegexAnchoring::kFullMatch, &g));
  g.SetBody(root, std::move(e));
  g.set_root(root);
  return g;
}

}  // namespace deepinfer::structured
