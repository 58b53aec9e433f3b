// JSON schema -> grammar (DEEPINFER-DESIGN.md §11; docs/structured-output.md lists what is
// supported). Every keyword is either enforced by the grammar, ignored because it is an
// annotation (title, description, default, examples, $schema, $id, $comment, deprecated,
// readOnly, writeOnly), or rejected with an InvalidArgument error that names it and its JSON
// pointer — a schema is never accepted with a constraint silently dropped.
//
// Generated text is compact JSON by default (no whitespace; properties in schema order);
// WhitespacePolicy::kFlexible allows up to `max_whitespace` of [ \t\n] between tokens.
// Objects never get properties beyond those listed in `properties` (allowed by any schema whose
// additionalProperties is absent/true); `oneOf` is compiled like `anyOf` (exclusivity is not
// enforced: documented).
#ifndef DEEPINFER_STRUCTURED_JSON_SCHEMA_H_
#define DEEPINFER_STRUCTURED_JSON_SCHEMA_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "structured/grammar.h"

namespace deepinfer::structured {

enum class WhitespacePolicy { kCompact, kFlexible };

struct JsonSchemaOptions {
  WhitespacePolicy whitespace = WhitespacePolicy::kCompact;
  int max_whitespace = 8;  // bytes of whitespace allowed at each point in kFlexible mode
};

// Compiles a JSON schema (text). Errors: InvalidArgument for malformed JSON, unsupported or
// unenforceable keywords (named with their JSON pointer), unresolvable $ref.
absl::StatusOr<Grammar> JsonSchemaToGrammar(std::string_view schema_json,
                                            const JsonSchemaOptions& options = {});

// A grammar accepting any JSON value whose top level is an object (response_format
// json_object) or, with `object_only` false, any JSON value.
Grammar AnyJsonGrammar(bool object_only, const JsonSchemaOptions& options = {});

}  // namespace deepinfer::structured

#endif  // DEEPINFER_STRUCTURED_JSON_SCHEMA_H_
