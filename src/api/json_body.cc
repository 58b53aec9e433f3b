#include "api/json_body.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "api/errors.h"
#include "common/clock.h"

namespace deepinfer::api {
namespace {

using Json = nlohmann::ordered_json;

// Objects up to this many keys find duplicates by scanning; larger ones build a hash index.
constexpr size_t kScanLimit = 16;
// Tokens between two clock reads.
constexpr int64_t kTokensPerCheck = 4096;

// nlohmann's json_sax_dom_parser, with duplicate detection through a per-object hash index.
class LinearDomSax {
 public:
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  LinearDomSax(Json* root, int64_t deadline_ns) : root_(root), deadline_ns_(deadline_ns) {}

  bool null() { return Put(Json(nullptr)); }
  bool boolean(bool v) { return Put(Json(v)); }
  bool number_integer(number_integer_t v) { return Put(Json(v)); }
  bool number_unsigned(number_unsigned_t v) { return Put(Json(v)); }
  bool number_float(number_float_t v, const string_t&) { return Put(Json(v)); }
  bool string(string_t& v) { return Put(Json(std::move(v))); }
  bool binary(binary_t&) { return false; }  // not produced by the JSON format
  bool start_object(std::size_t) {
    if (!Put(Json::object())) return false;
    stack_.push_back({last_, {}});
    return true;
  }
  bool key(string_t& k) {
    Frame& f = stack_.back();
    Json::object_t& obj = *f.value->get_ptr<Json::object_t*>();
    size_t index = obj.size();
    if (obj.size() < kScanLimit && f.index.empty()) {
      for (size_t i = 0; i < obj.size(); ++i) {
        if ((obj.begin() + i)->first == k) index = i;
      }
    } else {
      if (f.index.empty()) {
        for (size_t i = 0; i < obj.size(); ++i) f.index.emplace((obj.begin() + i)->first, i);
      }
      auto [it, inserted] = f.index.try_emplace(k, obj.size());
      index = it->second;
    }
    if (index == obj.size()) obj.emplace_back(std::move(k), nullptr);
    target_ = &(obj.begin() + index)->second;
    return Tick();
  }
  bool end_object() {
    stack_.pop_back();
    return Tick();
  }
  bool start_array(std::size_t) {
    if (!Put(Json::array())) return false;
    stack_.push_back({last_, {}});
    return true;
  }
  bool end_array() {
    stack_.pop_back();
    return Tick();
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception&) {
    error_position_ = position;
    return false;
  }

  bool timed_out() const { return timed_out_; }
  size_t error_position() const { return error_position_; }

 private:
  struct Frame {
    Json* value;
    absl::flat_hash_map<std::string, size_t> index;  // key -> position, once the object is large
  };

  bool Put(Json v) {
    if (stack_.empty()) {
      *root_ = std::move(v);
      last_ = root_;
    } else if (stack_.back().value->is_array()) {
      Json::array_t& arr = *stack_.back().value->get_ptr<Json::array_t*>();
      arr.push_back(std::move(v));
      last_ = &arr.back();
    } else {
      *target_ = std::move(v);
      last_ = target_;
    }
    return Tick();
  }
  bool Tick() {
    if (++tokens_ % kTokensPerCheck != 0) return true;
    if (MonotonicNanos() <= deadline_ns_) return true;
    timed_out_ = true;
    return false;
  }

  Json* root_;
  const int64_t deadline_ns_;
  std::vector<Frame> stack_;
  Json* target_ = nullptr;  // the value slot of the last key
  Json* last_ = nullptr;    // the value just stored
  int64_t tokens_ = 0;
  bool timed_out_ = false;
  size_t error_position_ = 0;
};

}  // namespace

absl::StatusOr<nlohmann::ordered_json> ParseJsonLinear(std::string_view text, int64_t deadline_ns) {
  if (deadline_ns == 0) deadline_ns = MonotonicNanos() + kJsonParseBudgetMs * 1000000;
  Json root;
  LinearDomSax sax(&root, deadline_ns);
  const bool ok = Json::sax_parse(text.begin(), text.end(), &sax,
                                  nlohmann::detail::input_format_t::json, /*strict=*/true);
  if (sax.timed_out()) {
    return WithErrorCode(
        absl::InvalidArgumentError(
            absl::StrCat("The request body took longer than ", kJsonParseBudgetMs,
                         " ms to parse and was rejected; send a smaller or simpler JSON body.")),
        "request_too_complex");
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("not valid JSON (syntax error at byte ", sax.error_position(), ")"));
  }
  return root;
}

}  // namespace deepinfer::api
