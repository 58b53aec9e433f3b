// Python-compatible JSON (see py_json.h; shared/spec/protocol.md §1.7).
#include "protocol/py_json.h"

#include "common/utf8.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <system_error>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/strings.h"

namespace deepinfer::protocol {

PyJson PyJson::Bool(bool b) {
  PyJson j;
  j.type_ = Type::kBool;
  j.bool_ = b;
  return j;
}

PyJson PyJson::IntLiteral(std::string digits) {
  PyJson j;
  j.type_ = Type::kInt;
  // Python's int() drops the sign of zero ("-0" -> 0).
  if (digits.size() > 1 && digits[0] == '-' &&
      digits.find_first_not_of('0', 1) == std::string::npos) {
    digits = "0";
  }
  j.str_ = std::move(digits);
  return j;
}

PyJson PyJson::Int(int64_t v) { return IntLiteral(std::to_string(v)); }

PyJson PyJson::Float(double v) {
  PyJson j;
  j.type_ = Type::kFloat;
  j.num_ = v;
  return j;
}

PyJson PyJson::String(std::string s) {
  PyJson j;
  j.type_ = Type::kString;
  j.str_ = std::move(s);
  return j;
}

PyJson PyJson::Array(std::vector<PyJson> items) {
  PyJson j;
  j.type_ = Type::kArray;
  j.items_ = std::move(items);
  return j;
}

PyJson PyJson::Object(std::vector<Member> members) {
  PyJson j;
  j.type_ = Type::kObject;
  j.members_ = std::move(members);
  return j;
}

const PyJson* PyJson::Find(std::string_view key) const {
  for (const Member& m : members_) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}

int PyJson::Depth() const {
  int d = 0;
  if (type_ == Type::kArray) {
    for (const PyJson& i : items_) d = std::max(d, i.Depth());
    return d + 1;
  }
  if (type_ == Type::kObject) {
    for (const Member& m : members_) d = std::max(d, m.second.Depth());
    return d + 1;
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// UTF-8

namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 if it is not valid.
size_t ValidUtf8SeqLen(std::string_view s, size_t i) {
  const unsigned char c = s[i];
  if (c < 0x80) return 1;
  size_t len;
  uint32_t cp;
  if ((c & 0xE0) == 0xC0) {
    len = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    const unsigned char cc = s[i + k];
    if ((cc & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3F);
  }
  if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)) return 0;
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  AppendUtf8CodePoint(cp, out);
}

}  // namespace

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = ValidUtf8SeqLen(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Serialisation

void AppendPyJsonString(std::string_view s, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      default:
        if (c < 0x20) {
          out->append("\\u00");
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 0xF]);
        } else {
          out->push_back(ch);
        }
    }
  }
  out->push_back('"');
}

std::string PyJsonString(std::string_view s) {
  std::string out;
  AppendPyJsonString(s, &out);
  return out;
}

std::string PyFloatRepr(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  // Shortest round-trip digits in scientific form: "d[.ddd]e[+-]XX".
  const auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string_view sci(buf, res.ptr - buf);
  std::string out;
  if (!sci.empty() && sci[0] == '-') {
    out.push_back('-');
    sci.remove_prefix(1);
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e)) {
    if (c != '.') digits.push_back(c);
  }
  const int exp10 = std::atoi(std::string(sci.substr(e + 1)).c_str());
  const int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  const int n = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out.append("0.");
      out.append(static_cast<size_t>(-decpt), '0');
      out.append(digits);
    } else if (decpt < n) {
      out.append(digits, 0, decpt);
      out.push_back('.');
      out.append(digits, decpt);
    } else {
      out.append(digits);
      out.append(static_cast<size_t>(decpt - n), '0');
      out.append(".0");
    }
  } else {
    out.push_back(digits[0]);
    if (n > 1) {
      out.push_back('.');
      out.append(digits, 1);
    }
    out.push_back('e');
    out.push_back(exp10 < 0 ? '-' : '+');
    const int a = exp10 < 0 ? -exp10 : exp10;
    if (a < 10) out.push_back('0');
    out.append(std::to_string(a));
  }
  return out;
}

