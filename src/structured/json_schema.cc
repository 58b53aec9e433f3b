#include "structured/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "structured/regex.h"
#include "structured/text_util.h"

namespace deepinfer::structured {
namespace {

using Json = nlohmann::ordered_json;  // keeps "properties" in schema order

// Keywords that carry no constraint.
const std::set<std::string>& AnnotationKeywords() {
  static const auto* s = new std::set<std::string>{"title",
                                                   "description",
                                                   "default",
                                                   "examples",
                                                   "$schema",
                                                   "$id",
                                                   "$comment",
                                                   "deprecated",
                                                   "readOnly",
                                                   "writeOnly",
                                                   "$defs",
                                                   "definitions",
                                                   "$anchor",
                                                   "contentMediaType",
                                                   "contentEncoding",
                                                   "discriminator",
                                                   "nullable_annotation",
                                                   "x-order"};
  return *s;
}

// Keywords this compiler enforces (all others are rejected).
const std::set<std::string>& SupportedKeywords() {
  static const auto* s = new std::set<std::string>{"type",
                                                   "properties",
                                                   "required",
                                                   "additionalProperties",
                                                   "patternProperties",
                                                   "enum",
                                                   "const",
                                                   "anyOf",
                                                   "oneOf",
                                                   "allOf",
                                                   "$ref",
                                                   "items",
                                                   "prefixItems",
                                                   "minItems",
                                                   "maxItems",
                                                   "minLength",
                                                   "maxLength",
                                                   "pattern",
                                                   "format",
                                                   "minimum",
                                                   "maximum",
                                                   "exclusiveMinimum",
                                                   "exclusiveMaximum",
                                                   "minProperties",
                                                   "maxProperties"};
  return *s;
}

// A regex for a supported string `format` (the value, unescaped; JSON-safe characters only).
const std::map<std::string, std::string>& Formats() {
  static const auto* m = new std::map<std::string, std::string>{
      // Days per month (February up to 28: a leap day is never generated, so every generated
      // date is a real one, as validators such as ajv-formats check).
      {"date",
       R"([0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8])))"},
      {"time",
       R"(([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9]))"},
      {"date-time",
       R"([0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9]))"},
      {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
      {"email",
       R"([a-zA-Z0-9]([a-zA-Z0-9._+-]{0,30}[a-zA-Z0-9])?@[a-zA-Z0-9]([a-zA-Z0-9-]{0,20}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,20}[a-zA-Z0-9])?){0,3}\.[a-zA-Z]{2,6})"},
      {"ipv4",
       R"(((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))"},
      {"hostname",
       R"([a-zA-Z0-9]([a-zA-Z0-9-]{0,20}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,20}[a-zA-Z0-9])?){0,4})"},
  };
  return *m;
}

// Rewrites a regex expression over string *values* into one over JSON string *contents*:
// `"` and `\` become escape sequences, control characters are dropped from classes (the JSON
// text would need \uXXXX forms for them).
Expr JsonEscapeExpr(const Expr& e) {
  using K = Expr::Kind;
  switch (e.kind) {
    case K::kLiteral: {
      std::string out;
      for (char c : e.text) {
        if (c == '"') {
          out += "\\\"";
        } else if (c == '\\') {
          out += "\\\\";
        } else if (c == '\n') {
          out += "\\n";
        } else if (c == '\t') {
          out += "\\t";
        } else if (c == '\r') {
          out += "\\r";
        } else if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out += c;
        }
      }
      return Expr::Literal(out);
    }
    case K::kCharClass: {
      std::vector<CodePointRange> safe;
      bool has_quote = false, has_backslash = false;
      for (const auto& r : e.ranges) {
        for (uint32_t lo = r.lo; lo <= r.hi;) {
          // Split out 0x00-0x1F, '"' and '\\'.
          if (lo < 0x20) {
            lo = 0x20;
            continue;
          }
          if (lo == '"') {
            has_quote = true;
            ++lo;
            continue;
          }
          if (lo == '\\') {
            has_backslash = true;
            ++lo;
            continue;
          }
          uint32_t hi = r.hi;
          if (lo < '"' && hi >= '"')
            hi = '"' - 1;
          else if (lo < '\\' && hi >= '\\')
            hi = '\\' - 1;
          safe.push_back({lo, hi});
          if (hi == kMaxCodePoint) break;
          lo = hi + 1;
        }
      }
      std::vector<Expr> alts;
      if (!safe.empty()) alts.push_back(Expr::CharClass(std::move(safe)));
      if (has_quote) alts.push_back(Expr::Literal("\\\""));
      if (has_backslash) alts.push_back(Expr::Literal("\\\\"));
      if (alts.empty()) return Expr::CharClass({});
      return Expr::Choice(std::move(alts));
    }
    default: {
      Expr out = e;
      for (auto& c : out.children) c = JsonEscapeExpr(c);
      return out;
    }
  }
}

// Decimal digit-pattern for all integers in [lo, hi] with lo, hi >= 0 (classic range-to-regex).
Expr NonNegativeRange(uint64_t lo, uint64_t hi);

Expr DigitRange(char a, char b) {
  return Expr::CharClass({{static_cast<uint32_t>(a), static_cast<uint32_t>(b)}});
}

// Same number of digits: lo and hi as strings of equal length.
Expr SameLengthRange(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return Expr::Empty();
  if (lo == hi) return Expr::Literal(lo);
  if (lo[0] == hi[0]) {
    return Expr::Seq({Expr::Literal(lo.substr(0, 1)), SameLengthRange(lo.substr(1), hi.substr(1))});
  }
  const size_t rest = lo.size() - 1;
  const std::string zeros(rest, '0'), nines(rest, '9');
  std::vector<Expr> alts;
  // lo[0] followed by [lo.rest, 99..9]
  alts.push_back(Expr::Seq({Expr::Literal(lo.substr(0, 1)), SameLengthRange(lo.substr(1), nines)}));
  if (hi[0] - lo[0] > 1) {
    alts.push_back(Expr::Seq(
        {DigitRange(lo[0] + 1, hi[0] - 1), Expr::Repeat(DigitRange('0', '9'), rest, rest)}));
  }
  alts.push_back(Expr::Seq({Expr::Literal(hi.substr(0, 1)), SameLengthRange(zeros, hi.substr(1))}));
  return Expr::Choice(std::move(alts));
}

Expr NonNegativeRange(uint64_t lo, uint64_t hi) {
  std::vector<Expr> alts;
  std::string a = std::to_string(lo), b = std::to_string(hi);
  for (size_t len = a.size(); len <= b.size(); ++len) {
    std::string from = (len == a.size()) ? a : "1" + std::string(len - 1, '0');
    std::string to = (len == b.size()) ? b : std::string(len, '9');
    if (len == 1 && from == "0") {
      // single digit range including 0
      alts.push_back(DigitRange(from[0], to[0]));
    } else {
      alts.push_back(SameLengthRange(from, to));
    }
  }
  return Expr::Choice(std::move(alts));
}

// All integers >= lo (lo >= 0), canonical decimal without leading zeros.
Expr AtLeast(uint64_t lo) {
  std::string a = std::to_string(lo);
  std::vector<Expr> alts;
  alts.push_back(NonNegativeRange(lo, std::stoull(std::string(a.size(), '9'))));
  alts.push_back(
      Expr::Seq({DigitRange('1', '9'), Expr::Repeat(DigitRange('0', '9'), a.size(), kUnbounded)}));
  return Expr::Choice(std::move(alts));
}

}  // namespace

namespace internal {

class SchemaCompiler {
 public:
  // `external`: compile into that grammar (JsonSchemaEmbedder) instead of an own one.
  SchemaCompiler(const Json& root, const JsonSchemaOptions& options, Grammar* external = nullptr)
      : root_(root), opt_(options), g_(external != nullptr ? *external : own_) {}

