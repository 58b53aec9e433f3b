#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/thread_pool.h"
#include "nlohmann/json.hpp"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace deepinfer {
namespace tokenizer_internal {

namespace {

using Json = nlohmann::json;

// GPT-2's pre-tokenization regex, used by the ByteLevel pre-tokenizer when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

constexpr std::string_view kMetaspaceChar = "\xE2\x96\x81";  // U+2581 ▁

absl::Status BadField(std::string_view path, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("tokenizer.json: ", AbslView(path), ": ", AbslView(what)));
}

absl::Status Unsupported(std::string_view kind, std::string_view type) {
  return absl::UnimplementedError(absl::StrCat("tokenizer.json: ", AbslView(kind), " type \"",
                                               AbslView(type), "\" is not supported"));
}

// Optional bool field: default when absent or null; error when of another type.
absl::StatusOr<bool> GetBool(const Json& obj, const char* key, bool def, std::string_view path) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return def;
  if (!it->is_boolean()) return BadField(absl::StrCat(AbslView(path), ".", key), "not a boolean");
  return it->get<bool>();
}

absl::StatusOr<std::string> GetString(const Json& obj, const char* key, std::string_view path,
                                      std::optional<std::string> def = std::nullopt) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    if (def.has_value()) return *def;
    return BadField(absl::StrCat(AbslView(path), ".", key), "missing");
  }
  if (!it->is_string()) return BadField(absl::StrCat(AbslView(path), ".", key), "not a string");
  return it->get<std::string>();
}

absl::StatusOr<std::string> GetType(const Json& obj, std::string_view path) {
  if (!obj.is_object()) return BadField(path, "not an object");
  return GetString(obj, "type", path);
}

// Pattern object {"String": "..."} or {"Regex": "..."}.
absl::StatusOr<std::unique_ptr<Regex>> ParsePattern(const Json& obj, std::string_view path) {
  if (!obj.is_object()) return BadField(path, "pattern is not an object");
  if (auto it = obj.find("String"); it != obj.end() && it->is_string()) {
    return Regex::Literal(it->get<std::string>());
  }
  if (auto it = obj.find("Regex"); it != obj.end() && it->is_string()) {
    return Regex::Compile(it->get<std::string>());
  }
  return BadField(path, "pattern needs a \"String\" or \"Regex\" string");
}

absl::Status ParseNormalizer(const Json& node, std::string_view path,
                             std::vector<NormalizerStep>* steps) {
  if (node.is_null()) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string type, GetType(node, path));
  if (type == "Sequence") {
    auto it = node.find("normalizers");
    if (it == node.end() || !it->is_array()) return BadField(path, "normalizers is not an array");
    for (size_t i = 0; i < it->size(); ++i) {
      RETURN_IF_ERROR(
          ParseNormalizer((*it)[i], absl::StrCat(AbslView(path), ".normalizers[", i, "]"), steps));
    }
    return absl::OkStatus();
  }
  NormalizerStep step;
  if (type == "Replace") {
    step.kind = NormalizerStep::Kind::kReplace;
    auto it = node.find("pattern");
    if (it == node.end()) return BadField(path, "Replace without pattern");
    ASSIGN_OR_RETURN(step.pattern, ParsePattern(*it, absl::StrCat(AbslView(path), ".pattern")));
    ASSIGN_OR_RETURN(step.content, GetString(node, "content", path));
  } else if (type == "Prepend") {
    step.kind = NormalizerStep::Kind::kPrepend;
    ASSIGN_OR_RETURN(step.content, GetString(node, "prepend", path));
  } else {
    // NFC/NFKC/NFD/NFKD, Lowercase, Strip, BertNormalizer, Precompiled...: neither tokenizer we
    // serve uses them (protocol.md §4.2, stories260K), so they are rejected rather than guessed.
    return Unsupported("normalizer", type);
  }
  steps->push_back(std::move(step));
  return absl::OkStatus();
}

absl::StatusOr<SplitBehavior> ParseBehavior(const Json& node, std::string_view path) {
  ASSIGN_OR_RETURN(std::string b, GetString(node, "behavior", path, std::string("Isolated")));
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return BadField(path, absl::StrCat("unknown split behavior \"", b, "\""));
}

