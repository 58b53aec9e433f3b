#include "structured/tool_call_grammar.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/strings.h"
#include "nlohmann/json.hpp"
#include "structured/json_schema.h"
#include "structured/matcher.h"

namespace deepinfer::structured {
namespace {

using Json = nlohmann::ordered_json;
using OJson = nlohmann::ordered_json;

// Root keywords of a parameters schema that the DSML grammar enforces (annotations aside).
const std::set<std::string>& RootKeywords() {
  static const auto* s =
      new std::set<std::string>{"type", "properties", "required", "additionalProperties"};
  return *s;
}

bool TypeIs(const Json& s, const char* type) {
  if (!s.contains("type")) return false;
  const Json& t = s["type"];
  if (t.is_string()) return t.get<std::string>() == type;
  return t.is_array() && t.size() == 1 && t[0].is_string() && t[0].get<std::string>() == type;
}

// A schema whose values are exactly strings: written raw with string="true".
bool IsStringSchema(const Json& s) {
  if (!s.is_object()) return false;
  for (const char* k : {"anyOf", "oneOf", "allOf", "$ref"}) {
    if (s.contains(k)) return false;
  }
  if (s.contains("const")) return s["const"].is_string();
  if (s.contains("enum")) {
    if (!s["enum"].is_array() || s["enum"].empty()) return false;
    for (const Json& v : s["enum"]) {
      if (!v.is_string()) return false;
    }
    return true;
  }
  if (s.contains("type")) return TypeIs(s, "string");
  return s.contains("minLength") || s.contains("maxLength") || s.contains("pattern") ||
         s.contains("format");
}

// A schema that constrains nothing ({}, true, or annotations only).
bool IsAnySchema(const Json& s) {
  if (s.is_boolean()) return s.get<bool>();
  if (!s.is_object()) return false;
  for (auto it = s.begin(); it != s.end(); ++it) {
    if (!IsAnnotationKeyword(it.key())) return false;
  }
  return true;
}

class Builder {
 public:
  explicit Builder(const ToolCallGrammarOptions& o)
      : o_(o), d_(Expr::Literal(ControlTokenBytes(o.syntax.token))) {}

  absl::StatusOr<Grammar> Build() {
    if (o_.tools.empty()) return absl::InvalidArgumentError("tool-call grammar without tools");
    const ToolSchema* forced = nullptr;
    std::set<std::string> names;
    for (const ToolSchema& t : o_.tools) {
      if (t.name.empty() || t.name.find('"') != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("tool name '", t.name, "' cannot be written in a DSML tool call"));
      }
      if (!names.insert(t.name).second) {
        return absl::InvalidArgumentError(absl::StrCat("duplicate tool name '", t.name, "'"));
      }
      if (t.name == o_.forced_tool) forced = &t;
    }
    if (!o_.forced_tool.empty() && forced == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("tool_choice names function '", o_.forced_tool, "', which is not in tools"));
    }
    if (o_.start == ToolCallStart::kInInvoke && forced == nullptr) {
      return absl::InvalidArgumentError("a prefilled invoke needs the forced tool's name");
    }
    const int root = g_.AddRule("root");
    g_.set_root(root);
    const DsmlSyntax& x = o_.syntax;
    Expr block_close = Expr::Seq({Lit("\n</"), d_, Lit(x.block + ">")});
    Expr body;
    if (o_.start == ToolCallStart::kInInvoke) {
      ASSIGN_OR_RETURN(Expr params, Params(*forced));
      body = Expr::Seq(
          {std::move(params), Lit("\n</"), d_, Lit(x.invoke + ">"), std::move(block_close)});
    } else {
      std::vector<Expr> call_alts;
      for (const ToolSchema& t : o_.tools) {
        if (forced != nullptr && &t != forced) continue;
        ASSIGN_OR_RETURN(Expr params, Params(t));
        const int rule = g_.AddUniqueRule("call");
        g_.SetBody(
            rule, Expr::Seq({Lit("<"), d_, Lit(absl::StrCat(x.invoke, " name=\"", t.name, "\">\n")),
                             std::move(params), Lit("\n</"), d_, Lit(x.invoke + ">")}));
        call_alts.push_back(Expr::Ref(rule));
      }
      const int call = g_.AddUniqueRule("any_call");
      g_.SetBody(call, Expr::Choice(std::move(call_alts)));
      Expr calls = Expr::Ref(call);
      if (forced == nullptr && o_.parallel) {
        calls = Expr::Seq({std::move(calls), Expr::Star(Expr::Seq({Lit("\n"), Expr::Ref(call)}))});
      }
      std::vector<Expr> seq;
      if (o_.start == ToolCallStart::kAnswer) {
        seq.push_back(Expr::Seq({Lit("\n\n<"), d_, Lit(x.block + ">\n")}));
      }
      seq.push_back(std::move(calls));
      seq.push_back(std::move(block_close));
      body = Expr::Seq(std::move(seq));
    }
    g_.SetBody(root, std::move(body));
    return std::move(g_);
  }