  absl::StatusOr<Grammar> Compile() {
    int root_rule = g_.AddRule("root");
    ref_rules_["#"] = root_rule;
    ASSIGN_OR_RETURN(Expr body, CompileSchema(root_, "#"));
    g_.SetBody(root_rule, Expr::Seq({Ws(), std::move(body), Ws()}));
    g_.set_root(root_rule);
    return std::move(g_);
  }

  Grammar& grammar() { return g_; }

  Expr Ws() {
    if (opt_.whitespace == WhitespacePolicy::kCompact) return Expr::Empty();
    return Expr::Repeat(Expr::CharClass({{' ', ' '}, {'\t', '\t'}, {'\n', '\n'}}), 0,
                        opt_.max_whitespace);
  }
  Expr Lit(const std::string& s) { return Expr::Literal(s); }
  Expr Tok(const std::string& s) { return Expr::Seq({Lit(s), Ws()}); }

  int SharedRule(const std::string& name, const std::function<Expr()>& make) {
    int id = g_.FindRule(name);
    if (id >= 0) return id;
    id = g_.AddRule(name);
    g_.SetBody(id, make());
    return id;
  }

  Expr StringChar() {
    return Expr::Ref(SharedRule("json_char", [&] {
      return Expr::Choice(
          {Expr::CharClass({{'"', '"'}, {'\\', '\\'}, {0, 0x1F}}, /*negated=*/true),
           Expr::Seq(
               {Lit("\\"),
                Expr::Choice(
                    {Expr::CharClass({{'"', '"'},
                                      {'\\', '\\'},
                                      {'/', '/'},
                                      {'b', 'b'},
                                      {'f', 'f'},
                                      {'n', 'n'},
                                      {'r', 'r'},
                                      {'t', 't'}}),
                     Expr::Seq({Lit("u"),
                                Expr::Repeat(Expr::CharClass({{'0', '9'}, {'a', 'f'}, {'A', 'F'}}),
                                             4, 4)})})})});
    }));
  }
  Expr AnyString() {
    return Expr::Ref(SharedRule("json_string", [&] {
      return Expr::Seq({Lit("\""), Expr::Star(StringChar()), Lit("\"")});
    }));
  }
  Expr IntegerExpr() {
    return Expr::Ref(SharedRule("json_integer", [&] {
      return Expr::Seq({Expr::Optional(Lit("-")),
                        Expr::Choice({Lit("0"), Expr::Seq({DigitRange('1', '9'),
                                                           Expr::Star(DigitRange('0', '9'))})})});
    }));
  }
  Expr Fraction() {
    return Expr::Seq(
        {Expr::Optional(Expr::Seq({Lit("."), Expr::Plus(DigitRange('0', '9'))})),
         Expr::Optional(Expr::Seq({Expr::CharClass({{'e', 'e'}, {'E', 'E'}}),
                                   Expr::Optional(Expr::CharClass({{'+', '+'}, {'-', '-'}})),
                                   Expr::Plus(DigitRange('0', '9'))}))});
  }
  Expr NumberExpr() {
    return Expr::Ref(SharedRule("json_number", [&] {
      return Expr::Seq({IntegerExpr(), Fraction()});
    }));
  }
  Expr AnyValue() {
    int id = g_.FindRule("json_value");
    if (id >= 0) return Expr::Ref(id);
    id = g_.AddRule("json_value");
    int obj = g_.AddRule("json_object");
    int arr = g_.AddRule("json_array");
    g_.SetBody(id, Expr::Choice({Expr::Ref(obj), Expr::Ref(arr), AnyString(), NumberExpr(),
                                 Lit("true"), Lit("false"), Lit("null")}));
    Expr member = Expr::Seq({AnyString(), Ws(), Tok(":"), Expr::Ref(id), Ws()});
    g_.SetBody(
        obj,
        Expr::Seq({Tok("{"),
                   Expr::Optional(Expr::Seq({member, Expr::Star(Expr::Seq({Tok(","), member}))})),
                   Lit("}")}));
    Expr item = Expr::Seq({Expr::Ref(id), Ws()});
    g_.SetBody(
        arr, Expr::Seq({Tok("["),
                        Expr::Optional(Expr::Seq({item, Expr::Star(Expr::Seq({Tok(","), item}))})),
                        Lit("]")}));
    return Expr::Ref(id);
  }
  Expr AnyObject() {
    AnyValue();
    return Expr::Ref(g_.FindRule("json_object"));
  }

