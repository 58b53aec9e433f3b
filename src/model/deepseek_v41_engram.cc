#include "model/deepseek_v41_engram.h"

#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status.h"
#include "model/deepseek_v41_numpy_rng.h"
#include "nlohmann/json.hpp"

namespace deepinfer::model::dsv41 {
namespace {

using Json = nlohmann::json;

bool IsPrime(int64_t n) {
  if (n < 2) return false;
  for (int64_t d = 2; d * d <= n; ++d) {
    if (n % d == 0) return false;
  }
  return true;
}

std::mutex& SourceMutex() {
  static std::mutex m;
  return m;
}
EngramTokenMapSource& Source() {
  static EngramTokenMapSource* s = new EngramTokenMapSource();
  return *s;
}

}  // namespace

void SetEngramTokenMapSource(EngramTokenMapSource source) {
  std::lock_guard<std::mutex> lock(SourceMutex());
  Source() = std::move(source);
}

int EngramHasher::LayerIndex(int64_t layer_id) const {
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i].layer_id == layer_id) return static_cast<int>(i);
  }
  return -1;
}

absl::StatusOr<EngramHasher> EngramHasher::Load(const Config& c, const std::string& dir) {
  EngramHasher h;
  h.max_ngram_ = c.engram_max_ngram;
  h.n_heads_ = c.engram_n_heads;
  if (c.engram_layer_ids.empty()) return h;
  // Primes and offsets from the config.
  int64_t next = c.engram_vocab_size - 1;
  for (size_t li = 0; li < c.engram_layer_ids.size(); ++li) {
    EngramLayerHash L;
    L.layer_id = c.engram_layer_ids[li];
    int64_t sum = 0;
    for (int64_t i = 0; i < (c.engram_max_ngram - 1) * c.engram_n_heads; ++i) {
      do {
        ++next;
      } while (!IsPrime(next));
      L.primes.push_back(next);
      L.offsets.push_back(sum);
      sum += next;
    }
    // The official code only sizes the table by engram_num_embeddings (the release's equals
    // the prime sum; a sharded table may be padded past it): the buckets must fit in it.
    if (sum > c.engram_num_embeddings[li]) {
      return absl::InvalidArgumentError(absl::StrCat(
          c.source, ": engram_num_embeddings[", li, "] = ", c.engram_num_embeddings[li],
          " but the derived prime buckets of layer ", L.layer_id, " need ", sum, " rows"));
    }
    h.layers_.push_back(std::move(L));
  }
  const std::string path = dir + "/engram_tables.json";
  if (std::filesystem::exists(path)) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    Json j;
    try {
      j = Json::parse(ss.str());
      h.token_map_ = j.at("token_map").get<std::vector<int32_t>>();
      const auto mults = j.at("multipliers").get<std::vector<std::vector<int64_t>>>();
      const auto ids = j.at("layer_ids").get<std::vector<int64_t>>();
      const auto primes = j.at("primes").get<std::vector<std::vector<std::vector<int64_t>>>>();
      if (ids.size() != h.layers_.size() || mults.size() != ids.size() ||
          primes.size() != ids.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": layer_ids/multipliers/primes do not match engram_layer_ids"));
      }
      for (size_t li = 0; li < ids.size(); ++li) {
        EngramLayerHash& L = h.layers_[li];
        if (ids[li] != L.layer_id || static_cast<int64_t>(mults[li].size()) != c.engram_max_ngram) {
          return absl::InvalidArgumentError(absl::StrCat(path, ": bad entry for layer ", ids[li]));
        }
        std::vector<int64_t> flat;
        for (const auto& g : primes[li]) flat.insert(flat.end(), g.begin(), g.end());
        if (flat != L.primes) {
          return absl::InvalidArgumentError(absl::StrCat(
              path, ": primes of layer ", L.layer_id, " differ from the ones derived from config"));
        }
        L.multipliers = mults[li];
      }
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", e.what()));
    }
  } else {
    for (EngramLayerHash& L : h.layers_) {
      ASSIGN_OR_RETURN(L.multipliers, EngramMultipliers(L.layer_id, c.engram_compressed_vocab,
                                                        static_cast<int>(c.engram_max_ngram)));
    }
    EngramTokenMapSource source;
    {
      std::lock_guard<std::mutex> lock(SourceMutex());
      source = Source();
    }
    if (!source) {
      return absl::FailedPreconditionError(absl::StrCat(
          dir, ": no engram_tables.json and no tokenizer-based Engram token map source installed"));
    }
    ASSIGN_OR_RETURN(EngramTokenMap derived, source(dir));
    if (derived.num_keys != c.engram_compressed_vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir, ": the tokenizer's Engram token map has ", derived.num_keys,
                       " keys but config.json engram_compressed_vocab_size is ",
                       c.engram_compressed_vocab, " (wrong tokenizer for this checkpoint?)"));
    }
    h.token_map_ = std::move(derived.map);
  }
  if (static_cast<int64_t>(h.token_map_.size()) > c.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": the Engram token map has ",
                                                   h.token_map_.size(),
                                                   " ids, more than the model's vocab ",
                                                   c.vocab_size));
  }
  if (h.token_map_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": the Engram token map is empty"));
  }
  // The official map has one entry per tokenizer id (len(tokenizer)); embedding rows past the
  // tokenizer's ids (DeepSeek pads 128 815 ids to 129 280 rows) are never produced by it; they
  // hash as the pad token, on both paths.
  {
    const int32_t pad = c.engram_pad_token_id < static_cast<int64_t>(h.token_map_.size())
                            ? h.token_map_[static_cast<size_t>(c.engram_pad_token_id)]
                            : 0;
    h.token_map_.resize(static_cast<size_t>(c.vocab_size), pad);
  }
  for (int32_t v : h.token_map_) {
    if (v < 0 || v >= c.engram_compressed_vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir, ": Engram token map value ", v, " outside the compressed vocabulary"));
    }
  }
  h.pad_cid_ = h.token_map_[c.engram_pad_token_id];
  return h;
}

void EngramHasher::Hash(int layer_index, std::span<const int32_t> cids_back, int64_t* out) const {
  const EngramLayerHash& L = layers_[layer_index];
  bool blocked = false;
  int64_t rolling = 0;
  for (int64_t k = 0; k < max_ngram_; ++k) {
    // blocked is sticky: once the n-gram reaches the sequence start or an image token, every
    // longer n-gram is padded.
    blocked = blocked || k >= static_cast<int64_t>(cids_back.size()) || cids_back[k] == kEngramDead;
    const int64_t tok = blocked ? pad_cid_ : cids_back[k];
    if (k == 0) {
      rolling = tok * L.multipliers[0];
      continue;
    }
    rolling ^= tok * L.multipliers[k];
    for (int64_t hh = 0; hh < n_heads_; ++hh) {
      const int64_t col = (k - 1) * n_heads_ + hh;
      out[col] = rolling % L.primes[col] + L.offsets[col];
    }
  }
}

}  // namespace deepinfer::model::dsv41
