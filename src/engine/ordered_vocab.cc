#include "engine/ordered_vocab.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include <immintrin.h>

#include "common/check.h"
#include "kernels/ops.h"

namespace deepinfer::engine {
namespace {

// Every member of a bucket has a positive probability, so a bucket is empty iff its mass is 0.
bool BucketIsEmpty(const std::array<double, OrderedVocab::kBuckets + 1>& cum, int b) {
  return cum[b + 1] == cum[b];
}

}  // namespace

std::pair<float, float> MaxAndMinFinite(std::span<const float> x) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const int64_t n = static_cast<int64_t>(x.size());
  const float* p = x.data();
  float mx = -kInf, mn = kInf;
  int64_t i = 0;
#ifdef __AVX2__
  // max_ps(v, m) keeps m for a NaN v (as the scalar tail does); -inf is replaced by +inf
  // before the min so masked tokens never count as the smallest finite logit.
  __m256 vmax = _mm256_set1_ps(-kInf), vmin = _mm256_set1_ps(kInf);
  const __m256 neg_inf = _mm256_set1_ps(-kInf), pos_inf = _mm256_set1_ps(kInf);
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(p + i);
    vmax = _mm256_max_ps(v, vmax);
    const __m256 masked = _mm256_cmp_ps(v, neg_inf, _CMP_EQ_OQ);
    vmin = _mm256_min_ps(_mm256_blendv_ps(v, pos_inf, masked), vmin);
  }
  alignas(32) float lanes_max[8], lanes_min[8];
  _mm256_store_ps(lanes_max, vmax);
  _mm256_store_ps(lanes_min, vmin);
  for (int j = 0; j < 8; ++j) {
    mx = mx < lanes_max[j] ? lanes_max[j] : mx;
    mn = lanes_min[j] < mn ? lanes_min[j] : mn;
  }
#endif
  for (; i < n; ++i) {
    mx = mx < p[i] ? p[i] : mx;
    if (p[i] != -kInf && p[i] < mn) mn = p[i];
  }
  return {mx, mn};
}

bool OrderedVocab::Build(std::span<const float> logits, float temperature, bool with_counts) {
  CHECK_GT(temperature, 0.0f);
  num_cached_ = 0;
  have_counts_ = with_counts;
  const int64_t vocab = static_cast<int64_t>(logits.size());
  const auto [mx, mn] = MaxAndMinFinite(logits);
  if (!(mx > -std::numeric_limits<float>::infinity()) || std::isinf(mx)) return false;
  const float inv_t = 1.0f / temperature;
  // Bucket = (bits(1) - bits(e)) >> shift, the shift chosen so that the smallest logit's
  // distance fits; the last bucket takes anything beyond (a clamp keeps the map monotone).
  const uint32_t hi = std::bit_cast<uint32_t>(1.0f);
  const float e_min = std::max(std::exp((mn - mx) * inv_t), std::numeric_limits<float>::min());
  const uint32_t lo = std::min(hi, std::bit_cast<uint32_t>(e_min));
  int shift = 0;
  while (((hi - lo) >> shift) >= static_cast<uint32_t>(kBuckets - 1)) ++shift;
  hi_bits_ = hi;
  shift_ = shift;
  prob_.resize(vocab);
  bucket_.resize(vocab);
  for (auto& m : mass_copies_) std::fill(m.begin(), m.end(), 0.0);
  if (with_counts) {
    for (auto& c : count_copies_) std::fill(c.begin(), c.end(), 0);
  }
  // Unnormalised probabilities e = exp((l - max) / T) in (0, 1], e(max) = 1 exactly; every
  // use is a ratio (cuts are fractions of a prefix's mass), so no normalising pass is needed.
  // The kernel's value of an element does not depend on the chunking (ExpScaled's contract).
  for (int64_t c = 0; c < vocab; c += kChunk) {
    const int64_t end = std::min(vocab, c + kChunk);
    kernels::ExpScaled(logits.data() + c, end - c, mx, inv_t, prob_.data() + c);
    if (with_counts) {
      HistogramChunk<true>(c, end);
    } else {
      HistogramChunk<false>(c, end);
    }
  }
  cum_mass_[0] = 0.0;
  for (int bk = 0; bk < kBuckets; ++bk) {
    double mass = 0.0;
    for (int c = 0; c < kCopies; ++c) mass += mass_copies_[c][bk];
    cum_mass_[bk + 1] = cum_mass_[bk] + mass;
  }
  if (with_counts) {
    cum_count_[0] = 0;
    for (int bk = 0; bk < kBuckets; ++bk) {
      int64_t count = 0;
      for (int c = 0; c < kCopies; ++c) count += count_copies_[c][bk];
      cum_count_[bk + 1] = cum_count_[bk] + count;
    }
  }
  return cum_mass_[kBuckets] > 0.0;
}