  absl::Status Unsupported(const std::string& pointer, const std::string& keyword,
                           const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("JSON schema keyword '", keyword, "' at ",
                                                   pointer, " cannot be enforced: ", why));
  }

  absl::StatusOr<const Json*> Resolve(const std::string& ref, const std::string& pointer) {
    if (ref.empty() || ref[0] != '#') {
      return absl::InvalidArgumentError(absl::StrCat(
          "$ref '", ref, "' at ", pointer, ": only local references (#/...) are supported"));
    }
    const Json* cur = &root_;
    std::string path = ref.substr(1);
    size_t pos = 0;
    while (pos < path.size()) {
      if (path[pos] != '/') return absl::InvalidArgumentError(absl::StrCat("bad $ref '", ref, "'"));
      size_t next = path.find('/', pos + 1);
      std::string token =
          path.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1);
      // JSON pointer unescaping.
      for (size_t i; (i = token.find("~1")) != std::string::npos;) token.replace(i, 2, "/");
      for (size_t i; (i = token.find("~0")) != std::string::npos;) token.replace(i, 2, "~");
      if (cur->is_object() && cur->contains(token)) {
        cur = &(*cur)[token];
      } else if (cur->is_array()) {
        size_t idx = 0;
        try {
          idx = std::stoul(token);
        } catch (...) {
          return absl::InvalidArgumentError(absl::StrCat("$ref '", ref, "' does not resolve"));
        }
        if (idx >= cur->size())
          return absl::InvalidArgumentError(absl::StrCat("$ref '", ref, "' does not resolve"));
        cur = &(*cur)[idx];
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("$ref '", ref, "' at ", pointer, " does not resolve"));
      }
      pos = next == std::string::npos ? path.size() : next;
    }
    return cur;
  }

  absl::StatusOr<Expr> CompileSchema(const Json& s, const std::string& pointer) {
    // Recursion through $ref becomes grammar rules, so the compiler's own recursion follows the
    // document's nesting; the guard turns any unforeseen cycle into an error, never a stack
    // overflow.
    if (depth_ >= kMaxCompileDepth) {
      return Unsupported(pointer, "$ref",
                         absl::StrCat("schema nesting (after resolving references) deeper than ",
                                      kMaxCompileDepth));
    }
    ++depth_;
    absl::StatusOr<Expr> e = CompileSchemaAtDepth(s, pointer);
    --depth_;
    return e;
  }

  absl::StatusOr<Expr> CompileSchemaAtDepth(const Json& s, const std::string& pointer) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return AnyValue();
      return absl::InvalidArgumentError(
          absl::StrCat("schema at ", pointer, " is `false`: nothing matches"));
    }
    if (!s.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("schema at ", pointer, " must be an object or boolean"));
    }
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      if (AnnotationKeywords().count(k) || SupportedKeywords().count(k)) continue;
      if (k.rfind("x-", 0) == 0) continue;  // vendor extensions are annotations
      return Unsupported(pointer, k, "not supported by the grammar compiler");
    }
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string())
        return absl::InvalidArgumentError(absl::StrCat("$ref at ", pointer, " must be a string"));
      std::string ref = s["$ref"].get<std::string>();
      for (auto it = s.begin(); it != s.end(); ++it) {
        if (it.key() != "$ref" && !AnnotationKeywords().count(it.key())) {
          return Unsupported(pointer, it.key(), "keywords beside $ref are not supported");
        }
      }
      auto found = ref_rules_.find(ref);
      if (found != ref_rules_.end()) return Expr::Ref(found->second);
      ASSIGN_OR_RETURN(const Json* target, Resolve(ref, pointer));
      std::string name = "ref";
      size_t slash = ref.rfind('/');
      if (slash != std::string::npos) name = "def_" + ref.substr(slash + 1);
      std::string clean;
      for (char c : name)
        clean += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
      int id = g_.AddUniqueRule(clean);
      ref_rules_[ref] = id;
      ASSIGN_OR_RETURN(Expr body, CompileSchema(*target, ref));
      g_.SetBody(id, std::move(body));
      return Expr::Ref(id);
    }
    if (s.contains("const")) return Lit(s["const"].dump());
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("enum at ", pointer, " must be a non-empty array"));
      }
      std::vector<Expr> alts;
      for (const auto& v : s["enum"]) alts.push_back(Lit(v.dump()));
      return Expr::Choice(std::move(alts));
    }
    if (s.contains("allOf")) return CompileAllOf(s, pointer);
    for (const char* kw : {"anyOf", "oneOf"}) {
      if (!s.contains(kw)) continue;
      const Json& arr = s[kw];
      if (!arr.is_array() || arr.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(kw, " at ", pointer, " must be a non-empty array"));
      }
      // Sibling constraints would have to apply to every branch: merge them in.
      std::vector<Expr> alts;
      for (size_t i = 0; i < arr.size(); ++i) {
        Json branch = arr[i];
        if (branch.is_object()) {
          for (auto it = s.begin(); it != s.end(); ++it) {
            if (it.key() == kw || AnnotationKeywords().count(it.key())) continue;
            if (branch.contains(it.key())) {
              return Unsupported(pointer, it.key(),
                                 absl::StrCat("also set inside ", kw, " branch ", i));
            }
            branch[it.key()] = it.value();
          }
        }
        ASSIGN_OR_RETURN(Expr e, CompileSchema(branch, absl::StrCat(pointer, "/", kw, "/", i)));
        alts.push_back(std::move(e));
      }
      return Expr::Choice(std::move(alts));
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      if (s["type"].is_string()) {
        types.push_back(s["type"].get<std::string>());
      } else if (s["type"].is_array()) {
        for (const auto& t : s["type"]) {
          if (!t.is_string())
            return absl::InvalidArgumentError(
                absl::StrCat("type at ", pointer, " must be strings"));
          types.push_back(t.get<std::string>());
        }
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("type at ", pointer, " must be a string or array"));
      }
    } else {
      // Infer from keywords; otherwise any value.
      if (s.contains("properties") || s.contains("additionalProperties") ||
          s.contains("patternProperties") || s.contains("required")) {
        types.push_back("object");
      } else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") ||
                 s.contains("maxItems")) {
        types.push_back("array");
      } else if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern") ||
                 s.contains("format")) {
        types.push_back("string");
      } else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
                 s.contains("exclusiveMaximum")) {
        types.push_back("number");
      } else {
        return AnyValue();
      }
    }
    std::vector<Expr> alts;
    for (const auto& t : types) {
      absl::StatusOr<Expr> e;
      if (t == "string")
        e = CompileString(s, pointer);
      else if (t == "integer")
        e = CompileInteger(s, pointer);
      else if (t == "number")
        e = CompileNumber(s, pointer);
      else if (t == "boolean")
        e = Expr::Choice({Lit("true"), Lit("false")});
      else if (t == "null")
        e = Lit("null");
      else if (t == "object")
        e = CompileObject(s, pointer);
      else if (t == "array")
        e = CompileArray(s, pointer);
      else
        return absl::InvalidArgumentError(absl::StrCat("unknown type '", t, "' at ", pointer));
      if (!e.ok()) return e.status();
      alts.push_back(std::move(*e));
    }
    return Expr::Choice(std::move(alts));
  }

  absl::StatusOr<Expr> CompileAllOf(const Json& s, const std::string& pointer) {
    const Json& arr = s["allOf"];
    if (!arr.is_array() || arr.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("allOf at ", pointer, " must be a non-empty array"));
    }
    // Merge object-shaped branches (after resolving $ref) into one schema.
    std::vector<std::string> merged_refs;
    Json merged = s;
    merged.erase("allOf");
    for (size_t i = 0; i < arr.size(); ++i) {
      const Json* b = &arr[i];
      std::string bp = absl::StrCat(pointer, "/allOf/", i);
      if (b->is_object() && b->contains("$ref")) {
        if (!(*b)["$ref"].is_string()) {
          return absl::InvalidArgumentError(absl::StrCat("$ref at ", bp, " must be a string"));
        }
        const std::string ref = (*b)["$ref"].get<std::string>();
        // Merging inlines the target; a target that contains this allOf again would inline
        // itself forever (a tree whose child is `allOf: [{$ref: "#"}]`).
        if (std::find(allof_refs_.begin(), allof_refs_.end(), ref) != allof_refs_.end()) {
          return Unsupported(bp, "allOf",
                             absl::StrCat("$ref '", ref,
                                          "' refers back to a schema that encloses this allOf "
                                          "(recursion through allOf is not supported; use $ref "
                                          "without allOf)"));
        }
        ASSIGN_OR_RETURN(b, Resolve(ref, bp));
        merged_refs.push_back(ref);
      }
      if (!b->is_object()) return Unsupported(bp, "allOf", "branches must be schema objects");
      for (auto it = b->begin(); it != b->end(); ++it) {
        const std::string& k = it.key();
        if (AnnotationKeywords().count(k)) continue;
        if (k == "properties") {
          for (auto p = it.value().begin(); p != it.value().end(); ++p) {
            if (merged["properties"].contains(p.key())) {
              return Unsupported(bp, "allOf",
                                 absl::StrCat("property '", p.key(), "' defined twice"));
            }
            merged["properties"][p.key()] = p.value();
          }
        } else if (k == "required") {
          for (const auto& r : it.value()) merged["required"].push_back(r);
        } else if (k == "type") {
          if (merged.contains("type") && merged["type"] != it.value()) {
            return Unsupported(bp, "allOf", "branches with different types");
          }
          merged["type"] = it.value();
        } else if (merged.contains(k)) {
          return Unsupported(bp, k, "set in several allOf branches");
        } else {
          merged[k] = it.value();
        }
      }
    }
    const size_t outer = allof_refs_.size();
    allof_refs_.insert(allof_refs_.end(), merged_refs.begin(), merged_refs.end());
    absl::StatusOr<Expr> e = CompileSchema(merged, pointer);
    allof_refs_.resize(outer);
    return e;
  }

  absl::StatusOr<int> GetCount(const Json& s, const char* key, const std::string& pointer,
                               int def) {
    if (!s.contains(key)) return def;
    const Json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, " at ", pointer, " must be a non-negative integer"));
    }
    if (v.get<int64_t>() > 2000)
      return Unsupported(pointer, key, "bounds above 2000 are not supported");
    return static_cast<int>(v.get<int64_t>());
  }

  // The content constraints of a string schema: code-point length bounds, and the pattern (or
  // the pattern of its `format`) that the unquoted content must match. Errors: InvalidArgument
  // for malformed keywords or combinations we cannot enforce together.
  struct StringBounds {
    int min_len = 0;
    int max_len = kUnbounded;
    std::string regex;  // empty: no pattern
  };
  absl::StatusOr<StringBounds> ReadStringBounds(const Json& s, const std::string& pointer) {
    StringBounds b;
    ASSIGN_OR_RETURN(b.min_len, GetCount(s, "minLength", pointer, 0));
    ASSIGN_OR_RETURN(b.max_len, GetCount(s, "maxLength", pointer, kUnbounded));
    if (b.max_len != kUnbounded && b.max_len < b.min_len) {
      return Unsupported(pointer, "maxLength", "smaller than minLength");
    }
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string())
        return absl::InvalidArgumentError(
            absl::StrCat("pattern at ", pointer, " must be a string"));
      b.regex = s["pattern"].get<std::string>();
    }
    if (s.contains("format")) {
      if (!s["format"].is_string())
        return absl::InvalidArgumentError(absl::StrCat("format at ", pointer, " must be a string"));
      auto f = Formats().find(s["format"].get<std::string>());
      if (f == Formats().end()) {
        return Unsupported(pointer, "format",
                           absl::StrCat("format '", s["format"].get<std::string>(),
                                        "' is not supported (supported: date, time, date-time, "
                                        "uuid, email, ipv4, hostname)"));
      }
      if (!b.regex.empty()) return Unsupported(pointer, "format", "combined with pattern");
      b.regex = "^" + f->second + "$";
    }
    if (!b.regex.empty() && (b.min_len != 0 || b.max_len != kUnbounded)) {
      return Unsupported(pointer, "minLength", "length bounds combined with pattern/format");
    }
    return b;
  }

  absl::StatusOr<Expr> CompileString(const Json& s, const std::string& pointer) {
    ASSIGN_OR_RETURN(StringBounds b, ReadStringBounds(s, pointer));
    const int min_len = b.min_len, max_len = b.max_len;
    const std::string& regex = b.regex;
    if (!regex.empty()) {
      ASSIGN_OR_RETURN(Expr e, RegexToExpr(regex, RegexAnchoring::kSearch, &g_));
      return Expr::Seq({Lit("\""), JsonEscapeExpr(e), Lit("\"")});
    }
    if (min_len == 0 && max_len == kUnbounded) return AnyString();
    return Expr::Seq({Lit("\""), Expr::Repeat(StringChar(), min_len, max_len), Lit("\"")});
  }

  absl::StatusOr<std::optional<double>> Bound(const Json& s, const char* key,
                                              const std::string& pointer) {
    if (!s.contains(key)) return std::optional<double>();
    if (!s[key].is_number())
      return absl::InvalidArgumentError(absl::StrCat(key, " at ", pointer, " must be a number"));
    return std::optional<double>(s[key].get<double>());
  }

  absl::StatusOr<Expr> CompileInteger(const Json& s, const std::string& pointer) {
    ASSIGN_OR_RETURN(auto min, Bound(s, "minimum", pointer));
    ASSIGN_OR_RETURN(auto max, Bound(s, "maximum", pointer));
    ASSIGN_OR_RETURN(auto xmin, Bound(s, "exclusiveMinimum", pointer));
    ASSIGN_OR_RETURN(auto xmax, Bound(s, "exclusiveMaximum", pointer));
    std::optional<int64_t> lo, hi;
    if (min) lo = static_cast<int64_t>(std::ceil(*min));
    if (xmin) lo = std::max(lo.value_or(INT64_MIN), static_cast<int64_t>(std::floor(*xmin)) + 1);
    if (max) hi = static_cast<int64_t>(std::floor(*max));
    if (xmax) hi = std::min(hi.value_or(INT64_MAX), static_cast<int64_t>(std::ceil(*xmax)) - 1);
    if (!lo && !hi) return IntegerExpr();
    if (lo && hi && *lo > *hi) return Unsupported(pointer, "minimum", "empty integer range");
    const int64_t kLimit = 1'000'000'000'000'000LL;
    if ((lo && std::llabs(*lo) > kLimit) || (hi && std::llabs(*hi) > kLimit)) {
      return Unsupported(pointer, "minimum", "integer bounds beyond 1e15");
    }
    std::vector<Expr> alts;
    // Non-negative part.
    if (!hi || *hi >= 0) {
      uint64_t a = lo ? static_cast<uint64_t>(std::max<int64_t>(*lo, 0)) : 0;
      alts.push_back(hi ? NonNegativeRange(a, *hi) : AtLeast(a));
    }
    // Negative part: -n with n in [max(1,-hi), -lo].
    if (!lo || *lo < 0) {
      uint64_t a = hi ? static_cast<uint64_t>(std::max<int64_t>(-*hi, 1)) : 1;
      alts.push_back(Expr::Seq({Lit("-"), lo ? NonNegativeRange(a, -*lo) : AtLeast(a)}));
    }
    return Expr::Choice(std::move(alts));
  }

  absl::StatusOr<Expr> CompileNumber(const Json& s, const std::string& pointer) {
    ASSIGN_OR_RETURN(auto min, Bound(s, "minimum", pointer));
    ASSIGN_OR_RETURN(auto max, Bound(s, "maximum", pointer));
    for (const char* k : {"exclusiveMinimum", "exclusiveMaximum"}) {
      if (s.contains(k)) return Unsupported(pointer, k, "not enforceable on type number");
    }
    if (max) return Unsupported(pointer, "maximum", "not enforceable on type number (use integer)");
    if (min) {
      if (*min != 0.0)
        return Unsupported(pointer, "minimum", "only minimum 0 is enforceable on type number");
      // Non-negative: no leading minus.
      return Expr::Seq({Expr::Choice({Lit("0"), Expr::Seq({DigitRange('1', '9'),
                                                           Expr::Star(DigitRange('0', '9'))})}),
                        Fraction()});
    }
    return NumberExpr();
  }

  absl::StatusOr<Expr> CompileArray(const Json& s, const std::string& pointer) {
    ASSIGN_OR_RETURN(int min_items, GetCount(s, "minItems", pointer, 0));
    ASSIGN_OR_RETURN(int max_items, GetCount(s, "maxItems", pointer, kUnbounded));
    if (max_items != kUnbounded && max_items < min_items)
      return Unsupported(pointer, "maxItems", "smaller than minItems");
    std::vector<Expr> prefix;
    const Json* prefix_arr = nullptr;
    const Json* items = nullptr;
    if (s.contains("prefixItems")) prefix_arr = &s["prefixItems"];
    if (s.contains("items")) {
      if (s["items"].is_array()) {
        if (prefix_arr)
          return Unsupported(pointer, "items", "array form together with prefixItems");
        prefix_arr = &s["items"];
      } else {
        items = &s["items"];
      }
    }
    if (prefix_arr) {
      if (!prefix_arr->is_array())
        return absl::InvalidArgumentError(
            absl::StrCat("prefixItems at ", pointer, " must be an array"));
      for (size_t i = 0; i < prefix_arr->size(); ++i) {
        ASSIGN_OR_RETURN(
            Expr e, CompileSchema((*prefix_arr)[i], absl::StrCat(pointer, "/prefixItems/", i)));
        prefix.push_back(Expr::Seq({std::move(e), Ws()}));
      }
    }
    Expr item;
    bool items_allowed = true;
    if (items) {
      if (items->is_boolean() && !items->get<bool>()) {
        items_allowed = false;
      } else {
        ASSIGN_OR_RETURN(item, CompileSchema(*items, pointer + "/items"));
        item = Expr::Seq({std::move(item), Ws()});
      }
    } else {
      item = Expr::Seq({AnyValue(), Ws()});
    }
    const int n_prefix = static_cast<int>(prefix.size());
    // Prefix items are emitted in order; all n_prefix must appear if min_items demands it.
    // Language: k prefix items (k <= n_prefix) then, if k == n_prefix, r extra items.
    std::vector<Expr> alts;
    auto comma_join = [&](std::vector<Expr> parts) {
      std::vector<Expr> seq;
      for (size_t i = 0; i < parts.size(); ++i) {
        if (i) seq.push_back(Tok(","));
        seq.push_back(std::move(parts[i]));
      }
      return Expr::Seq(std::move(seq));
    };
    for (int k = 0; k <= n_prefix; ++k) {
      if (max_items != kUnbounded && k > max_items) break;
      std::vector<Expr> parts(prefix.begin(), prefix.begin() + k);
      if (k < n_prefix) {
        if (k >= min_items) alts.push_back(comma_join(parts));
        continue;
      }
      // k == n_prefix: extra items.
      int extra_min = std::max(0, min_items - n_prefix);
      int extra_max = max_items == kUnbounded ? kUnbounded : max_items - n_prefix;
      if (!items_allowed) {
        if (extra_min == 0) alts.push_back(comma_join(parts));
        continue;
      }
      if (extra_max == 0) {
        alts.push_back(comma_join(parts));
        continue;
      }
      // extra items: r in [extra_min, extra_max]
      Expr extra_nonempty =
          Expr::Seq({item, Expr::Repeat(Expr::Seq({Tok(","), item}), std::max(0, extra_min - 1),
                                        extra_max == kUnbounded ? kUnbounded : extra_max - 1)});
      if (parts.empty()) {
        alts.push_back(extra_min == 0 ? Expr::Optional(extra_nonempty) : extra_nonempty);
      } else {
        Expr tail = Expr::Seq({Tok(","), extra_nonempty});
        alts.push_back(
            Expr::Seq({comma_join(parts), extra_min == 0 ? Expr::Optional(tail) : tail}));
      }
    }
    if (alts.empty())
      return Unsupported(pointer, "minItems", "no array length satisfies the bounds");
    return Expr::Seq({Tok("["), Expr::Choice(std::move(alts)), Lit("]")});
  }

  absl::StatusOr<Expr> CompileObject(const Json& s, const std::string& pointer) {
    std::vector<std::string> names;
    std::vector<Expr> values;
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array())
        return absl::InvalidArgumentError(
            absl::StrCat("required at ", pointer, " must be an array"));
      for (const auto& r : s["required"]) {
        if (!r.is_string())
          return absl::InvalidArgumentError(
              absl::StrCat("required at ", pointer, " must list strings"));
        required.insert(r.get<std::string>());
      }
    }
    if (s.contains("properties")) {
      if (!s["properties"].is_object())
        return absl::InvalidArgumentError(
            absl::StrCat("properties at ", pointer, " must be an object"));
      for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it) {
        ASSIGN_OR_RETURN(Expr v, CompileSchema(it.value(), pointer + "/properties/" + it.key()));
        names.push_back(it.key());
        values.push_back(std::move(v));
      }
    }
    for (const auto& r : required) {
      if (std::find(names.begin(), names.end(), r) == names.end()) {
        // Required but not described: any value.
        names.push_back(r);
        values.push_back(AnyValue());
      }
    }
    const bool has_pattern = s.contains("patternProperties");
    const Json* additional =
        s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
    const bool additional_schema = additional && additional->is_object();
    if (names.empty() &&
        (has_pattern || additional_schema || (!additional && !s.contains("properties")))) {
      return CompileMap(s, pointer);
    }
    if (has_pattern) return Unsupported(pointer, "patternProperties", "together with properties");
    if (s.contains("minProperties") || s.contains("maxProperties")) {
      return Unsupported(pointer, "minProperties", "together with properties");
    }
    const int n = static_cast<int>(names.size());
    std::vector<bool> req(n);
    for (int i = 0; i < n; ++i) req[i] = required.count(names[i]) > 0;
    std::vector<Expr> props;
    for (int i = 0; i < n; ++i) {
      props.push_back(
          Expr::Seq({Lit(Json(names[i]).dump()), Ws(), Tok(":"), std::move(values[i]), Ws()}));
    }
    // Linear in the number of properties (see OptionalSequence): listing, for every property,
    // each later one that may follow made 8 optional union-typed properties take seconds and
    // 40 more than 30 s to compile.
    Expr members = OptionalSequence(g_, std::move(props), req, Tok(","), "obj");
    return Expr::Seq({Tok("{"), std::move(members), Lit("}")});
  }

  absl::StatusOr<Expr> CompileMap(const Json& s, const std::string& pointer) {
    ASSIGN_OR_RETURN(int min_p, GetCount(s, "minProperties", pointer, 0));
    ASSIGN_OR_RETURN(int max_p, GetCount(s, "maxProperties", pointer, kUnbounded));
    std::vector<Expr> members;
    if (s.contains("patternProperties")) {
      const Json& pp = s["patternProperties"];
      if (!pp.is_object())
        return absl::InvalidArgumentError(
            absl::StrCat("patternProperties at ", pointer, " must be an object"));
      if (pp.size() != 1) return Unsupported(pointer, "patternProperties", "more than one pattern");
      auto it = pp.begin();
      ASSIGN_OR_RETURN(Expr key, RegexToExpr(it.key(), RegexAnchoring::kSearch, &g_));
      ASSIGN_OR_RETURN(Expr v,
                       CompileSchema(it.value(), pointer + "/patternProperties/" + it.key()));
      if (s.contains("additionalProperties") &&
          !(s["additionalProperties"].is_boolean() && !s["additionalProperties"].get<bool>())) {
        return Unsupported(pointer, "additionalProperties",
                           "together with patternProperties (use false)");
      }
      members.push_back(
          Expr::Seq({Lit("\""), JsonEscapeExpr(key), Lit("\""), Ws(), Tok(":"), v, Ws()}));
    } else {
      Expr v;
      if (s.contains("additionalProperties") && s["additionalProperties"].is_object()) {
        ASSIGN_OR_RETURN(
            v, CompileSchema(s["additionalProperties"], pointer + "/additionalProperties"));
      } else {
        v = AnyValue();
      }
      members.push_back(Expr::Seq({AnyString(), Ws(), Tok(":"), v, Ws()}));
    }
    Expr member = members[0];
    if (max_p == 0) return Expr::Seq({Tok("{"), Lit("}")});
    Expr nonempty =
        Expr::Seq({member, Expr::Repeat(Expr::Seq({Tok(","), member}), std::max(0, min_p - 1),
                                        max_p == kUnbounded ? kUnbounded : max_p - 1)});
    return Expr::Seq({Tok("{"), min_p == 0 ? Expr::Optional(nonempty) : nonempty, Lit("}")});
  }

  // The unescaped text of a string valid against string schema `s` (JsonSchemaEmbedder).
  absl::StatusOr<Expr> RawString(const Json& s, const std::string& pointer) {
    if (!s.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat("schema at ", pointer, " must be an object"));
    }
    static const auto* kStringKeywords = new std::set<std::string>{
        "type", "enum", "const", "minLength", "maxLength", "pattern", "format"};
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      if (AnnotationKeywords().count(k) || kStringKeywords->count(k) || k.rfind("x-", 0) == 0) {
        continue;
      }
      return Unsupported(pointer, k, "not supported on a string parameter");
    }
    if (s.contains("const")) {
      if (!s["const"].is_string()) return Unsupported(pointer, "const", "not a string");
      return Lit(s["const"].get<std::string>());
    }
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("enum at ", pointer, " must be a non-empty array"));
      }
      std::vector<Expr> alts;
      for (const auto& v : s["enum"]) {
        if (!v.is_string()) return Unsupported(pointer, "enum", "not all strings");
        alts.push_back(Lit(v.get<std::string>()));
      }
      return Expr::Choice(std::move(alts));
    }
    ASSIGN_OR_RETURN(StringBounds b, ReadStringBounds(s, pointer));
    const int min_len = b.min_len, max_len = b.max_len;
    const std::string& regex = b.regex;
    if (!regex.empty()) {
      return RegexToExpr(regex, RegexAnchoring::kSearch, &g_);
    }
    return Expr::Repeat(Expr::AnyChar(), min_len, max_len);
  }

 private:
  const Json& root_;
  JsonSchemaOptions opt_;
  Grammar own_;
  Grammar& g_;
  std::map<std::string, int> ref_rules_;
  static constexpr int kMaxCompileDepth = 256;
  int depth_ = 0;                        // CompileSchema calls on the stack
  std::vector<std::string> allof_refs_;  // $refs being merged by enclosing allOfs
};

}  // namespace internal