absl::Status ParsePreTokenizer(const Json& node, std::string_view path,
                               std::vector<PreTokenizerStep>* steps, bool* byte_level) {
  if (node.is_null()) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string type, GetType(node, path));
  if (type == "Sequence") {
    auto it = node.find("pretokenizers");
    if (it == node.end() || !it->is_array()) {
      return BadField(path, "pretokenizers is not an array");
    }
    for (size_t i = 0; i < it->size(); ++i) {
      RETURN_IF_ERROR(ParsePreTokenizer(
          (*it)[i], absl::StrCat(AbslView(path), ".pretokenizers[", i, "]"), steps, byte_level));
    }
    return absl::OkStatus();
  }
  PreTokenizerStep step;
  if (type == "Split") {
    step.kind = PreTokenizerStep::Kind::kSplit;
    auto it = node.find("pattern");
    if (it == node.end()) return BadField(path, "Split without pattern");
    ASSIGN_OR_RETURN(step.pattern, ParsePattern(*it, absl::StrCat(AbslView(path), ".pattern")));
    ASSIGN_OR_RETURN(step.behavior, ParseBehavior(node, path));
    ASSIGN_OR_RETURN(step.invert, GetBool(node, "invert", false, path));
  } else if (type == "Digits") {
    step.kind = PreTokenizerStep::Kind::kSplit;
    ASSIGN_OR_RETURN(bool individual, GetBool(node, "individual_digits", false, path));
    // HF uses char::is_numeric(), i.e. general category N.
    ASSIGN_OR_RETURN(step.pattern, Regex::Compile(individual ? R"(\p{N})" : R"(\p{N}+)"));
    step.behavior = SplitBehavior::kIsolated;
  } else if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::Kind::kByteLevel;
    ASSIGN_OR_RETURN(step.add_prefix_space, GetBool(node, "add_prefix_space", true, path));
    ASSIGN_OR_RETURN(bool use_regex, GetBool(node, "use_regex", true, path));
    if (use_regex) {
      ASSIGN_OR_RETURN(step.pattern, Regex::Compile(kGpt2Pattern));
    }
    *byte_level = true;
  } else if (type == "Metaspace") {
    step.kind = PreTokenizerStep::Kind::kMetaspace;
    ASSIGN_OR_RETURN(step.replacement,
                     GetString(node, "replacement", path, std::string(kMetaspaceChar)));
    if (node.contains("prepend_scheme") && !node["prepend_scheme"].is_null()) {
      ASSIGN_OR_RETURN(std::string scheme, GetString(node, "prepend_scheme", path));
      if (scheme == "always") {
        step.prepend_scheme = PreTokenizerStep::PrependScheme::kAlways;
      } else if (scheme == "first") {
        step.prepend_scheme = PreTokenizerStep::PrependScheme::kFirst;
      } else if (scheme == "never") {
        step.prepend_scheme = PreTokenizerStep::PrependScheme::kNever;
      } else {
        return BadField(path, absl::StrCat("unknown prepend_scheme \"", scheme, "\""));
      }
    } else {
      ASSIGN_OR_RETURN(bool add, GetBool(node, "add_prefix_space", true, path));
      step.prepend_scheme =
          add ? PreTokenizerStep::PrependScheme::kAlways : PreTokenizerStep::PrependScheme::kNever;
    }
    ASSIGN_OR_RETURN(step.split, GetBool(node, "split", true, path));
    ASSIGN_OR_RETURN(step.pattern, Regex::Literal(step.replacement));
    step.behavior = SplitBehavior::kMergedWithNext;
  } else {
    return Unsupported("pre_tokenizer", type);
  }
  steps->push_back(std::move(step));
  return absl::OkStatus();
}

// Decoder chain, split into per-token string operations and sequence-start rules.
struct DecoderOp {
  enum class Kind { kByteLevel, kByteFallback, kReplace, kMetaspace, kStrip };
  Kind kind;
  std::unique_ptr<Regex> pattern;  // kReplace
  std::string content;             // kReplace: replacement; kMetaspace: replacement char
  std::string strip_char;          // kStrip
  int strip_start = 0, strip_stop = 0;
};

struct DecoderPlan {
  std::vector<DecoderOp> per_token;
  int strip_leading_spaces = 0;
  bool fused = false;
};

