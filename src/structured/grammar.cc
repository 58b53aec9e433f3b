#include "structured/grammar.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/check.h"

namespace deepinfer::structured {

Expr Expr::Literal(std::string bytes) {
  Expr e;
  e.kind = bytes.empty() ? Kind::kEmpty : Kind::kLiteral;
  e.text = std::move(bytes);
  return e;
}

Expr Expr::CharClass(std::vector<CodePointRange> ranges, bool negated) {
  Expr e;
  e.kind = Kind::kCharClass;
  e.ranges = NormalizeRanges(std::move(ranges));
  if (negated) e.ranges = ComplementRanges(e.ranges);
  return e;
}

Expr Expr::Ref(int rule) {
  Expr e;
  e.kind = Kind::kRuleRef;
  e.rule = rule;
  return e;
}

Expr Expr::Seq(std::vector<Expr> children) {
  if (children.size() == 1) return std::move(children[0]);
  Expr e;
  e.kind = children.empty() ? Kind::kEmpty : Kind::kSequence;
  e.children = std::move(children);
  return e;
}

Expr Expr::Choice(std::vector<Expr> children) {
  if (children.size() == 1) return std::move(children[0]);
  Expr e;
  e.kind = Kind::kChoice;
  e.children = std::move(children);
  return e;
}

Expr Expr::Repeat(Expr child, int min, int max) {
  CHECK_GE(min, 0);
  CHECK(max == kUnbounded || max >= min);
  Expr e;
  e.kind = Kind::kRepeat;
  e.min = min;
  e.max = max;
  e.children.push_back(std::move(child));
  return e;
}

std::vector<CodePointRange> NormalizeRanges(std::vector<CodePointRange> ranges) {
  std::vector<CodePointRange> clipped;
  for (auto r : ranges) {
    if (r.lo > r.hi) continue;
    r.hi = std::min(r.hi, kMaxCodePoint);
    if (r.lo > kMaxCodePoint) continue;
    // Remove surrogates D800..DFFF: they are not encodable in UTF-8.
    if (r.lo <= 0xDFFF && r.hi >= 0xD800) {
      if (r.lo < 0xD800) clipped.push_back({r.lo, 0xD7FF});
      if (r.hi > 0xDFFF) clipped.push_back({0xE000, r.hi});
    } else {
      clipped.push_back(r);
    }
  }
  std::sort(clipped.begin(), clipped.end(),
            [](const CodePointRange& a, const CodePointRange& b) { return a.lo < b.lo; });
  std::vector<CodePointRange> out;
  for (const auto& r : clipped) {
    if (!out.empty() && r.lo <= out.back().hi + 1) {
      out.back().hi = std::max(out.back().hi, r.hi);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

std::vector<CodePointRange> ComplementRanges(const std::vector<CodePointRange>& ranges) {
  std::vector<CodePointRange> out;
  uint32_t next = 0;
  for (const auto& r : ranges) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return NormalizeRanges(std::move(out));
}

int Grammar::AddRule(const std::string& name) {
  CHECK_EQ(FindRule(name), -1) << name;
  names_.push_back(name);
  bodies_.push_back(Expr::Empty());
  return static_cast<int>(names_.size()) - 1;
}

int Grammar::AddUniqueRule(const std::string& prefix) {
  if (FindRule(prefix) < 0) return AddRule(prefix);
  for (int i = 2;; ++i) {
    std::string name = absl::StrCat(prefix, "_", i);
    if (FindRule(name) < 0) return AddRule(name);
  }
}

int Grammar::FindRule(const std::string& name) const {
  for (size_t i = 0; i < names_.size(); ++i) {
    if (names_[i] == name) return static_cast<int>(i);
  }
  return -1;
}

namespace {

std::string QuoteBytes(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c < 0x20 || c == 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

void Print(const Grammar& g, const Expr& e, std::string* out) {
  using K = Expr::Kind;
  switch (e.kind) {
    case K::kEmpty:
      *out += "\"\"";
      break;
    case K::kLiteral:
      *out += QuoteBytes(e.text);
      break;
    case K::kCharClass:
      *out += "[";
      for (const auto& r : e.ranges) {
        absl::StrAppendFormat(out, "\\u{%x}", r.lo);
        if (r.hi != r.lo) absl::StrAppendFormat(out, "-\\u{%x}", r.hi);
      }
      *out += "]";
      break;
    case K::kRuleRef:
      *out += g.name(e.rule);
      break;
    case K::kSequence:
      *out += "(";
      for (size_t i = 0; i < e.children.size(); ++i) {
        if (i) *out += " ";
        Print(g, e.children[i], out);
      }
      *out += ")";
      break;
    case K::kChoice:
      *out += "(";
      for (size_t i = 0; i < e.children.size(); ++i) {
        if (i) *out += " | ";
        Print(g, e.children[i], out);
      }
      *out += ")";
      break;
    case K::kRepeat:
      Print(g, e.children[0], out);
      if (e.max == kUnbounded) {
        absl::StrAppend(out, "{", e.min, ",}");
      } else {
        absl::StrAppend(out, "{", e.min, ",", e.max, "}");
      }
      break;
  }
}

}  // namespace

std::string Grammar::ToString() const {
  std::string out = absl::StrCat("# root: ", names_.empty() ? "" : names_[root_], "\n");
  for (int i = 0; i < num_rules(); ++i) {
    absl::StrAppend(&out, names_[i], " ::= ");
    Print(*this, bodies_[i], &out);
    out += "\n";
  }
  return out;
}

Expr OptionalSequence(Grammar& g, std::vector<Expr> items, const std::vector<bool>& required,
                      const Expr& separator, const std::string& prefix) {
  CHECK_EQ(items.size(), required.size());
  const int n = static_cast<int>(items.size());
  //   first[i]: items i.. while none has been emitted yet (the next one has no separator);
  //   rest[i]:  items i.. after some item was emitted (each one after a separator).
  //   first[i] ::= item_i rest[i+1] | first[i+1]     (the second branch only if i is optional)
  //   rest[i]  ::= sep item_i rest[i+1] | rest[i+1]  (likewise)
  //   first[n] ::= rest[n] ::= ""
  // Each item is copied into first[i] and rest[i] (two copies, not a rule of its own: a called
  // rule would make tokens that cross into the next item depend on the stack, i.e. slower masks).
  std::vector<int> rest(n + 1), first(n + 1);
  for (int i = 0; i <= n; ++i) {
    rest[i] = g.AddUniqueRule(prefix + "_rest");
    first[i] = g.AddUniqueRule(prefix + "_first");
  }
  g.SetBody(rest[n], Expr::Empty());
  g.SetBody(first[n], Expr::Empty());
  for (int i = n - 1; i >= 0; --i) {
    Expr rest_take = Expr::Seq({separator, items[i], Expr::Ref(rest[i + 1])});
    Expr first_take = Expr::Seq({std::move(items[i]), Expr::Ref(rest[i + 1])});
    if (required[i]) {
      g.SetBody(rest[i], std::move(rest_take));
      g.SetBody(first[i], std::move(first_take));
    } else {
      g.SetBody(rest[i], Expr::Choice({std::move(rest_take), Expr::Ref(rest[i + 1])}));
      g.SetBody(first[i], Expr::Choice({std::move(first_take), Expr::Ref(first[i + 1])}));
    }
  }
  return Expr::Ref(first[0]);
}

}  // namespace deepinfer::structured