void PyJson::DumpTo(std::string* out) const {
  switch (type_) {
    case Type::kNull:
      out->append("null");
      return;
    case Type::kBool:
      out->append(bool_ ? "true" : "false");
      return;
    case Type::kInt:
      out->append(str_);
      return;
    case Type::kFloat:
      out->append(PyFloatRepr(num_));
      return;
    case Type::kString:
      AppendPyJsonString(str_, out);
      return;
    case Type::kArray: {
      out->push_back('[');
      for (size_t i = 0; i < items_.size(); ++i) {
        if (i > 0) out->append(", ");
        items_[i].DumpTo(out);
      }
      out->push_back(']');
      return;
    }
    case Type::kObject: {
      out->push_back('{');
      for (size_t i = 0; i < members_.size(); ++i) {
        if (i > 0) out->append(", ");
        AppendPyJsonString(members_[i].first, out);
        out->append(": ");
        members_[i].second.DumpTo(out);
      }
      out->push_back('}');
      return;
    }
  }
}

std::string PyJson::Dump() const {
  std::string out;
  DumpTo(&out);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Parsing

namespace {

class Parser {
 public:
  Parser(std::string_view text, int max_depth) : t_(text), max_depth_(max_depth) {}

  absl::StatusOr<PyJson> ParseDocument() {
    SkipWs();
    PyJson v;
    absl::Status st = ParseValue(0, &v);
    if (!st.ok()) return st;
    SkipWs();
    if (pos_ != t_.size()) return Error("unexpected trailing data");
    return v;
  }

 private:
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid JSON at offset ", pos_, ": ", AbslView(what)));
  }

  void SkipWs() {
    while (pos_ < t_.size() &&
           (t_[pos_] == ' ' || t_[pos_] == '\t' || t_[pos_] == '\n' || t_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool Consume(std::string_view lit) {
    if (t_.substr(pos_, lit.size()) == lit) {
      pos_ += lit.size();
      return true;
    }
    return false;
  }

  absl::Status ParseValue(int depth, PyJson* out) {
    if (pos_ >= t_.size()) return Error("unexpected end of input");
    const char c = t_[pos_];
    if (c == '{' || c == '[') {
      if (depth + 1 > max_depth_) {
        return absl::OutOfRangeError(
            absl::StrCat("JSON nesting deeper than ", max_depth_, " at offset ", pos_));
      }
      return c == '{' ? ParseObject(depth + 1, out) : ParseArray(depth + 1, out);
    }
    if (c == '"') {
      std::string s;
      absl::Status st = ParseString(&s);
      if (!st.ok()) return st;
      *out = PyJson::String(std::move(s));
      return absl::OkStatus();
    }
    if (Consume("true")) {
      *out = PyJson::Bool(true);
      return absl::OkStatus();
    }
    if (Consume("false")) {
      *out = PyJson::Bool(false);
      return absl::OkStatus();
    }
    if (Consume("null")) {
      *out = PyJson::Null();
      return absl::OkStatus();
    }
    if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber(out);
    return Error("expected a value");
  }

  absl::Status ParseNumber(PyJson* out) {
    const size_t start = pos_;
    if (t_[pos_] == '-') ++pos_;
    if (pos_ >= t_.size()) return Error("bad number");
    if (t_[pos_] == '0') {
      ++pos_;
    } else if (t_[pos_] >= '1' && t_[pos_] <= '9') {
      while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9') ++pos_;
    } else {
      return Error("bad number");
    }
    bool is_float = false;
    if (pos_ < t_.size() && t_[pos_] == '.') {
      is_float = true;
      ++pos_;
      const size_t d = pos_;
      while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9') ++pos_;
      if (pos_ == d) return Error("bad number: digits expected after '.'");
    }
    if (pos_ < t_.size() && (t_[pos_] == 'e' || t_[pos_] == 'E')) {
      is_float = true;
      ++pos_;
      if (pos_ < t_.size() && (t_[pos_] == '+' || t_[pos_] == '-')) ++pos_;
      const size_t d = pos_;
      while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9') ++pos_;
      if (pos_ == d) return Error("bad number: digits expected in exponent");
    }
    const std::string lit(t_.substr(start, pos_ - start));
    if (!is_float) {
      *out = PyJson::IntLiteral(lit);
    } else {
      // strtod rounds correctly and gives ±HUGE_VAL on overflow / 0 on underflow, as Python does.
      *out = PyJson::Float(std::strtod(lit.c_str(), nullptr));
    }
    return absl::OkStatus();
  }

  absl::Status ParseHex4(uint32_t* v) {
    if (pos_ + 4 > t_.size()) return Error("bad \\u escape");
    uint32_t r = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = t_[pos_ + k];
      r <<= 4;
      if (h >= '0' && h <= '9') {
        r |= h - '0';
      } else if (h >= 'a' && h <= 'f') {
        r |= h - 'a' + 10;
      } else if (h >= 'A' && h <= 'F') {
        r |= h - 'A' + 10;
      } else {
        return Error("bad \\u escape");
      }
    }
    pos_ += 4;
    *v = r;
    return absl::OkStatus();
  }

  absl::Status ParseString(std::string* s) {
    ++pos_;  // opening quote
    while (true) {
      if (pos_ >= t_.size()) return Error("unterminated string");
      const unsigned char c = t_[pos_];
      if (c == '"') {
        ++pos_;
        return absl::OkStatus();
      }
      if (c < 0x20) return Error("control character in string");
      if (c == '\\') {
        ++pos_;
        if (pos_ >= t_.size()) return Error("unterminated string");
        const char e = t_[pos_++];
        switch (e) {
          case '"':
            s->push_back('"');
            break;
          case '\\':
            s->push_back('\\');
            break;
          case '/':
            s->push_back('/');
            break;
          case 'b':
            s->push_back('\b');
            break;
          case 'f':
            s->push_back('\f');
            break;
          case 'n':
            s->push_back('\n');
            break;
          case 'r':
            s->push_back('\r');
            break;
          case 't':
            s->push_back('\t');
            break;
          case 'u': {
            uint32_t cp = 0;
            absl::Status st = ParseHex4(&cp);
            if (!st.ok()) return st;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
              uint32_t lo = 0;
              if (!Consume("\\u")) return Error("unpaired surrogate in \\u escape");
              st = ParseHex4(&lo);
              if (!st.ok()) return st;
              if (lo < 0xDC00 || lo > 0xDFFF) return Error("unpaired surrogate in \\u escape");
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
              return Error("unpaired surrogate in \\u escape");
            }
            AppendUtf8(cp, s);
            break;
          }
          default:
            --pos_;
            return Error("bad escape");
        }
        continue;
      }
      const size_t n = ValidUtf8SeqLen(t_, pos_);
      if (n == 0) return Error("invalid UTF-8 in string");
      s->append(t_.substr(pos_, n));
      pos_ += n;
    }
  }

  absl::Status ParseArray(int depth, PyJson* out) {
    ++pos_;
    std::vector<PyJson> items;
    SkipWs();
    if (pos_ < t_.size() && t_[pos_] == ']') {
      ++pos_;
      *out = PyJson::Array();
      return absl::OkStatus();
    }
    while (true) {
      SkipWs();
      PyJson v;
      absl::Status st = ParseValue(depth, &v);
      if (!st.ok()) return st;
      items.push_back(std::move(v));
      SkipWs();
      if (pos_ >= t_.size()) return Error("unterminated array");
      if (t_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (t_[pos_] == ']') {
        ++pos_;
        *out = PyJson::Array(std::move(items));
        return absl::OkStatus();
      }
      return Error("expected ',' or ']'");
    }
  }

  absl::Status ParseObject(int depth, PyJson* out) {
    ++pos_;
    std::vector<PyJson::Member> members;
    // Python's dict: a repeated key keeps its first slot and takes the last value.
    absl::flat_hash_map<std::string, size_t> index;
    SkipWs();
    if (pos_ < t_.size() && t_[pos_] == '}') {
      ++pos_;
      *out = PyJson::Object();
      return absl::OkStatus();
    }
    while (true) {
      SkipWs();
      if (pos_ >= t_.size() || t_[pos_] != '"') return Error("expected a string key");
      std::string key;
      absl::Status st = ParseString(&key);
      if (!st.ok()) return st;
      SkipWs();
      if (pos_ >= t_.size() || t_[pos_] != ':') return Error("expected ':'");
      ++pos_;
      SkipWs();
      PyJson v;
      st = ParseValue(depth, &v);
      if (!st.ok()) return st;
      auto [it, inserted] = index.try_emplace(key, members.size());
      if (inserted) {
        members.emplace_back(std::move(key), std::move(v));
      } else {
        members[it->second].second = std::move(v);
      }
      SkipWs();
      if (pos_ >= t_.size()) return Error("unterminated object");
      if (t_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (t_[pos_] == '}') {
        ++pos_;
        *out = PyJson::Object(std::move(members));
        return absl::OkStatus();
      }
      return Error("expected ',' or '}'");
    }
  }

  std::string_view t_;
  size_t pos_ = 0;
  int max_depth_;
};

absl::StatusOr<PyJson> FromNlohmannImpl(const nlohmann::ordered_json& j, int depth, int max_depth) {
  using V = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case V::null:
    case V::discarded:
      return PyJson::Null();
    case V::boolean:
      return PyJson::Bool(j.get<bool>());
    case V::number_integer:
      return PyJson::Int(j.get<int64_t>());
    case V::number_unsigned:
      return PyJson::IntLiteral(std::to_string(j.get<uint64_t>()));
    case V::number_float: {
      const double d = j.get<double>();
      if (!std::isfinite(d)) return absl::InvalidArgumentError("JSON number is not finite");
      return PyJson::Float(d);
    }
    case V::string: {
      const std::string& s = j.get_ref<const std::string&>();
      if (!IsValidUtf8(s)) return absl::InvalidArgumentError("JSON string is not valid UTF-8");
      return PyJson::String(s);
    }
    case V::array: {
      if (depth + 1 > max_depth) {
        return absl::OutOfRangeError(absl::StrCat("JSON nesting deeper than ", max_depth));
      }
      std::vector<PyJson> items;
      items.reserve(j.size());
      for (const auto& e : j) {
        absl::StatusOr<PyJson> v = FromNlohmannImpl(e, depth + 1, max_depth);
        if (!v.ok()) return v.status();
        items.push_back(*std::move(v));
      }
      return PyJson::Array(std::move(items));
    }
    case V::object: {
      if (depth + 1 > max_depth) {
        return absl::OutOfRangeError(absl::StrCat("JSON nesting deeper than ", max_depth));
      }
      std::vector<PyJson::Member> members;
      members.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (!IsValidUtf8(it.key())) {
          return absl::InvalidArgumentError("JSON key is not valid UTF-8");
        }
        absl::StatusOr<PyJson> v = FromNlohmannImpl(it.value(), depth + 1, max_depth);
        if (!v.ok()) return v.status();
        members.emplace_back(it.key(), *std::move(v));
      }
      return PyJson::Object(std::move(members));
    }
    case V::binary:
      return absl::InvalidArgumentError("binary JSON values are not supported");
  }
  return absl::InvalidArgumentError("unknown JSON value type");
}

}  // namespace

absl::StatusOr<PyJson> PyJson::Parse(std::string_view text, int max_depth) {
  return Parser(text, max_depth).ParseDocument();
}

absl::StatusOr<PyJson> PyJson::FromNlohmann(const nlohmann::ordered_json& j, int max_depth) {
  return FromNlohmannImpl(j, 0, max_depth);
}

}  // namespace deepinfer::protocol