template <bool kWithCounts>
void OrderedVocab::HistogramChunk(int64_t begin, int64_t end) {
  const uint32_t* bits = reinterpret_cast<const uint32_t*>(prob_.data());
  const float* prob = prob_.data();
  uint16_t* bucket = bucket_.data();
  const uint32_t hi = hi_bits_, last = kBuckets - 1;
  const int shift = shift_;
  for (int64_t v = begin; v < end; ++v) {  // vectorised by the compiler
    // e <= 1, so hi - bits never wraps; e = 0 (masked, underflow) is dropped.
    const uint32_t d = std::min((hi - bits[v]) >> shift, last);
    bucket[v] = bits[v] == 0 ? kDropped : static_cast<uint16_t>(d);
  }
  // Mass histogram in interleaved copies, so runs of tokens in one bucket do not wait on each
  // other's read-modify-write; merged in a fixed order (deterministic sums). Token v goes to
  // copy v % kCopies (begin is a multiple of kCopies), the row's last vocab % kCopies tokens
  // to copy 0.
  int64_t v = begin;
  for (; v + kCopies <= end; v += kCopies) {
    for (int c = 0; c < kCopies; ++c) {
      const uint16_t bk = bucket[v + c];
      if (bk != kDropped) {
        mass_copies_[c][bk] += prob[v + c];
        if constexpr (kWithCounts) ++count_copies_[c][bk];
      }
    }
  }
  for (; v < end; ++v) {
    if (bucket[v] != kDropped) {
      mass_copies_[0][bucket[v]] += prob[v];
      if constexpr (kWithCounts) ++count_copies_[0][bucket[v]];
    }
  }
}

void OrderedVocab::EnsureCounts() {
  if (have_counts_) return;
  have_counts_ = true;
  for (auto& c : count_copies_) std::fill(c.begin(), c.end(), 0);
  const int64_t vocab = static_cast<int64_t>(bucket_.size());
  const uint16_t* bucket = bucket_.data();
  int64_t v = 0;
  for (; v + kCopies <= vocab; v += kCopies) {
    for (int c = 0; c < kCopies; ++c) {
      if (bucket[v + c] != kDropped) ++count_copies_[c][bucket[v + c]];
    }
  }
  for (; v < vocab; ++v) {
    if (bucket[v] != kDropped) ++count_copies_[0][bucket[v]];
  }
  cum_count_[0] = 0;
  for (int bk = 0; bk < kBuckets; ++bk) {
    int64_t count = 0;
    for (int c = 0; c < kCopies; ++c) count += count_copies_[c][bk];
    cum_count_[bk + 1] = cum_count_[bk] + count;
  }
}

const std::vector<int32_t>& OrderedVocab::Members(int b) {
  for (size_t i = 0; i < num_cached_; ++i) {
    if (cached_[i].first == b) return cached_[i].second;
  }
  if (num_cached_ == cached_.size()) cached_.emplace_back();
  cached_[num_cached_].first = b;
  std::vector<int32_t>& ids = cached_[num_cached_++].second;
  ids.clear();
  const uint16_t key = static_cast<uint16_t>(b);
  const uint16_t* bucket = bucket_.data();
  const int64_t vocab = static_cast<int64_t>(bucket_.size());
  // Blocks of 64 tested with a vectorisable any-of first: a bucket holds a few hundred of the
  // 100K+ tokens, so almost every block is skipped without a branch per token.
  constexpr int64_t kBlock = 64;
  int64_t v = 0;
  for (; v + kBlock <= vocab; v += kBlock) {
    int hit = 0;
    for (int64_t i = 0; i < kBlock; ++i) hit |= bucket[v + i] == key;
    if (!hit) continue;
    for (int64_t i = 0; i < kBlock; ++i) {
      if (bucket[v + i] == key) ids.push_back(static_cast<int32_t>(v + i));
    }
  }
  for (; v < vocab; ++v) {
    if (bucket[v] == key) ids.push_back(static_cast<int32_t>(v));
  }
  const float* prob = prob_.data();
  std::sort(ids.begin(), ids.end(), [prob](int32_t a, int32_t b) {
    return prob[a] != prob[b] ? prob[a] > prob[b] : a < b;
  });
  return ids;
}

OrderedVocab::Cut OrderedVocab::Normalize(int bucket, int64_t within) {
  // A cut that ends exactly at a bucket's end is written as the start of the next bucket.
  if (bucket < kBuckets && within > 0 &&
      within == static_cast<int64_t>(Members(bucket).size())) {
    return {bucket + 1, 0};
  }
  return {bucket, within};
}

double OrderedVocab::MassOf(const Cut& cut) {
  if (cut.bucket >= kBuckets) return cum_mass_[kBuckets];
  double m = cum_mass_[cut.bucket];
  if (cut.within > 0) {
    const std::vector<int32_t>& ids = Members(cut.bucket);
    for (int64_t i = 0; i < cut.within; ++i) m += prob_[ids[i]];
  }
  return m;
}

OrderedVocab::Cut OrderedVocab::FirstK(int64_t k) {
  CHECK_GE(k, 1);
  EnsureCounts();
  if (k >= cum_count_[kBuckets]) return All();
  int b = 0;
  while (cum_count_[b + 1] < k) ++b;
  // Every later cut of a top-k row (top-p, min-p, the sampled position) lies in buckets
  // [0, b]: sort them all after one scan of the row instead of one scan per bucket.
  if (cum_count_[b + 1] <= kMaxCollected) CollectMembers(b);
  return Normalize(b, k - cum_count_[b]);
}

