// PyJson: a JSON value that serialises byte-exactly like Python's
// `json.dumps(value, ensure_ascii=False)` after `json.loads(text)` (shared/spec/protocol.md §1.7).
//
// The DeepSeek reference encoders render tool schemas, non-string tool-call arguments and the
// response format with Python's json module; prompt bytes (and so prefix-cache keys) only match
// when every detail is copied:
//   * separators ", " and ": ", no indentation, input key order kept (objects are ordered lists);
//   * strings: raw UTF-8 (no \uXXXX for non-ASCII), `/` not escaped, `"` and `\` escaped,
//     \n \r \t \b \f as two-character escapes, other bytes < 0x20 as \u00XX (lower-case hex);
//   * numbers: a literal with a fraction or exponent is a Python float and prints as repr(float)
//     (`1.0`, `1e-07`, `1.5e+300`, `100000.0` for `1e5`, `Infinity` on overflow); any other
//     literal is a Python int and prints with its exact digits (no 64-bit limit; `-0` -> `0`);
//   * true/false/null.
// Parsing is strict RFC 8259 JSON (no NaN/Infinity literals, no comments, no trailing commas),
// nesting at most `max_depth` (default 128, the recipe's limit), valid UTF-8 only (lone
// surrogate escapes are rejected). A repeated object key behaves as in a Python dict: it keeps
// the first key's slot and takes the last value.
//
// Thread-safety: a PyJson is a plain value; const methods may be called concurrently.
#ifndef DEEPINFER_PROTOCOL_PY_JSON_H_
#define DEEPINFER_PROTOCOL_PY_JSON_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace deepinfer::protocol {

class PyJson {
 public:
  enum class Type { kNull, kBool, kInt, kFloat, kString, kArray, kObject };
  using Member = std::pair<std::string, PyJson>;

  PyJson() = default;  // null
  static PyJson Null() { return PyJson(); }
  static PyJson Bool(bool b);
  // `digits`: an optional '-' then decimal digits, e.g. "123456789012345678901234567890".
  static PyJson IntLiteral(std::string digits);
  static PyJson Int(int64_t v);
  static PyJson Float(double v);
  static PyJson String(std::string s);
  static PyJson Array(std::vector<PyJson> items = {});
  static PyJson Object(std::vector<Member> members = {});

  // Parses strict JSON text (see header comment). Errors: InvalidArgument naming the byte offset
  // and the problem ("invalid JSON at offset 12: expected ':'"); OutOfRange when nesting exceeds
  // `max_depth`.
  static absl::StatusOr<PyJson> Parse(std::string_view text, int max_depth = 128);

  // Converts a value parsed by nlohmann (use nlohmann::ordered_json so key order survives).
  // Integers keep their exact value; doubles become Python floats. Errors: InvalidArgument for
  // NaN/Inf, invalid UTF-8 in strings, or binary values; OutOfRange when nesting exceeds
  // `max_depth`.
  static absl::StatusOr<PyJson> FromNlohmann(const nlohmann::ordered_json& j, int max_depth = 128);

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kInt || type_ == Type::kFloat; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  bool bool_value() const { return bool_; }
  // kString: the string; kInt: the digit literal; kFloat: empty.
  const std::string& string_value() const { return str_; }
  double float_value() const { return num_; }
  const std::vector<PyJson>& array_items() const { return items_; }
  std::vector<PyJson>& mutable_array_items() { return items_; }
  // Object members in input order.
  const std::vector<Member>& object_members() const { return members_; }
  std::vector<Member>& mutable_object_members() { return members_; }
  // First member named `key`, or nullptr.
  const PyJson* Find(std::string_view key) const;

  // json.dumps(self, ensure_ascii=False).
  std::string Dump() const;
  void DumpTo(std::string* out) const;

  // Maximum nesting depth (a scalar has depth 0, `[]` depth 1).
  int Depth() const;

 private:
  Type type_ = Type::kNull;
  bool bool_ = false;
  double num_ = 0.0;
  std::string str_;
  std::vector<PyJson> items_;
  std::vector<Member> members_;
};

// Appends json.dumps(s, ensure_ascii=False) for a string (quotes included). `s` must be valid
// UTF-8 (bytes are copied as they are; escaping is per byte, so a valid input gives valid output).
void AppendPyJsonString(std::string_view s, std::string* out);
std::string PyJsonString(std::string_view s);

// Python repr() of a float: shortest round-trip digits; fixed notation when the decimal exponent
// is in [-4, 16), with ".0" appended to integral values; otherwise d.ddde±XX. Infinity/NaN print
// as json.dumps does: `Infinity`, `-Infinity`, `NaN`.
std::string PyFloatRepr(double v);

// True when `s` is well-formed UTF-8 (no surrogates, no overlongs, max U+10FFFF).
bool IsValidUtf8(std::string_view s);

}  // namespace deepinfer::protocol

#endif  // DEEPINFER_PROTOCOL_PY_JSON_H_