absl::Status ParseDecoder(const Json& node, std::string_view path, DecoderPlan* plan) {
  if (node.is_null()) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string type, GetType(node, path));
  DecoderOp op;
  if (type == "Sequence") {
    auto it = node.find("decoders");
    if (it == node.end() || !it->is_array()) return BadField(path, "decoders is not an array");
    for (size_t i = 0; i < it->size(); ++i) {
      RETURN_IF_ERROR(
          ParseDecoder((*it)[i], absl::StrCat(AbslView(path), ".decoders[", i, "]"), plan));
    }
    return absl::OkStatus();
  } else if (type == "ByteLevel") {
    op.kind = DecoderOp::Kind::kByteLevel;
  } else if (type == "ByteFallback") {
    op.kind = DecoderOp::Kind::kByteFallback;
  } else if (type == "Fuse") {
    plan->fused = true;
    return absl::OkStatus();
  } else if (type == "Replace") {
    op.kind = DecoderOp::Kind::kReplace;
    auto it = node.find("pattern");
    if (it == node.end()) return BadField(path, "Replace without pattern");
    ASSIGN_OR_RETURN(op.pattern, ParsePattern(*it, absl::StrCat(AbslView(path), ".pattern")));
    ASSIGN_OR_RETURN(op.content, GetString(node, "content", path));
  } else if (type == "Metaspace") {
    op.kind = DecoderOp::Kind::kMetaspace;
    ASSIGN_OR_RETURN(op.content, GetString(node, "replacement", path, std::string(kMetaspaceChar)));
    bool prepend = true;
    if (node.contains("prepend_scheme") && node["prepend_scheme"].is_string()) {
      prepend = node["prepend_scheme"].get<std::string>() != "never";
    } else {
      ASSIGN_OR_RETURN(prepend, GetBool(node, "add_prefix_space", true, path));
    }
    if (prepend) plan->strip_leading_spaces = std::max(plan->strip_leading_spaces, 1);
  } else if (type == "Strip") {
    ASSIGN_OR_RETURN(std::string content, GetString(node, "content", path));
    auto start_it = node.find("start");
    auto stop_it = node.find("stop");
    const int start =
        start_it != node.end() && start_it->is_number_integer() ? start_it->get<int>() : 0;
    const int stop =
        stop_it != node.end() && stop_it->is_number_integer() ? stop_it->get<int>() : 0;
    if (plan->fused) {
      // Strip after Fuse acts on the whole decoded text; only a leading-space strip (the
      // SentencePiece "▁" prefix) is supported, which streaming can apply to the first bytes.
      if (content != " " || stop != 0)
        return Unsupported("decoder", "Strip (after Fuse, not a leading space)");
      plan->strip_leading_spaces = std::max(plan->strip_leading_spaces, start);
      return absl::OkStatus();
    }
    op.kind = DecoderOp::Kind::kStrip;
    op.strip_char = content;
    op.strip_start = start;
    op.strip_stop = stop;
  } else {
    return Unsupported("decoder", type);
  }
  plan->per_token.push_back(std::move(op));
  return absl::OkStatus();
}

void ReplaceAll(const Regex& pattern, std::string_view content, std::string* s) {
  std::vector<std::pair<size_t, size_t>> matches;
  pattern.FindAll(*s, &matches);
  if (matches.empty()) return;
  std::string out;
  size_t prev = 0;
  for (auto [b, e] : matches) {
    out.append(*s, prev, b - prev);
    out.append(content);
    prev = e;
  }
  out.append(*s, prev, std::string::npos);
  *s = std::move(out);
}

std::string ApplyDecoderOps(const std::vector<DecoderOp>& ops, std::string token) {
  for (const DecoderOp& op : ops) {
    switch (op.kind) {
      case DecoderOp::Kind::kByteLevel: {
        std::string bytes;
        if (ByteLevelToBytes(token, &bytes)) token = std::move(bytes);
        break;
      }
      case DecoderOp::Kind::kByteFallback: {
        if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>') {
          auto hex = [](char c) -> int {
            if (c >= '0' && c <= '9') return c - '0';
            if (c >= 'A' && c <= 'F') return c - 'A' + 10;
            if (c >= 'a' && c <= 'f') return c - 'a' + 10;
            return -1;
          };
          const int hi = hex(token[3]), lo = hex(token[4]);
          if (hi >= 0 && lo >= 0) token = std::string(1, static_cast<char>(hi * 16 + lo));
        }
        break;
      }
      case DecoderOp::Kind::kReplace:
        ReplaceAll(*op.pattern, op.content, &token);
        break;
      case DecoderOp::Kind::kMetaspace: {
        std::string out;
        size_t pos = 0;
        while (true) {
          size_t hit = token.find(op.content, pos);
          if (hit == std::string::npos || op.content.empty()) break;
          out.append(token, pos, hit - pos);
          out.push_back(' ');
          pos = hit + op.content.size();
        }
        out.append(token, pos, std::string::npos);
        token = std::move(out);
        break;
      }
      case DecoderOp::Kind::kStrip: {
        int n = 0;
        while (n < op.strip_start && !op.strip_char.empty() && token.starts_with(op.strip_char)) {
          token.erase(0, op.strip_char.size());
          ++n;
        }
        n = 0;
        while (n < op.strip_stop && !op.strip_char.empty() && token.ends_with(op.strip_char)) {
          token.erase(token.size() - op.strip_char.size());
          ++n;
        }
        break;
      }
    }
  }
  return token;
}

