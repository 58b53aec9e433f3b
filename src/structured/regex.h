// Regex front end: the regex subset JSON schema `pattern` needs (ECMA-262 style):
// literals, `.`, classes [...] / [^...] with ranges, escapes \d \D \w \W \s \S \. \\ \/ \n \r
// \t \f \v \0 \xHH \uHHHH \u{H...}, groups ( ) and (?: ), alternation, quantifiers * + ? {m}
// {m,} {m,n} (a lazy `?` suffix is accepted: laziness does not change the language), and the
// anchors ^ and $ at the start / end of the pattern. Classes are code points, not bytes.
// Unsupported constructs (backreferences, lookaround, named groups, anchors in the middle) are
// an InvalidArgument error naming the construct and its position — never silently dropped.
#ifndef DEEPINFER_STRUCTURED_REGEX_H_
#define DEEPINFER_STRUCTURED_REGEX_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "structured/grammar.h"

namespace deepinfer::structured {

// How unanchored patterns are treated.
enum class RegexAnchoring {
  kFullMatch,  // the whole text must match (response_format regex, so_args regex)
  kSearch,     // JSON schema `pattern`: matches anywhere unless anchored with ^ / $
};

// Converts `pattern` into an expression, adding helper rules to `grammar` if needed.
absl::StatusOr<Expr> RegexToExpr(std::string_view pattern, RegexAnchoring anchoring,
                                 Grammar* grammar);

// A grammar whose root matches exactly the regex (full match).
absl::StatusOr<Grammar> RegexToGrammar(std::string_view pattern);

}  // namespace deepinfer::structured

#endif  // DEEPINFER_STRUCTURED_REGEX_H_