void OrderedVocab::CollectMembers(int last) {
  if (num_cached_ != 0) return;  // only right after Build (the first cut of a row)
  std::array<int16_t, kBuckets> entry;  // bucket -> cached_ index, for buckets [0, last]
  for (int b = 0; b <= last; ++b) {
    entry[b] = -1;
    if (cum_count_[b + 1] == cum_count_[b]) continue;
    if (num_cached_ == cached_.size()) cached_.emplace_back();
    cached_[num_cached_].first = b;
    cached_[num_cached_].second.clear();
    entry[b] = static_cast<int16_t>(num_cached_++);
  }
  const uint16_t* bucket = bucket_.data();
  const int64_t vocab = static_cast<int64_t>(bucket_.size());
  const uint16_t key = static_cast<uint16_t>(last);  // kDropped is above every key
  constexpr int64_t kBlock = 64;
  auto take = [&](int64_t v) {
    if (bucket[v] <= key) cached_[entry[bucket[v]]].second.push_back(static_cast<int32_t>(v));
  };
  int64_t v = 0;
  for (; v + kBlock <= vocab; v += kBlock) {
    int hit = 0;
    for (int64_t i = 0; i < kBlock; ++i) hit |= bucket[v + i] <= key;
    if (!hit) continue;
    for (int64_t i = 0; i < kBlock; ++i) take(v + i);
  }
  for (; v < vocab; ++v) take(v);
  const float* prob = prob_.data();
  for (size_t i = 0; i < num_cached_; ++i) {
    std::vector<int32_t>& ids = cached_[i].second;
    std::sort(ids.begin(), ids.end(), [prob](int32_t a, int32_t b) {
      return prob[a] != prob[b] ? prob[a] > prob[b] : a < b;
    });
  }
}

OrderedVocab::Cut OrderedVocab::ByMass(double m, bool strict, const Cut& limit) {
  auto reached = [&](double cum) { return strict ? cum > m : cum >= m; };
  int b = 0;
  while (b < kBuckets && (BucketIsEmpty(cum_mass_, b) || !reached(cum_mass_[b + 1]))) ++b;
  if (b == kBuckets) return limit;
  double cum = cum_mass_[b];
  const std::vector<int32_t>& ids = Members(b);
  Cut cut = {b, static_cast<int64_t>(ids.size())};  // rounding between bucket sums and the walk
  for (size_t i = 0; i < ids.size(); ++i) {
    cum += prob_[ids[i]];
    if (reached(cum)) {
      cut = {b, static_cast<int64_t>(i) + 1};
      break;
    }
  }
  cut = Normalize(cut.bucket, cut.within);
  return limit < cut ? limit : cut;
}

int OrderedVocab::BucketOfBits(uint32_t bits) const {
  if (bits >= hi_bits_) return 0;
  return static_cast<int>(std::min<uint32_t>((hi_bits_ - bits) >> shift_, kBuckets - 1));
}

OrderedVocab::Cut OrderedVocab::AtLeast(float threshold) {
  if (!(threshold > 0.0f)) return All();
  int first = 0;
  while (BucketIsEmpty(cum_mass_, first)) ++first;
  if (prob_[Members(first)[0]] < threshold) return Normalize(first, 1);  // at least one token
  // Buckets before b hold larger probabilities than the threshold, buckets after it smaller.
  const int b = BucketOfBits(std::bit_cast<uint32_t>(threshold));
  if (b >= kBuckets) return All();
  const std::vector<int32_t>& ids = Members(b);
  int64_t n = 0;
  while (n < static_cast<int64_t>(ids.size()) && prob_[ids[n]] >= threshold) ++n;
  return Normalize(b, n);
}

int32_t OrderedVocab::First() {
  int b = 0;
  while (BucketIsEmpty(cum_mass_, b)) ++b;
  return Members(b)[0];
}

int32_t OrderedVocab::Last(const Cut& cut) {
  if (cut.bucket < kBuckets && cut.within > 0) return Members(cut.bucket)[cut.within - 1];
  int b = std::min(cut.bucket, kBuckets) - 1;
  while (b >= 0 && BucketIsEmpty(cum_mass_, b)) --b;
  CHECK_GE(b, 0) << "empty prefix";
  return Members(b).back();
}

void OrderedVocab::Tokens(const Cut& cut, std::vector<int32_t>* out) {
  const int end = std::min(cut.bucket, kBuckets);
  for (int b = 0; b < end; ++b) {
    if (BucketIsEmpty(cum_mass_, b)) continue;
    const std::vector<int32_t>& ids = Members(b);
    out->insert(out->end(), ids.begin(), ids.end());
  }
  if (cut.bucket < kBuckets && cut.within > 0) {
    const std::vector<int32_t>& ids = Members(cut.bucket);
    out->insert(out->end(), ids.begin(), ids.begin() + cut.within);
  }
}

}  // namespace deepinfer::engine