 private:
  Expr Lit(std::string s) { return Expr::Literal(std::move(s)); }

  // The parameter list of `tool` (joined by "\n"), see the header.
  absl::StatusOr<Expr> Params(const ToolSchema& tool) {
    const std::string where = absl::StrCat("tool '", tool.name, "' parameters: ");
    auto annotate = [&](const absl::Status& st) {
      return absl::Status(st.code(), absl::StrCat(where, st.message()));
    };
    OJson ordered = OJson::parse(tool.parameters_json, nullptr, false);
    Json doc = Json::parse(tool.parameters_json, nullptr, false);
    if (ordered.is_discarded() || doc.is_discarded()) {
      return absl::InvalidArgumentError(where + "not valid JSON");
    }
    if (!ordered.is_object()) {
      return absl::InvalidArgumentError(where + "the schema must be a JSON object");
    }
    for (auto it = ordered.begin(); it != ordered.end(); ++it) {
      const std::string& k = it.key();
      if (IsAnnotationKeyword(k) || RootKeywords().count(k)) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          where, "JSON schema keyword '", k,
          "' at # cannot be enforced: a tool call passes one DSML parameter per property "
          "(supported at the top level: type object, properties, required, "
          "additionalProperties)"));
    }
    if (doc.contains("type") && !TypeIs(doc, "object")) {
      return absl::InvalidArgumentError(
          absl::StrCat(where,
                       "JSON schema keyword 'type' at # cannot be enforced: tool arguments are an "
                       "object, the schema says ",
                       doc["type"].dump()));
    }
    std::vector<std::string> keys;
    std::vector<const Json*> schemas;
    static const Json kAny = Json::object();
    if (ordered.contains("properties")) {
      if (!ordered["properties"].is_object()) {
        return absl::InvalidArgumentError(where + "properties at # must be an object");
      }
      for (auto it = ordered["properties"].begin(); it != ordered["properties"].end(); ++it) {
        keys.push_back(it.key());
        schemas.push_back(&doc["properties"][it.key()]);
      }
    }
    std::set<std::string> required;
    if (doc.contains("required")) {
      if (!doc["required"].is_array()) {
        return absl::InvalidArgumentError(where + "required at # must be an array");
      }
      for (const Json& r : doc["required"]) {
        if (!r.is_string()) {
          return absl::InvalidArgumentError(where + "required at # must list strings");
        }
        required.insert(r.get<std::string>());
        if (std::find(keys.begin(), keys.end(), r.get<std::string>()) == keys.end()) {
          keys.push_back(r.get<std::string>());  // required but not described: any value
          schemas.push_back(&kAny);
        }
      }
    }
    JsonSchemaEmbedder embed(doc, &g_);
    std::vector<Expr> params;
    std::vector<bool> req;
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::string& key = keys[i];
      if (key.find('"') != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, "property name '", key, "' cannot be written in a DSML parameter tag"));
      }
      const std::string pointer = absl::StrCat("#/properties/", key);
      // Classify through a top-level $ref chain (the value expression resolves it itself).
      const Json* target = schemas[i];
      for (int hops = 0; hops < 32 && target->is_object() && target->contains("$ref") &&
                         (*target)["$ref"].is_string();
           ++hops) {
        absl::StatusOr<const Json*> r =
            embed.Resolve((*target)["$ref"].get<std::string>(), pointer);
        if (!r.ok()) return annotate(r.status());
        target = *r;
      }
      const std::string open = absl::StrCat(o_.syntax.parameter, " name=\"", key, "\" string=\"");
      std::vector<Expr> forms;
      if (IsStringSchema(*target) || IsAnySchema(*target)) {
        absl::StatusOr<Expr> raw = IsAnySchema(*target)
                                       ? absl::StatusOr<Expr>(Expr::Star(Expr::AnyChar()))
                                       : embed.RawString(*target, pointer);
        if (!raw.ok()) return annotate(raw.status());
        forms.push_back(Expr::Seq({Lit("true\">"), *std::move(raw)}));
      }
      if (!IsStringSchema(*target)) {
        absl::StatusOr<Expr> value = embed.Value(*schemas[i], pointer);
        if (!value.ok()) return annotate(value.status());
        forms.push_back(Expr::Seq({Lit("false\">"), *std::move(value)}));
      }
      params.push_back(Expr::Seq({Lit("<"), d_, Lit(open), Expr::Choice(std::move(forms)),
                                  Lit("</"), d_, Lit(o_.syntax.parameter + ">")}));
      req.push_back(required.count(key) > 0);
    }
    // Same construction as the JSON object rule: the parameters in schema order, separated by
    // "\n", a required one cannot be skipped; linear in the number of parameters.
    return OptionalSequence(g_, std::move(params), req, Lit("\n"), "param");
  }

  const ToolCallGrammarOptions& o_;
  Expr d_;
  Grammar g_;
};

