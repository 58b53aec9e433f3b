#include "kv/block_record.h"

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "xxhash.h"

namespace deepinfer::kv {
namespace {

using ::deepinfer::testing::StatusIs;

std::vector<int32_t> Tokens(int32_t start) {
  std::vector<int32_t> v(128);
  std::iota(v.begin(), v.end(), start);
  return v;
}

uint64_t LeU64(const std::string& s, size_t off) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[off + i]);
  return v;
}

std::string Payload(size_t n, uint8_t seed) {
  std::string p(n, '\0');
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<char>((i * 131 + seed) & 0xFF);
  return p;
}

TEST(BlockRecordTest, RoundTripAndDocumentedLayout) {
  const BlockKey parent = ComputeBlockKey(kRootBlockKey, 9, 77, Tokens(0));
  const BlockMeta meta = MakeBlockMeta(parent, 9, 77, Tokens(128), TrafficClass::kAgent);
  const std::string payload = Payload(1000, 3);
  ASSERT_OK_AND_ASSIGN(std::string rec, EncodeBlockRecord(meta, payload));
  ASSERT_EQ(rec.size(), 600u + 1000u);

  // Layout checked by hand against docs/kv-format.md §2.
  EXPECT_EQ(rec.substr(0, 4), "DIKV");
  EXPECT_EQ(static_cast<uint8_t>(rec[4]), 2);  // version 2, LE
  EXPECT_EQ(static_cast<uint8_t>(rec[5]), 0);
  EXPECT_EQ(static_cast<uint8_t>(rec[6]) | (static_cast<uint8_t>(rec[7]) << 8), 600);
  EXPECT_EQ(LeU64(rec, 8), 77u);
  EXPECT_EQ(LeU64(rec, 16), 9u);
  EXPECT_EQ(LeU64(rec, 24), meta.key.lo);
  EXPECT_EQ(LeU64(rec, 32), meta.key.hi);
  EXPECT_EQ(LeU64(rec, 40), parent.lo);
  EXPECT_EQ(LeU64(rec, 48), parent.hi);
  EXPECT_EQ(static_cast<uint8_t>(rec[56]), 128);
  EXPECT_EQ(static_cast<uint8_t>(rec[60]), 1);  // agent
  EXPECT_EQ(static_cast<uint8_t>(rec[61]), 0);  // flags: exact
  EXPECT_EQ(LeU64(rec, 64), 1000u);
  EXPECT_EQ(LeU64(rec, 72),
            XXH3_64bits_withSeed(payload.data(), payload.size(), 0x6B76726563726431ull));
  EXPECT_EQ(static_cast<uint8_t>(rec[80 + 4 * 5]), 128 + 5);  // token 5 = 133
  EXPECT_EQ(LeU64(rec, 592), XXH3_64bits_withSeed(rec.data(), 592, 0x6B76726563726431ull));
  EXPECT_EQ(rec.substr(600), payload);

  ASSERT_OK_AND_ASSIGN(DecodedBlockRecord dec, DecodeBlockRecord(rec, meta.key));
  EXPECT_EQ(dec.meta.key, meta.key);
  EXPECT_EQ(dec.meta.parent, parent);
  EXPECT_EQ(dec.meta.cache_salt, 9u);
  EXPECT_EQ(dec.meta.layout_id, 77u);
  EXPECT_EQ(dec.meta.traffic_class, TrafficClass::kAgent);
  EXPECT_EQ(dec.meta.tokens, meta.tokens);
  EXPECT_EQ(dec.payload, payload);
}

TEST(BlockRecordTest, EmptyPayloadRoundTrips) {
  const BlockMeta meta = MakeBlockMeta(kRootBlockKey, 0, 0, Tokens(0));
  ASSERT_OK_AND_ASSIGN(std::string rec, EncodeBlockRecord(meta, ""));
  ASSERT_OK_AND_ASSIGN(DecodedBlockRecord dec, DecodeBlockRecord(rec));
  EXPECT_TRUE(dec.payload.empty());
}

TEST(BlockRecordTest, EncodeRejectsInconsistentKey) {
  BlockMeta meta = MakeBlockMeta(kRootBlockKey, 0, 0, Tokens(0));
  meta.tokens[3] = 1234;
  EXPECT_THAT(EncodeBlockRecord(meta, "x"), StatusIs(absl::StatusCode::kInvalidArgument));
}