// Applies a split pattern to every piece (HF PreTokenizedString::split with the given
// SplitDelimiterBehavior); empty pieces are dropped.
void SplitPieces(const Regex& pattern, SplitBehavior behavior, bool invert,
                 const std::vector<std::string_view>& in, std::vector<std::string_view>* out,
                 ThreadPool* pool) {
  struct Seg {
    size_t begin, end;
    bool match;
  };
  thread_local std::vector<std::pair<size_t, size_t>> matches;
  thread_local std::vector<Seg> segs;
  thread_local std::vector<Seg> merged;
  for (std::string_view piece : in) {
    matches.clear();
    if (pool != nullptr && piece.size() >= TokenizerImpl::kParallelScanBytes) {
      pattern.FindAllParallel(piece, pool, &matches);
    } else {
      pattern.FindAll(piece, &matches);
    }
    segs.clear();
    size_t prev = 0;
    for (auto [b, e] : matches) {
      if (prev < b) segs.push_back({prev, b, invert});
      segs.push_back({b, e, !invert});
      prev = e;
    }
    if (prev < piece.size()) segs.push_back({prev, piece.size(), invert});
    merged.clear();
    switch (behavior) {
      case SplitBehavior::kIsolated:
        merged = segs;
        break;
      case SplitBehavior::kRemoved:
        for (const Seg& s : segs) {
          if (!s.match) merged.push_back(s);
        }
        break;
      case SplitBehavior::kMergedWithPrevious: {
        bool previous_match = false;
        for (const Seg& s : segs) {
          if (s.match && !previous_match && !merged.empty()) {
            merged.back().end = s.end;
          } else {
            merged.push_back(s);
          }
          previous_match = s.match;
        }
        break;
      }
      case SplitBehavior::kMergedWithNext: {
        bool previous_match = false;
        for (size_t k = segs.size(); k-- > 0;) {
          const Seg& s = segs[k];
          if (s.match && !previous_match && !merged.empty()) {
            merged.back().begin = s.begin;
          } else {
            merged.push_back(s);
          }
          previous_match = s.match;
        }
        std::reverse(merged.begin(), merged.end());
        break;
      }
      case SplitBehavior::kContiguous: {
        bool previous_match = false;
        for (const Seg& s : segs) {
          if (s.match == previous_match && !merged.empty()) {
            merged.back().end = s.end;
          } else {
            merged.push_back(s);
          }
          previous_match = s.match;
        }
        break;
      }
    }
    for (const Seg& s : merged) {
      if (s.end > s.begin) out->push_back(piece.substr(s.begin, s.end - s.begin));
    }
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenizerImpl>> TokenizerImpl::Load(std::string_view tokenizer_json,
                                                                   std::string_view config_json) {
  auto impl = std::make_unique<TokenizerImpl>();
  absl::Status status;
  try {
    status = impl->LoadImpl(tokenizer_json, config_json);
  } catch (const std::exception& e) {  // safety net: nothing throws past this module
    status = absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", e.what()));
  }
  if (!status.ok()) return status;
  return impl;
}

absl::Status TokenizerImpl::LoadImpl(std::string_view tokenizer_json,
                                     std::string_view config_json) {
  const Json root = Json::parse(tokenizer_json.begin(), tokenizer_json.end(), nullptr,
                                /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError("tokenizer.json: not a valid JSON object");
  }
  if (auto it = root.find("normalizer"); it != root.end()) {
    RETURN_IF_ERROR(ParseNormalizer(*it, "normalizer", &normalizers_));
  }
  bool byte_level = false;
  if (auto it = root.find("pre_tokenizer"); it != root.end()) {
    RETURN_IF_ERROR(ParsePreTokenizer(*it, "pre_tokenizer", &pre_tokenizers_, &byte_level));
  }

  // Model.
  auto model_it = root.find("model");
  if (model_it == root.end() || !model_it->is_object()) return BadField("model", "missing");
  const Json& model = *model_it;
  ASSIGN_OR_RETURN(std::string model_type, GetString(model, "type", "model", std::string("BPE")));
  if (model_type != "BPE") return Unsupported("model", model_type);
  if (auto it = model.find("dropout");
      it != model.end() && it->is_number() && it->get<double>() > 0.0) {
    return Unsupported("model", "BPE with dropout");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (auto it = model.find(key);
        it != model.end() && it->is_string() && !it->get<std::string>().empty()) {
      return Unsupported("model", absl::StrCat("BPE with ", key));
    }
  }
  auto vocab_it = model.find("vocab");
  if (vocab_it == model.end() || !vocab_it->is_object()) {
    return BadField("model.vocab", "missing or not an object");
  }
  std::vector<std::pair<std::string, int32_t>> vocab;
  vocab.reserve(vocab_it->size());
  int32_t max_id = -1;
  for (auto it = vocab_it->begin(); it != vocab_it->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > (1 << 30)) {
      return BadField(absl::StrCat("model.vocab[\"", it.key(), "\"]"), "id is not a valid integer");
    }
    vocab.emplace_back(it.key(), it.value().get<int32_t>());
    max_id = std::max(max_id, vocab.back().second);
  }
  auto merges_it = model.find("merges");
  std::vector<std::pair<std::string, std::string>> merges;
  if (merges_it != model.end() && !merges_it->is_null()) {
    if (!merges_it->is_array()) return BadField("model.merges", "not an array");
    merges.reserve(merges_it->size());
    for (size_t i = 0; i < merges_it->size(); ++i) {
      const Json& m = (*merges_it)[i];
      if (m.is_string()) {
        const std::string& s = m.get_ref<const std::string&>();
        const size_t space = s.find(' ');
        if (space == std::string::npos) {
          return BadField(absl::StrCat("model.merges[", i, "]"), "not of the form \"a b\"");
        }
        merges.emplace_back(s.substr(0, space), s.substr(space + 1));
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else {
        return BadField(absl::StrCat("model.merges[", i, "]"), "not a string or a pair");
      }
    }
  }
  BpeOptions options;
  options.byte_level = byte_level;
  ASSIGN_OR_RETURN(options.byte_fallback, GetBool(model, "byte_fallback", false, "model"));
  ASSIGN_OR_RETURN(options.fuse_unk, GetBool(model, "fuse_unk", false, "model"));
  ASSIGN_OR_RETURN(options.ignore_merges, GetBool(model, "ignore_merges", false, "model"));
  if (auto it = model.find("unk_token"); it != model.end() && !it->is_null()) {
    if (!it->is_string()) return BadField("model.unk_token", "not a string");
    const std::string unk = it->get<std::string>();
    auto found = std::find_if(vocab.begin(), vocab.end(),
                              [&](const auto& entry) { return entry.first == unk; });
    if (found == vocab.end()) {
      return BadField("model.unk_token", absl::StrCat("\"", unk, "\" is not in model.vocab"));
    }
    options.unk_id = found->second;
  }
  ASSIGN_OR_RETURN(model_, BpeModel::Create(vocab, merges, options));

  // Added tokens.
  struct Added {
    int32_t id;
    std::string content;
    bool special;
  };
  std::vector<Added> added;
  if (auto it = root.find("added_tokens"); it != root.end() && !it->is_null()) {
    if (!it->is_array()) return BadField("added_tokens", "not an array");
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& t = (*it)[i];
      const std::string path = absl::StrCat("added_tokens[", i, "]");
      if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
          t["id"].get<int64_t>() < 0 || t["id"].get<int64_t>() > (1 << 30)) {
        return BadField(path, "needs an integer id");
      }
      ASSIGN_OR_RETURN(std::string content, GetString(t, "content", path));
      ASSIGN_OR_RETURN(bool special, GetBool(t, "special", false, path));
      added.push_back({t["id"].get<int32_t>(), std::move(content), special});
      max_id = std::max(max_id, added.back().id);
    }
  }

  // Decoder.
  DecoderPlan plan;
  if (auto it = root.find("decoder"); it != root.end()) {
    RETURN_IF_ERROR(ParseDecoder(*it, "decoder", &plan));
  }
  strip_leading_spaces_ = plan.strip_leading_spaces;

  // Per-id tables.
  const size_t n = static_cast<size_t>(max_id + 1);
  token_strings_.assign(n, std::string());
  token_bytes_.assign(n, std::string());
  flags_.assign(n, 0);
  vocab_to_id_.reserve(vocab.size());
  for (auto& [token, id] : vocab) {
    vocab_to_id_[token] = id;
    token_bytes_[id] = ApplyDecoderOps(plan.per_token, token);
    token_strings_[id] = std::move(token);
  }
  for (Added& a : added) {
    flags_[a.id] = 1 | (a.special ? 2 : 0);
    token_bytes_[a.id] = a.content;  // added tokens decode to their content
    token_strings_[a.id] = a.content;
    added_to_id_[a.content] = a.id;
  }

  // tokenizer_config.json: bos/eos and add_bos/add_eos.
  auto lookup_any = [&](std::initializer_list<std::string_view> names) -> int32_t {
    for (std::string_view name : names) {
      if (auto id = TokenId(name)) return *id;
    }
    return -1;
  };
  bos_id = lookup_any({"<｜begin▁of▁sentence｜>", "<s>", "<|begin_of_text|>"});
  eos_id = lookup_any({"<｜end▁of▁sentence｜>", "</s>", "<|end_of_text|>", "<|endoftext|>"});
  if (!config_json.empty()) {
    const Json config = Json::parse(config_json.begin(), config_json.end(), nullptr, false);
    if (config.is_discarded() || !config.is_object()) {
      return absl::InvalidArgumentError("tokenizer_config.json: not a valid JSON object");
    }
    auto token_of = [&](const char* key, int32_t* id) -> absl::Status {
      auto it = config.find(key);
      if (it == config.end() || it->is_null()) return absl::OkStatus();
      std::string content;
      if (it->is_string()) {
        content = it->get<std::string>();
      } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
        content = (*it)["content"].get<std::string>();
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("tokenizer_config.json: ", key, " is neither a string nor a token"));
      }
      auto found = TokenId(content);
      if (!found) {
        return absl::InvalidArgumentError(absl::StrCat("tokenizer_config.json: ", key, " \"",
                                                       content, "\" is not in the vocabulary"));
      }
      *id = *found;
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(token_of("bos_token", &bos_id));
    RETURN_IF_ERROR(token_of("eos_token", &eos_id));
    ASSIGN_OR_RETURN(add_bos, GetBool(config, "add_bos_token", false, "tokenizer_config.json"));
    ASSIGN_OR_RETURN(add_eos, GetBool(config, "add_eos_token", false, "tokenizer_config.json"));
  }
  return absl::OkStatus();
}

