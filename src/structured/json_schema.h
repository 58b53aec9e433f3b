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

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
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

namespace internal {
class SchemaCompiler;
}

// Compiles subschemas of one schema document into expressions of an existing grammar, so that
// JSON values can be embedded in a larger grammar (the DSML tool-call grammar,
// tool_call_grammar.h). `$ref`s resolve against `document` (which must outlive the embedder);
// rules are added to `grammar` (shared ones such as json_string are reused by name). Same
// keyword policy and errors as JsonSchemaToGrammar.
class JsonSchemaEmbedder {
 public:
  JsonSchemaEmbedder(const nlohmann::ordered_json& document, Grammar* grammar,
                     const JsonSchemaOptions& options = {});
  ~JsonSchemaEmbedder();
  JsonSchemaEmbedder(const JsonSchemaEmbedder&) = delete;
  JsonSchemaEmbedder& operator=(const JsonSchemaEmbedder&) = delete;

  // JSON text of a value valid against `schema`; `pointer` names it in errors.
  absl::StatusOr<Expr> Value(const nlohmann::ordered_json& schema, const std::string& pointer);
  // The unescaped content of a string valid against the string schema `schema` (type string
  // with minLength / maxLength / pattern / format, or a string const / enum): no quotes, every
  // code point allowed raw. Error: InvalidArgument naming a keyword that cannot be enforced.
  absl::StatusOr<Expr> RawString(const nlohmann::ordered_json& schema, const std::string& pointer);
  // The target of a local `$ref`. Error: InvalidArgument when it does not resolve.
  absl::StatusOr<const nlohmann::ordered_json*> Resolve(const std::string& ref,
                                                        const std::string& pointer);

 private:
  const nlohmann::ordered_json& document_;
  std::unique_ptr<internal::SchemaCompiler> compiler_;
};

// True for keywords that carry no constraint (title, description, ..., x-*).
bool IsAnnotationKeyword(const std::string& keyword);

}  // namespace deepinfer::structured

#endif  // DEEPINFER_STRUCTURED_JSON_SCHEMA_H_
