// Grammar for DeepSeek DSML tool calls (issue #11: `tool_choice` required / named), so that the
// tool-call block a model emits under the mask always parses into valid calls whose arguments
// satisfy each tool's JSON schema.
//
// The block follows the encoder's rendering and the output parser's grammar exactly
// (shared/spec/protocol.md §2.1, src/protocol/output_parser.h), with D = the `｜DSML｜` control
// token (matched by id: ControlTokenBytes in matcher.h), B / I / P = block / invoke / parameter
// tag names (V4 `tool_calls` / `invoke` / `parameter`, V4.1 ` calls` / ` invoke` / ` parameter`):
//
//   block  ::= "\n\n<" D B ">\n" calls "\n</" D B ">"          (then only EOS)
//   calls  ::= call ("\n" call)*         (parallel)   |   call   (single)
//   call   ::= "<" D I " name=\"" NAME "\">\n" params "\n</" D I ">"
//   params ::= param ("\n" param)*  — the schema's properties in schema order; required ones
//              mandatory, optional ones may be skipped; nothing beyond `properties`/`required`
//   param  ::= "<" D P " name=\"" KEY "\" string=\"true\">" RAW "</" D P ">"    (string schemas)
//            | "<" D P " name=\"" KEY "\" string=\"false\">" JSON "</" D P ">"  (all others)
//
// DSML passes string values raw (string="true": the text up to the closing tag, JSON-escaped by
// the parser) and every other value as JSON text (string="false"), so a property whose schema is
// a string schema (type string with minLength / maxLength / pattern / format, or a string const /
// enum) is constrained as raw text (JsonSchemaEmbedder::RawString), every other one as compact
// JSON (JsonSchemaEmbedder::Value); an unconstrained property ({} / true) allows both forms.
// The parameters schema itself must be an object schema using only type "object", properties,
// required, additionalProperties, $defs / definitions and annotations; any other keyword at any
// depth that cannot be enforced is an InvalidArgument error naming the tool and the keyword.
#ifndef DEEPINFER_STRUCTURED_TOOL_CALL_GRAMMAR_H_
#define DEEPINFER_STRUCTURED_TOOL_CALL_GRAMMAR_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "structured/grammar.h"

namespace deepinfer::structured {

// DSML spellings (spec §2.1). Defaults: DeepSeek V4.
struct DsmlSyntax {
  std::string token = "｜DSML｜";  // content of the control token
  std::string block = "tool_calls";
  std::string invoke = "invoke";
  std::string parameter = "parameter";

  static DsmlSyntax V4() { return {}; }
  static DsmlSyntax V41() { return {"｜DSML｜", " calls", " invoke", " parameter"}; }
};

struct ToolSchema {
  std::string name;
  std::string parameters_json = "{}";  // the tool's JSON schema (`parameters` / `input_schema`)
};

// Where the grammar begins, i.e. how far the prompt already prefilled the block (the prompt
// encoder's ParserStart).
enum class ToolCallStart {
  kAnswer,    // nothing prefilled: the grammar starts with "\n\n<" D B ">\n"
  kInBlock,   // the prompt ends with the block opener: the grammar starts at the first call
  kInInvoke,  // the prompt ends with `<D I name="forced_tool">\n`: it starts at the parameters
};

struct ToolCallGrammarOptions {
  std::vector<ToolSchema> tools;
  // "" = any of `tools` (tool_choice required); else exactly one call of this tool (named).
  std::string forced_tool;
  // tool_choice required: one or more calls (true) or exactly one (false).
  bool parallel = true;
  ToolCallStart start = ToolCallStart::kAnswer;
  DsmlSyntax syntax;
};

// Builds the grammar. Errors (InvalidArgument): no tools, forced_tool not among them, kInInvoke
// without forced_tool, a tool or parameter name containing `"`, a parameters schema that is not
// an object schema, or a schema keyword that cannot be enforced (named with its tool and JSON
// pointer, e.g. "tool 'f' parameters: JSON schema keyword 'uniqueItems' at
// #/properties/x cannot be enforced: ...").
absl::StatusOr<Grammar> ToolCallGrammar(const ToolCallGrammarOptions& options);

// Canonical JSON text of `options` (ConstraintSpec::Kind::kToolCalls text and cache key) and
// back. Error: InvalidArgument for malformed text.
std::string ToolCallGrammarOptionsToJson(const ToolCallGrammarOptions& options);
absl::StatusOr<ToolCallGrammarOptions> ToolCallGrammarOptionsFromJson(std::string_view text);

}  // namespace deepinfer::structured

#endif  // DEEPINFER_STRUCTURED_TOOL_CALL_GRAMMAR_H_