std::optional<int32_t> TokenizerImpl::TokenId(std::string_view s) const {
  if (auto it = added_to_id_.find(AbslView(s)); it != added_to_id_.end()) return it->second;
  if (auto it = vocab_to_id_.find(AbslView(s)); it != vocab_to_id_.end()) return it->second;
  return std::nullopt;
}

void TokenizerImpl::Pretokenize(std::string_view text, bool first_section, Pretokenized* out,
                                ThreadPool* pool) const {
  out->pieces.clear();
  std::string_view s = text;
  if (!normalizers_.empty()) {
    std::string cur(text);
    for (const NormalizerStep& step : normalizers_) {
      if (step.kind == NormalizerStep::Kind::kPrepend) {
        if (!cur.empty()) cur.insert(0, step.content);  // HF: only non-empty strings
      } else {
        ReplaceAll(*step.pattern, step.content, &cur);
      }
    }
    out->normalized = std::move(cur);
    s = out->normalized;
  }
  if (s.empty()) return;
  thread_local std::vector<std::string_view> a, b;
  a.clear();
  a.push_back(s);
  for (const PreTokenizerStep& step : pre_tokenizers_) {
    b.clear();
    switch (step.kind) {
      case PreTokenizerStep::Kind::kSplit:
        SplitPieces(*step.pattern, step.behavior, step.invert, a, &b, pool);
        break;
      case PreTokenizerStep::Kind::kByteLevel:
        if (step.add_prefix_space) {
          for (std::string_view& p : a) {
            if (!p.starts_with(' ')) {
              out->arena.push_back(absl::StrCat(" ", AbslView(p)));
              p = out->arena.back();
            }
          }
        }
        if (step.pattern != nullptr) {
          SplitPieces(*step.pattern, SplitBehavior::kIsolated, false, a, &b, pool);
        } else {
          b = a;
        }
        break;
      case PreTokenizerStep::Kind::kMetaspace: {
        for (size_t i = 0; i < a.size(); ++i) {
          std::string r;
          for (char c : a[i]) {
            if (c == ' ') {
              r.append(step.replacement);
            } else {
              r.push_back(c);
            }
          }
          const bool prepend = step.prepend_scheme == PreTokenizerStep::PrependScheme::kAlways ||
                               (step.prepend_scheme == PreTokenizerStep::PrependScheme::kFirst &&
                                first_section && i == 0);
          if (prepend && !r.starts_with(step.replacement)) r.insert(0, step.replacement);
          out->arena.push_back(std::move(r));
          a[i] = out->arena.back();
        }
        if (step.split) {
          SplitPieces(*step.pattern, SplitBehavior::kMergedWithNext, false, a, &b, pool);
        } else {
          b = a;
        }
        break;
      }
    }
    std::swap(a, b);
  }
  out->pieces.assign(a.begin(), a.end());
}

