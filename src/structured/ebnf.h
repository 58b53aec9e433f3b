// EBNF front end (GBNF-like syntax, documented in docs/structured-output.md):
//
//   root    ::= "{" ws pair ("," ws pair)* "}"     # comment
//   pair    ::= string ws ":" ws value
//   digit   ::= [0-9]          name ::= [^"\\\x00-\x1f]+     any ::= .
//   rep     ::= item{2,5} | item? | item* | item+ | item{3} | item{3,}
//
// Terminals: "double" or 'single' quoted strings with escapes \n \r \t \\ \" \' \xHH \uHHHH
// \U{HHHHHH}; character classes [...] / [^...] over Unicode code points with the same escapes;
// `.` is any code point. Rules may span lines; a rule ends where the next `name ::=` starts.
// The start rule is `root` if defined, else the first rule.
#ifndef DEEPINFER_STRUCTURED_EBNF_H_
#define DEEPINFER_STRUCTURED_EBNF_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "structured/grammar.h"

namespace deepinfer::structured {

// Parses EBNF text. Errors: InvalidArgument with line:column and what was expected, or naming
// an undefined rule.
absl::StatusOr<Grammar> ParseEbnf(std::string_view text);

}  // namespace deepinfer::structured

#endif  // DEEPINFER_STRUCTURED_EBNF_H_