// Every single-bit change of every header byte and of payload bytes is DataLoss.
TEST(BlockRecordTest, CorruptionOfAnyByteIsDetected) {
  const BlockMeta meta = MakeBlockMeta(kRootBlockKey, 5, 6, Tokens(11), TrafficClass::kChat);
  ASSERT_OK_AND_ASSIGN(const std::string rec, EncodeBlockRecord(meta, Payload(4096, 1)));
  for (size_t i = 0; i < rec.size(); i += (i < 600 ? 1 : 37)) {
    for (int bit : {0, 7}) {
      std::string bad = rec;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      EXPECT_THAT(DecodeBlockRecord(bad), StatusIs(absl::StatusCode::kDataLoss))
          << "byte " << i << " bit " << bit;
    }
  }
}

TEST(BlockRecordTest, FieldRewrittenWithValidHeaderChecksumIsDetected) {
  // An attacker-style change that also fixes the header checksum is still caught by the key
  // recomputation (tokens, parent, salt, layout) or by the field checks.
  const BlockMeta meta = MakeBlockMeta(kRootBlockKey, 5, 6, Tokens(11));
  ASSERT_OK_AND_ASSIGN(const std::string rec, EncodeBlockRecord(meta, Payload(64, 2)));
  auto reseal = [](std::string s) {
    const uint64_t c = XXH3_64bits_withSeed(s.data(), 592, kRecordChecksumSeed);
    for (int i = 0; i < 8; ++i) s[592 + i] = static_cast<char>((c >> (8 * i)) & 0xFF);
    return s;
  };
  for (size_t off : {8u, 16u, 24u, 40u, 56u, 60u, 61u, 80u + 4u * 100u}) {
    std::string bad = rec;
    bad[off] = static_cast<char>(bad[off] ^ 0x40);
    EXPECT_THAT(DecodeBlockRecord(reseal(bad)), StatusIs(absl::StatusCode::kDataLoss))
        << "offset " << off;
  }
  // Payload length field changed and resealed: length mismatch.
  std::string bad = rec;
  bad[64] = static_cast<char>(bad[64] + 1);
  EXPECT_THAT(DecodeBlockRecord(reseal(bad)), StatusIs(absl::StatusCode::kDataLoss));
}

TEST(BlockRecordTest, TruncatedExtendedAndWrongKeyAreDataLoss) {
  const BlockMeta meta = MakeBlockMeta(kRootBlockKey, 0, 1, Tokens(0));
  ASSERT_OK_AND_ASSIGN(const std::string rec, EncodeBlockRecord(meta, Payload(300, 9)));
  for (size_t n : {0ul, 10ul, 599ul, 600ul, rec.size() - 1}) {
    EXPECT_THAT(DecodeBlockRecord(rec.substr(0, n)), StatusIs(absl::StatusCode::kDataLoss))
        << "truncated to " << n;
  }
  EXPECT_THAT(DecodeBlockRecord(rec + "x"), StatusIs(absl::StatusCode::kDataLoss));
  const BlockKey other = ComputeBlockKey(kRootBlockKey, 0, 1, Tokens(1));
  EXPECT_THAT(DecodeBlockRecord(rec, other), StatusIs(absl::StatusCode::kDataLoss));
  ASSERT_OK_AND_ASSIGN(BlockRecordHeader h, DecodeBlockRecordHeader(rec.substr(0, 600)));
  EXPECT_EQ(h.payload_bytes, 300u);
}

TEST(BlockRecordTest, ApproximateFlagRoundTripsAndUnknownFlagsAreDataLoss) {
  BlockMeta meta = MakeBlockMeta(kRootBlockKey, 1, 2, Tokens(0));
  meta.approximate = true;
  ASSERT_OK_AND_ASSIGN(std::string rec, EncodeBlockRecord(meta, Payload(64, 1)));
  EXPECT_EQ(static_cast<uint8_t>(rec[61]), 1);
  ASSERT_OK_AND_ASSIGN(DecodedBlockRecord d, DecodeBlockRecord(rec, meta.key));
  EXPECT_TRUE(d.meta.approximate);
  // An unknown flag bit (with a valid header checksum) is refused.
  rec[61] = 3;
  const uint64_t sum = XXH3_64bits_withSeed(rec.data(), 592, 0x6B76726563726431ull);
  for (int i = 0; i < 8; ++i) rec[592 + i] = static_cast<char>((sum >> (8 * i)) & 0xFF);
  EXPECT_EQ(DecodeBlockRecord(rec).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace deepinfer::kv