bool TokenizerImpl::EncodePieces(const std::string_view* pieces, size_t count,
                                 std::vector<int32_t>* out, size_t max_out) const {
  for (size_t i = 0; i < count; ++i) {
    // The ids so far plus at least one per piece left.
    if (out->size() > max_out || count - i > max_out - std::min(max_out, out->size())) {
      return false;
    }
    model_->Encode(pieces[i], out);
  }
  return out->size() <= max_out;
}

bool TokenizerImpl::EncodeSpan(std::string_view text, bool first_section,
                               std::vector<int32_t>* out, size_t max_out) const {
  Pretokenized pre;
  Pretokenize(text, first_section, &pre);
  return EncodePieces(pre.pieces.data(), pre.pieces.size(), out, max_out);
}

}  // namespace tokenizer_internal

using tokenizer_internal::TokenizerImpl;

Tokenizer::Tokenizer(std::unique_ptr<TokenizerImpl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(
    std::string_view tokenizer_json, std::string_view tokenizer_config_json) {
  ASSIGN_OR_RETURN(auto impl, TokenizerImpl::Load(tokenizer_json, tokenizer_config_json));
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromDirectory(std::string_view dir) {
  const std::string base(dir);
  ASSIGN_OR_RETURN(std::string json, ReadFileToString(base + "/tokenizer.json"));
  std::string config;
  if (auto c = ReadFileToString(base + "/tokenizer_config.json"); c.ok()) config = *std::move(c);
  auto tok = FromJson(json, config);
  if (!tok.ok()) return Annotate(tok.status(), base);
  return tok;
}

std::vector<int32_t> Tokenizer::EncodeText(std::string_view text) const {
  std::vector<int32_t> out;
  impl_->EncodeSpan(text, /*first_section=*/true, &out);
  return out;
}

std::vector<int32_t> Tokenizer::EncodeTemplate(std::span<const TemplatePiece> pieces,
                                               ThreadPool* pool) const {
  return *EncodeTemplateAtMost(pieces, SIZE_MAX, pool);
}

std::optional<std::vector<int32_t>> Tokenizer::EncodeTextAtMost(std::string_view text,
                                                                size_t max_tokens) const {
  std::vector<int32_t> out;
  if (!impl_->EncodeSpan(text, /*first_section=*/true, &out, max_tokens)) return std::nullopt;
  return out;
}

std::optional<std::vector<int32_t>> Tokenizer::EncodeTemplateAtMost(
    std::span<const TemplatePiece> pieces, size_t max_tokens, ThreadPool* pool) const {
  constexpr size_t kParallelMinBytes = 64 * 1024;
  size_t total = 0;
  for (const TemplatePiece& p : pieces) total += p.special_id >= 0 ? 0 : p.text.size();
  std::vector<int32_t> out;
  if (pool == nullptr || pool->num_threads() <= 1 || total < kParallelMinBytes) {
    out.reserve(std::min(max_tokens, total / 3 + pieces.size()));
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (pieces[i].special_id >= 0) {
        out.push_back(pieces[i].special_id);
        if (out.size() > max_tokens) return std::nullopt;
      } else if (!impl_->EncodeSpan(pieces[i].text, /*first_section=*/i == 0, &out, max_tokens)) {
        return std::nullopt;
      }
    }
    return out;
  }
  // Phase 1: normalize + pre-tokenize every text piece (independent: segments are cut only at
  // special tokens). `pre` is sized once so the views into each element stay valid.
  // Very long segments are split with parallel regex scans (on the calling thread, which hands
  // the chunks to the pool); the others are pre-tokenized one segment per task.
  std::vector<tokenizer_internal::Pretokenized> pre(pieces.size());
  auto is_long = [&](size_t i) {
    return pieces[i].special_id < 0 && pieces[i].text.size() >= TokenizerImpl::kParallelScanBytes;
  };
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (is_long(i)) impl_->Pretokenize(pieces[i].text, i == 0, &pre[i], pool);
  }
  pool->ParallelFor(static_cast<int64_t>(pieces.size()), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (pieces[i].special_id < 0 && !is_long(i)) {
        impl_->Pretokenize(pieces[i].text, i == 0, &pre[i]);
      }
    }
  });
  // Phase 2: BPE over the flat list of pre-token pieces, in chunks; a special token is an item
  // with an empty view and its id. Chunk outputs are concatenated in order, so the result is
  // independent of the thread count.
  struct Item {
    int32_t special_id;
    std::string_view piece;
  };
  std::vector<Item> items;
  size_t num_items = 0;  // every item is at least one id
  for (size_t i = 0; i < pieces.size(); ++i) {
    num_items += pieces[i].special_id >= 0 ? 1 : pre[i].pieces.size();
  }
  if (num_items > max_tokens) return std::nullopt;
  items.reserve(num_items);
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].special_id >= 0) {
      items.push_back({pieces[i].special_id, {}});
    } else {
      for (std::string_view p : pre[i].pieces) items.push_back({-1, p});
    }
  }
  const int64_t num_chunks = std::min<int64_t>(static_cast<int64_t>(items.size()),
                                               static_cast<int64_t>(pool->num_threads()) * 8);
  std::vector<std::vector<int32_t>> chunk_out(num_chunks);
  // Ids beyond one per item, summed over the chunks as they go: past max_tokens - items the
  // whole encoding is too long, and every chunk stops.
  std::atomic<size_t> extra{0};
  const size_t extra_budget = max_tokens - num_items;
  pool->ParallelFor(num_chunks, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      auto [lo, hi] = ThreadPool::RangeOf(static_cast<int64_t>(items.size()), 1,
                                          static_cast<int>(c), static_cast<int>(num_chunks));
      std::vector<int32_t>& dst = chunk_out[c];
      dst.reserve(static_cast<size_t>(hi - lo) * 2);
      for (int64_t k = lo; k < hi; ++k) {
        if (items[k].special_id >= 0) {
          dst.push_back(items[k].special_id);
        } else {
          const size_t before = dst.size();
          impl_->EncodePieces(&items[k].piece, 1, &dst);
          const size_t got = dst.size() - before;
          if (got > 1 && extra.fetch_add(got - 1) + (got - 1) > extra_budget) return;
        }
        if (extra.load(std::memory_order_relaxed) > extra_budget) return;
      }
    }
  });
  if (extra.load() > extra_budget) return std::nullopt;
  size_t n = 0;
  for (const auto& v : chunk_out) n += v.size();
  out.reserve(n);
  for (const auto& v : chunk_out) out.insert(out.end(), v.begin(), v.end());
  return out;
}