using internal::SchemaCompiler;

// ---------------------------------------------------------------------------------------------

JsonSchemaEmbedder::JsonSchemaEmbedder(const nlohmann::ordered_json& document, Grammar* grammar,
                                       const JsonSchemaOptions& options)
    : document_(document),
      compiler_(std::make_unique<SchemaCompiler>(document_, options, grammar)) {}

JsonSchemaEmbedder::~JsonSchemaEmbedder() = default;

absl::StatusOr<Expr> JsonSchemaEmbedder::Value(const nlohmann::ordered_json& schema,
                                               const std::string& pointer) {
  try {
    return compiler_->CompileSchema(schema, pointer);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("JSON schema at ", pointer, " could not be compiled: ", e.what()));
  }
}

absl::StatusOr<Expr> JsonSchemaEmbedder::RawString(const nlohmann::ordered_json& schema,
                                                   const std::string& pointer) {
  try {
    return compiler_->RawString(schema, pointer);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("JSON schema at ", pointer, " could not be compiled: ", e.what()));
  }
}

absl::StatusOr<const nlohmann::ordered_json*> JsonSchemaEmbedder::Resolve(
    const std::string& ref, const std::string& pointer) {
  try {
    return compiler_->Resolve(ref, pointer);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("$ref '", ref, "' could not be resolved: ", e.what()));
  }
}

bool IsAnnotationKeyword(const std::string& keyword) {
  return AnnotationKeywords().count(keyword) > 0 || keyword.rfind("x-", 0) == 0;
}

absl::StatusOr<Grammar> JsonSchemaToGrammar(std::string_view schema_json,
                                            const JsonSchemaOptions& options) {
  Json schema = Json::parse(schema_json.begin(), schema_json.end(), nullptr, false);
  if (schema.is_discarded()) return absl::InvalidArgumentError("JSON schema is not valid JSON");
  try {
    SchemaCompiler c(schema, options);
    return c.Compile();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("JSON schema could not be compiled: ", e.what()));
  }
}

Grammar AnyJsonGrammar(bool object_only, const JsonSchemaOptions& options) {
  Json dummy = Json::object();
  SchemaCompiler c(dummy, options);
  Grammar& g = c.grammar();
  int root = g.AddRule("root");
  Expr body = object_only ? c.AnyObject() : c.AnyValue();
  g.SetBody(root, Expr::Seq({c.Ws(), std::move(body), c.Ws()}));
  g.set_root(root);
  return std::move(g);
}

}  // namespace deepinfer::structured
