#include "tokenizer/bpe.h"

#include <algorithm>
#include <limits>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer_internal {

namespace {

// GPT-2 bytes_to_unicode(): printable bytes map to themselves, the other 68 bytes to U+0100+.
struct ByteLevelTables {
  std::array<uint32_t, 256> byte_to_cp;
  std::array<std::string, 256> byte_to_utf8;
  absl::flat_hash_map<uint32_t, uint8_t> cp_to_byte;
  ByteLevelTables() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      byte_to_cp[b] = printable ? b : next++;
      AppendCodePoint(byte_to_cp[b], &byte_to_utf8[b]);
      cp_to_byte[byte_to_cp[b]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteLevelTables& Tables() {
  static const ByteLevelTables* tables = new ByteLevelTables();
  return *tables;
}

// Decodes one UTF-8 code point at s[i]; returns false on malformed input.
bool DecodeCodePoint(std::string_view s, size_t* i, uint32_t* cp) {
  const auto b0 = static_cast<uint8_t>(s[*i]);
  const int len = Utf8SeqLen(b0);
  if (*i + len > s.size()) return false;
  if (len == 1) {
    if (b0 >= 0x80) return false;
    *cp = b0;
  } else {
    uint32_t v = b0 & (0xFF >> (len + 1));
    for (int k = 1; k < len; ++k) {
      const auto b = static_cast<uint8_t>(s[*i + k]);
      if ((b & 0xC0) != 0x80) return false;
      v = (v << 6) | (b & 0x3F);
    }
    *cp = v;
  }
  *i += len;
  return true;
}

struct HeapEntry {
  uint32_t rank;
  int32_t pos;
  int32_t left_id;
  int32_t right_id;
  // std::push_heap builds a max-heap: invert so the lowest (rank, pos) is on top.
  bool operator<(const HeapEntry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

struct Scratch {
  std::vector<int32_t> syms;
  std::vector<uint64_t> ranks;
  std::vector<int32_t> prev, next;
  std::vector<HeapEntry> heap;
};

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

constexpr size_t kSmallPiece = 96;  // symbols; longer pieces use the heap

}  // namespace

bool ByteLevelToBytes(std::string_view token, std::string* bytes) {
  const auto& tables = Tables();
  bytes->clear();
  size_t i = 0;
  while (i < token.size()) {
    uint32_t cp = 0;
    if (!DecodeCodePoint(token, &i, &cp)) return false;
    auto it = tables.cp_to_byte.find(cp);
    if (it == tables.cp_to_byte.end()) return false;
    bytes->push_back(static_cast<char>(it->second));
  }
  return true;
}

std::string_view ByteLevelChar(uint8_t b) { return Tables().byte_to_utf8[b]; }

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::Create(
    const std::vector<std::pair<std::string, int32_t>>& vocab,
    const std::vector<std::pair<std::string, std::string>>& merges, const BpeOptions& options) {
  auto model = std::unique_ptr<BpeModel>(new BpeModel());
  model->options_ = options;
  model->byte_ids_.fill(-1);
  // token string (as in tokenizer.json) -> id, for resolving merges.
  absl::flat_hash_map<std::string, int32_t> by_string;
  by_string.reserve(vocab.size());
  model->symbol_to_id_.reserve(vocab.size());
  std::string bytes;
  for (const auto& [token, id] : vocab) {
    by_string[token] = id;
    if (options.byte_level) {
      // Tokens outside the byte alphabet (e.g. `<｜begin▁of▁sentence｜>` in the base vocab) can
      // never be produced from bytes; they are reachable only as added tokens.
      if (ByteLevelToBytes(token, &bytes)) model->symbol_to_id_[bytes] = id;
    } else {
      model->symbol_to_id_[token] = id;
    }
  }
  for (int b = 0; b < 256; ++b) {
    if (options.byte_level) {
      auto it = model->symbol_to_id_.find(std::string(1, static_cast<char>(b)));
      if (it != model->symbol_to_id_.end()) model->byte_ids_[b] = it->second;
    } else if (options.byte_fallback) {
      static constexpr char kHex[] = "0123456789ABCDEF";
      std::string name =
          absl::StrCat("<0x", std::string(1, kHex[b >> 4]), std::string(1, kHex[b & 15]), ">");
      auto it = by_string.find(name);
      if (it != by_string.end()) model->byte_ids_[b] = it->second;
    }
  }
  model->merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    auto l = by_string.find(left);
    auto r = by_string.find(right);
    auto m = by_string.find(left + right);
    if (l == by_string.end() || r == by_string.end() || m == by_string.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json: model.merges[", rank, "] \"", left, " ", right,
                       "\" refers to a token missing from model.vocab"));
    }
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(l->second)) << 32) |
                         static_cast<uint32_t>(r->second);
    model->merges_[key] = (static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(m->second);
  }
  model->cache_ = std::make_unique<CacheShard[]>(kCacheShards);
  return model;
}

void BpeModel::Encode(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.empty()) return;
  if (options_.byte_level && piece.size() == 1 && byte_ids_[static_cast<uint8_t>(piece[0])] >= 0) {
    out->push_back(byte_ids_[static_cast<uint8_t>(piece[0])]);  // no pair to merge
    return;
  }
  if (piece.size() <= kMinCachedPieceBytes || piece.size() > kMaxCachedPieceBytes) {
    EncodeUncached(piece, out);
    return;
  }
  const size_t hash = absl::Hash<absl::string_view>()(AbslView(piece));
  CacheShard& shard = cache_[hash % kCacheShards];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.map.find(AbslView(piece));
    if (it != shard.map.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out->size();
  EncodeUncached(piece, out);
  std::vector<int32_t> ids(out->begin() + start, out->end());
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() >= kMaxEntriesPerShard) shard.map.clear();
  shard.map.emplace(std::string(piece), std::move(ids));
}