std::optional<int32_t> Tokenizer::TokenId(std::string_view token_string) const {
  return impl_->TokenId(token_string);
}

std::string_view Tokenizer::TokenString(int32_t id) const { return impl_->TokenString(id); }

std::string_view Tokenizer::TokenBytes(int32_t id) const { return impl_->TokenBytes(id); }

TokenInfo Tokenizer::GetTokenInfo(int32_t id) const {
  return TokenInfo{impl_->IsAdded(id), impl_->IsSpecial(id)};
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  int strip = impl_->strip_leading_spaces();
  for (int32_t id : ids) {
    if (id < 0 || id >= impl_->vocab_size()) continue;
    if (skip_special && impl_->IsSpecial(id)) continue;
    std::string_view b = impl_->TokenBytes(id);
    while (strip > 0 && !b.empty()) {
      if (b.front() == ' ') {
        b.remove_prefix(1);
        --strip;
      } else {
        strip = 0;
      }
    }
    bytes.append(b);
  }
  std::string out;
  out.reserve(bytes.size());
  tokenizer_internal::AppendUtf8Lossy(bytes, /*final=*/true, &out);
  return out;
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size(); }
int32_t Tokenizer::bos_id() const { return impl_->bos_id; }
int32_t Tokenizer::eos_id() const { return impl_->eos_id; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
bool Tokenizer::add_eos() const { return impl_->add_eos; }

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer* tokenizer, bool skip_special)
    : tokenizer_(tokenizer),
      skip_special_(skip_special),
      strip_remaining_(tokenizer->impl().strip_leading_spaces()) {}

std::string StreamingDetokenizer::Push(int32_t id) {
  const TokenizerImpl& impl = tokenizer_->impl();
  if (id < 0 || id >= impl.vocab_size()) return {};
  if (skip_special_ && impl.IsSpecial(id)) return {};
  std::string_view b = impl.TokenBytes(id);
  while (strip_remaining_ > 0 && !b.empty()) {
    if (b.front() == ' ') {
      b.remove_prefix(1);
      --strip_remaining_;
    } else {
      strip_remaining_ = 0;
    }
  }
  std::string out;
  if (pending_.empty()) {
    const size_t used = tokenizer_internal::AppendUtf8Lossy(b, /*final=*/false, &out);
    pending_.assign(b.substr(used));
  } else {
    pending_.append(b);
    const size_t used = tokenizer_internal::AppendUtf8Lossy(pending_, /*final=*/false, &out);
    pending_.erase(0, used);
  }
  return out;
}

std::string StreamingDetokenizer::Flush() {
  std::string out;
  tokenizer_internal::AppendUtf8Lossy(pending_, /*final=*/true, &out);
  pending_.clear();
  strip_remaining_ = tokenizer_->impl().strip_leading_spaces();
  return out;
}

}  // namespace deepinfer