const char* StartName(ToolCallStart s) {
  switch (s) {
    case ToolCallStart::kAnswer:
      return "answer";
    case ToolCallStart::kInBlock:
      return "block";
    case ToolCallStart::kInInvoke:
      return "invoke";
  }
  return "answer";
}

}  // namespace

absl::StatusOr<Grammar> ToolCallGrammar(const ToolCallGrammarOptions& options) {
  try {
    return Builder(options).Build();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("tool schemas could not be compiled: ", e.what()));
  }
}

std::string ToolCallGrammarOptionsToJson(const ToolCallGrammarOptions& o) {
  OJson tools = OJson::array();
  for (const ToolSchema& t : o.tools) {
    tools.push_back(OJson{{"name", t.name}, {"parameters", t.parameters_json}});
  }
  OJson j{{"tools", std::move(tools)},
          {"forced_tool", o.forced_tool},
          {"parallel", o.parallel},
          {"start", StartName(o.start)},
          {"syntax",
           OJson::array({o.syntax.token, o.syntax.block, o.syntax.invoke, o.syntax.parameter})}};
  return j.dump();
}

absl::StatusOr<ToolCallGrammarOptions> ToolCallGrammarOptionsFromJson(std::string_view text) {
  const Json j = Json::parse(text.begin(), text.end(), nullptr, false);
  auto bad = [] { return absl::InvalidArgumentError("malformed tool-call grammar options"); };
  if (j.is_discarded() || !j.is_object() || !j.contains("tools") || !j["tools"].is_array() ||
      !j.value("forced_tool", Json()).is_string() || !j.value("parallel", Json()).is_boolean() ||
      !j.value("start", Json()).is_string() || !j.value("syntax", Json()).is_array() ||
      j["syntax"].size() != 4) {
    return bad();
  }
  ToolCallGrammarOptions o;
  for (const Json& t : j["tools"]) {
    if (!t.is_object() || !t.value("name", Json()).is_string() ||
        !t.value("parameters", Json()).is_string()) {
      return bad();
    }
    o.tools.push_back({t["name"].get<std::string>(), t["parameters"].get<std::string>()});
  }
  o.forced_tool = j["forced_tool"].get<std::string>();
  o.parallel = j["parallel"].get<bool>();
  const std::string start = j["start"].get<std::string>();
  if (start == "answer") {
    o.start = ToolCallStart::kAnswer;
  } else if (start == "block") {
    o.start = ToolCallStart::kInBlock;
  } else if (start == "invoke") {
    o.start = ToolCallStart::kInInvoke;
  } else {
    return bad();
  }
  for (const Json& s : j["syntax"]) {
    if (!s.is_string()) return bad();
  }
  o.syntax = {j["syntax"][0].get<std::string>(), j["syntax"][1].get<std::string>(),
              j["syntax"][2].get<std::string>(), j["syntax"][3].get<std::string>()};
  return o;
}

}  // namespace deepinfer::structured
