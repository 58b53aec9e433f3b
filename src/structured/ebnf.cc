#include "structured/ebnf.h"

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "structured/text_util.h"

namespace deepinfer::structured {
namespace {

class EbnfParser {
 public:
  explicit EbnfParser(std::string_view text) : s_(text) {}

  absl::StatusOr<Grammar> Parse() {
    SkipSpace();
    // First pass: collect rule names so forward references resolve.
    while (pos_ < s_.size()) {
      std::string name;
      RETURN_IF_ERROR(ParseName(&name));
      SkipSpace();
      if (!Consume("::=")) return Error("expected '::=' after rule name '" + name + "'");
      int id = grammar_.FindRule(name);
      if (id >= 0 && id < static_cast<int>(defined_.size()) && defined_[id])
        return Error("rule '" + name + "' is defined twice");
      if (id < 0) id = grammar_.AddRule(name);
      if (static_cast<int>(defined_.size()) <= id) defined_.resize(id + 1, false);
      defined_[id] = true;
      ASSIGN_OR_RETURN(Expr body, ParseAlternation());
      grammar_.SetBody(id, std::move(body));
      SkipSpace();
    }
    if (grammar_.num_rules() == 0) return absl::InvalidArgumentError("EBNF grammar has no rules");
    for (int r = 0; r < grammar_.num_rules(); ++r) {
      if (r >= static_cast<int>(defined_.size()) || !defined_[r]) {
        return absl::InvalidArgumentError(
            absl::StrCat("EBNF: rule '", grammar_.name(r), "' is used but never defined"));
      }
    }
    int root = grammar_.FindRule("root");
    grammar_.set_root(root >= 0 ? root : 0);
    return std::move(grammar_);
  }

 private:
  absl::Status Error(const std::string& what) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return absl::InvalidArgumentError(absl::StrCat("EBNF ", line, ":", col, ": ", what));
  }

  void SkipSpace() {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  bool Consume(std::string_view tok) {
    if (s_.substr(pos_, tok.size()) == tok) {
      pos_ += tok.size();
      return true;
    }
    return false;
  }

  static bool IsNameChar(char c, bool first) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
           (!first && ((c >= '0' && c <= '9') || c == '-' || c == '.'));
  }

  absl::Status ParseName(std::string* name) {
    size_t start = pos_;
    if (pos_ >= s_.size() || !IsNameChar(s_[pos_], true)) return Error("expected a rule name");
    while (pos_ < s_.size() && IsNameChar(s_[pos_], false)) ++pos_;
    *name = std::string(s_.substr(start, pos_ - start));
    return absl::OkStatus();
  }

  // True if the text at pos_ is `name ::=` (the start of the next rule).
  bool AtRuleStart() {
    size_t save = pos_;
    std::string name;
    bool ok = ParseName(&name).ok();
    if (ok) {
      SkipSpace();
      ok = Consume("::=");
    }
    pos_ = save;
    return ok;
  }

  absl::StatusOr<Expr> ParseAlternation() {
    std::vector<Expr> alts;
    ASSIGN_OR_RETURN(Expr first, ParseSequence());
    alts.push_back(std::move(first));
    SkipSpace();
    while (Consume("|")) {
      ASSIGN_OR_RETURN(Expr next, ParseSequence());
      alts.push_back(std::move(next));
      SkipSpace();
    }
    return Expr::Choice(std::move(alts));
  }

  absl::StatusOr<Expr> ParseSequence() {
    std::vector<Expr> items;
    for (;;) {
      SkipSpace();
      if (pos_ >= s_.size()) break;
      char c = s_[pos_];
      if (c == '|' || c == ')') break;
      if (IsNameChar(c, true) && AtRuleStart()) break;
      ASSIGN_OR_RETURN(Expr atom, ParseAtom());
      ASSIGN_OR_RETURN(atom, ParsePostfix(std::move(atom)));
      items.push_back(std::move(atom));
    }
    return Expr::Seq(std::move(items));
  }