void BpeModel::InitialSymbols(std::string_view piece, std::vector<int32_t>* syms) const {
  syms->clear();
  const int32_t unk = options_.unk_id;
  bool last_was_unk = false;
  auto push_unk = [&] {
    if (unk < 0) return;  // no unk token: the character is dropped
    if (options_.fuse_unk && last_was_unk) return;
    syms->push_back(unk);
    last_was_unk = true;
  };
  if (options_.byte_level) {
    for (char c : piece) {
      const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
      if (id >= 0) {
        syms->push_back(id);
        last_was_unk = false;
      } else {
        push_unk();
      }
    }
    return;
  }
  size_t i = 0;
  while (i < piece.size()) {
    size_t len = Utf8SeqLen(static_cast<uint8_t>(piece[i]));
    if (i + len > piece.size()) len = piece.size() - i;
    const std::string_view ch = piece.substr(i, len);
    i += len;
    auto it = symbol_to_id_.find(AbslView(ch));
    if (it != symbol_to_id_.end()) {
      syms->push_back(it->second);
      last_was_unk = false;
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (char c : ch) all = all && byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        for (char c : ch) syms->push_back(byte_ids_[static_cast<uint8_t>(c)]);
        last_was_unk = false;
        continue;
      }
    }
    push_unk();
  }
}

void BpeModel::EncodeUncached(std::string_view piece, std::vector<int32_t>* out) const {
  if (options_.ignore_merges) {
    // The model-space key of a piece is the piece itself (raw bytes for byte-level vocabularies,
    // UTF-8 for char-level ones).
    auto it = symbol_to_id_.find(AbslView(piece));
    if (it != symbol_to_id_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  Scratch& scratch = ThreadScratch();
  InitialSymbols(piece, &scratch.syms);
  if (scratch.syms.size() > 1) {
    if (scratch.syms.size() <= kSmallPiece) {
      MergeSmall(&scratch.syms);
    } else {
      MergeLarge(&scratch.syms);
    }
  }
  out->insert(out->end(), scratch.syms.begin(), scratch.syms.end());
}

// Rank-array scan: ranks[i] caches the merge of (syms[i], syms[i+1]); each step finds the
// lowest (leftmost on ties) and re-queries only the two pairs the merge touched.
void BpeModel::MergeSmall(std::vector<int32_t>* syms_ptr) const {
  std::vector<int32_t>& syms = *syms_ptr;
  std::vector<uint64_t>& ranks = ThreadScratch().ranks;
  ranks.resize(syms.size() - 1);
  for (size_t i = 0; i + 1 < syms.size(); ++i) ranks[i] = LookupMerge(syms[i], syms[i + 1]);
  while (!ranks.empty()) {
    size_t best = 0;
    uint64_t best_rank = ranks[0];
    for (size_t i = 1; i < ranks.size(); ++i) {
      // Compare ranks only (upper 32 bits): equal ranks mean the same merge, leftmost wins.
      if ((ranks[i] >> 32) < (best_rank >> 32)) {
        best_rank = ranks[i];
        best = i;
      }
    }
    if (best_rank == kNoMerge) break;
    syms[best] = static_cast<int32_t>(static_cast<uint32_t>(best_rank));
    syms.erase(syms.begin() + best + 1);
    ranks.erase(ranks.begin() + best);
    if (best < ranks.size()) ranks[best] = LookupMerge(syms[best], syms[best + 1]);
    if (best > 0) ranks[best - 1] = LookupMerge(syms[best - 1], syms[best]);
  }
}

// Linked list over the symbol array plus a min-heap of candidate merges; stale heap entries
// (a side already merged away or changed) are skipped when popped. O(n log n).
void BpeModel::MergeLarge(std::vector<int32_t>* syms_ptr) const {
  std::vector<int32_t>& syms = *syms_ptr;
  Scratch& scratch = ThreadScratch();
  const int32_t n = static_cast<int32_t>(syms.size());
  std::vector<int32_t>& prev = scratch.prev;
  std::vector<int32_t>& next = scratch.next;
  std::vector<HeapEntry>& heap = scratch.heap;
  prev.resize(n);
  next.resize(n);
  heap.clear();
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  auto push = [&](int32_t pos) {
    const int32_t nx = next[pos];
    if (nx < 0) return;
    const uint64_t m = LookupMerge(syms[pos], syms[nx]);
    if (m == kNoMerge) return;
    heap.push_back(HeapEntry{static_cast<uint32_t>(m >> 32), pos, syms[pos], syms[nx]});
    std::push_heap(heap.begin(), heap.end());
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  constexpr int32_t kDead = std::numeric_limits<int32_t>::min();
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const HeapEntry top = heap.back();
    heap.pop_back();
    const int32_t pos = top.pos;
    if (syms[pos] != top.left_id) continue;  // merged away or changed
    const int32_t nx = next[pos];
    if (nx < 0 || syms[nx] != top.right_id) continue;
    const uint64_t m = LookupMerge(top.left_id, top.right_id);
    syms[pos] = static_cast<int32_t>(static_cast<uint32_t>(m));
    syms[nx] = kDead;
    next[pos] = next[nx];
    if (next[nx] >= 0) prev[next[nx]] = pos;
    if (prev[pos] >= 0) push(prev[pos]);
    push(pos);
  }
  int32_t w = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (syms[i] != kDead) syms[w++] = syms[i];
  }
  syms.resize(w);
}

}  // namespace deepinfer::tokenizer_internal
