// OrderedVocab: one row of logits seen in sampling order without sorting the vocabulary.
//
// Sampling order is descending probability, ties by lower token id (the order the sampler's
// inverse CDF walks, sampler.h). Tokens are bucketed by the bit pattern of their FP32
// probability (for positive floats it is monotone in the value), so bucket order is sampling
// order and only the buckets a cut lands in (top-k, top-p, min-p, the sampled position) are
// ever sorted. The bucket width adapts to the row's range of probabilities, so a bucket holds a
// few hundred tokens even for the flat rows of a random-weight model.
//
// A prefix of sampling order is a Cut: every token of the buckets before `bucket`, then the
// first `within` tokens of `bucket` in sampling order. Build is O(vocab): a max/min pass, then
// per L1-sized chunk the exponentials, the bucket indices and one histogram scatter (masses,
// and counts when top-k needs them); each cut costs O(buckets + bucket size · log).
//
// Thread-safety: an instance is single-threaded; the sampler keeps one per thread.
#ifndef DEEPINFER_ENGINE_ORDERED_VOCAB_H_
#define DEEPINFER_ENGINE_ORDERED_VOCAB_H_

#include <array>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace deepinfer::engine {

// The largest value of a row of logits and its smallest value other than -inf (masked
// tokens); (-inf, +inf) for an empty or fully masked row. NaN entries are skipped. Vectorised.
std::pair<float, float> MaxAndMinFinite(std::span<const float> logits);

class OrderedVocab {
 public:
  static constexpr int kBuckets = 4096;

  // A prefix of sampling order (see the file comment). {kBuckets, 0} is the whole row.
  struct Cut {
    int bucket = 0;
    int64_t within = 0;
    friend bool operator<(const Cut& a, const Cut& b) {
      return a.bucket != b.bucket ? a.bucket < b.bucket : a.within < b.within;
    }
  };

  // Unnormalised probabilities exp((logits - max) / temperature) over the row [vocab] (FP32,
  // kernels::ExpScaled; the best token has 1); tokens of probability 0 (-inf logits, FP32
  // underflow) are dropped. Returns false when no token has a positive probability.
  // temperature > 0. `with_counts`: histogram the bucket counts in the same pass as the masses
  // (FirstK needs them; without it they are counted by a second pass on first use).
  bool Build(std::span<const float> logits, float temperature, bool with_counts = false);

  Cut All() const { return {kBuckets, 0}; }
  // The token's unnormalised probability (divide by MassOf(All()) or a prefix's mass).
  float prob(int32_t token) const { return prob_[token]; }
  // The total probability of the prefix (double sums of the FP32 probabilities).
  double MassOf(const Cut& cut);
  // The first k tokens (k >= 1; the whole row when it has fewer).
  Cut FirstK(int64_t k);
  // The shortest prefix, within `limit`, whose mass is >= m (strict: > m), holding at least
  // one token; `limit` when none is.
  Cut ByMass(double m, bool strict, const Cut& limit);
  // The tokens whose probability is >= threshold (a prefix; at least the first token).
  Cut AtLeast(float threshold);
  // The first and the last token of a non-empty prefix.
  int32_t First();
  int32_t Last(const Cut& cut);
  // The tokens of a prefix in sampling order, appended to `out`.
  void Tokens(const Cut& cut, std::vector<int32_t>* out);
  // Calls f(token) for every token of the prefix in no particular order (O(vocab)).
  template <typename F>
  void ForEach(const Cut& cut, F&& f);

 private:
  static constexpr uint16_t kDropped = 0xFFFF;
  static constexpr int kCopies = 4;  // interleaved histogram copies (see Build)
  // Tokens per pass of Build's loop: a chunk's exponentials and bucket indices are still in L1
  // when they are histogrammed. A multiple of kCopies, so that token v always lands in copy
  // v % kCopies (the sums do not depend on the chunking).
  static constexpr int64_t kChunk = 2048;

  // Tokens of bucket b in sampling order (sorted once, then cached until the next Build).
  const std::vector<int32_t>& Members(int b);
  int BucketOfBits(uint32_t bits) const;
  // Buckets of prob_[begin, end) into bucket_, then their masses (and counts) histogrammed.
  template <bool kWithCounts>
  void HistogramChunk(int64_t begin, int64_t end);
  void EnsureCounts();
  // Sorts the members of every bucket in [0, last] after one scan (right after Build only).
  void CollectMembers(int last);
  static constexpr int64_t kMaxCollected = 8192;  // tokens CollectMembers is used for
  Cut Normalize(int bucket, int64_t within);

  std::vector<float> prob_;       // [vocab]
  std::vector<uint16_t> bucket_;  // [vocab], kDropped for probability 0
  uint32_t hi_bits_ = 0;          // bits of the largest probability (1.0f)
  int shift_ = 0;                 // bucket = (hi_bits_ - bits) >> shift_
  std::array<std::array<double, kBuckets>, kCopies> mass_copies_{};
  std::array<double, kBuckets + 1> cum_mass_{};
  bool have_counts_ = false;
  std::array<std::array<int32_t, kBuckets>, kCopies> count_copies_{};
  std::array<int64_t, kBuckets + 1> cum_count_{};
  // cached_[0, num_cached_) are this row's sorted buckets; entries past it keep their
  // capacity for the next rows (no allocation per call once warm).
  std::vector<std::pair<int, std::vector<int32_t>>> cached_;
  size_t num_cached_ = 0;
};

template <typename F>
void OrderedVocab::ForEach(const Cut& cut, F&& f) {
  const int64_t vocab = static_cast<int64_t>(bucket_.size());
  for (int64_t v = 0; v < vocab; ++v) {
    if (bucket_[v] < cut.bucket) f(static_cast<int32_t>(v));
  }
  if (cut.bucket < kBuckets && cut.within > 0) {
    const std::vector<int32_t>& ids = Members(cut.bucket);
    for (int64_t i = 0; i < cut.within; ++i) f(ids[i]);
  }
}

}  // namespace deepinfer::engine

#endif  // DEEPINFER_ENGINE_ORDERED_VOCAB_H_