  absl::StatusOr<Expr> ParsePostfix(Expr atom) {
    for (;;) {
      if (Consume("*")) {
        atom = Expr::Star(std::move(atom));
      } else if (Consume("+")) {
        atom = Expr::Plus(std::move(atom));
      } else if (Consume("?")) {
        atom = Expr::Optional(std::move(atom));
      } else if (pos_ < s_.size() && s_[pos_] == '{') {
        ++pos_;
        int lo = 0, hi = 0;
        if (!ParseInt(&lo)) return Error("expected a number in {m,n}");
        hi = lo;
        if (Consume(",")) {
          if (pos_ < s_.size() && s_[pos_] == '}') {
            hi = kUnbounded;
          } else if (!ParseInt(&hi)) {
            return Error("expected a number in {m,n}");
          }
        }
        if (!Consume("}")) return Error("expected '}'");
        if (hi != kUnbounded && hi < lo) return Error("repetition {m,n} with n < m");
        if (lo > 10000 || hi > 10000) return Error("repetition bound above 10000");
        atom = Expr::Repeat(std::move(atom), lo, hi);
      } else {
        return atom;
      }
    }
  }

  bool ParseInt(int* out) {
    size_t start = pos_;
    int v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9' && pos_ - start < 6) {
      v = v * 10 + (s_[pos_] - '0');
      ++pos_;
    }
    *out = v;
    return pos_ > start;
  }

  absl::StatusOr<Expr> ParseAtom() {
    char c = s_[pos_];
    if (c == '"' || c == '\'') {
      ++pos_;
      std::string bytes;
      while (pos_ < s_.size() && s_[pos_] != c) {
        ASSIGN_OR_RETURN(uint32_t cp, ParseCharInLiteral());
        AppendUtf8(cp, &bytes);
      }
      if (!Consume(std::string_view(&c, 1))) return Error("unterminated string literal");
      return Expr::Literal(std::move(bytes));
    }
    if (c == '[') return ParseClass();
    if (c == '.') {
      ++pos_;
      return Expr::AnyChar();
    }
    if (c == '(') {
      ++pos_;
      ASSIGN_OR_RETURN(Expr inner, ParseAlternation());
      SkipSpace();
      if (!Consume(")")) return Error("expected ')'");
      return inner;
    }
    if (IsNameChar(c, true)) {
      std::string name;
      RETURN_IF_ERROR(ParseName(&name));
      int id = grammar_.FindRule(name);
      if (id < 0) id = grammar_.AddRule(name);
      return Expr::Ref(id);
    }
    return Error(absl::StrCat("unexpected character '", std::string(1, c), "'"));
  }

  absl::StatusOr<uint32_t> ParseCharInLiteral() {
    size_t used = 0;
    auto cp = DecodeEscapedChar(s_.substr(pos_), &used);
    if (!cp.ok()) return Error(std::string(cp.status().message()));
    pos_ += used;
    return *cp;
  }

  absl::StatusOr<Expr> ParseClass() {
    ++pos_;  // [
    bool negated = Consume("^");
    std::vector<CodePointRange> ranges;
    while (pos_ < s_.size() && s_[pos_] != ']') {
      ASSIGN_OR_RETURN(uint32_t lo, ParseCharInLiteral());
      uint32_t hi = lo;
      if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        ASSIGN_OR_RETURN(hi, ParseCharInLiteral());
        if (hi < lo) return Error("character range out of order");
      }
      ranges.push_back({lo, hi});
    }
    if (!Consume("]")) return Error("unterminated character class");
    return Expr::CharClass(std::move(ranges), negated);
  }

  std::string_view s_;
  size_t pos_ = 0;
  Grammar grammar_;
  std::vector<bool> defined_;
};

}  // namespace

absl::StatusOr<Grammar> ParseEbnf(std::string_view text) { return EbnfParser(text).Parse(); }

}  // namespace deepinfer::structured
