#include "kv/snapshot_record.h"

#include <string>

#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "xxhash.h"

namespace deepinfer::kv {
namespace {

uint64_t LeU64(const std::string& s, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[at + i]);
  return v;
}

TEST(SnapshotRecordTest, RoundTripAndDocumentedLayout) {
  StateSnapshot snap;
  for (int i = 0; i < 192; ++i) snap.bytes.push_back(static_cast<uint8_t>(i * 7));
  snap.approximate = true;
  const BlockKey key{0x1122334455667788ull, 0x99AABBCCDDEEFF00ull};
  const std::string rec = EncodeSnapshotRecord(key, 0xABCDull, snap);
  ASSERT_EQ(rec.size(), 64u + 192u);
  EXPECT_EQ(rec.substr(0, 4), "DISN");
  EXPECT_EQ(static_cast<uint8_t>(rec[4]), 1);
  EXPECT_EQ(static_cast<uint8_t>(rec[6]), 64);
  EXPECT_EQ(LeU64(rec, 8), 0xABCDull);
  EXPECT_EQ(LeU64(rec, 16), key.lo);
  EXPECT_EQ(LeU64(rec, 24), key.hi);
  EXPECT_EQ(static_cast<uint8_t>(rec[32]), 1);  // approximate
  EXPECT_EQ(LeU64(rec, 40), 192u);
  EXPECT_EQ(LeU64(rec, 48), XXH3_64bits_withSeed(rec.data() + 64, 192, 0x6B76736E61707331ull));
  EXPECT_EQ(LeU64(rec, 56), XXH3_64bits_withSeed(rec.data(), 56, 0x6B76736E61707331ull));
  ASSERT_OK_AND_ASSIGN(StateSnapshot back, DecodeSnapshotRecord(rec, key, 0xABCD, 192));
  EXPECT_EQ(back.bytes, snap.bytes);
  EXPECT_TRUE(back.approximate);
}

TEST(SnapshotRecordTest, AnyMismatchOrDamageIsDataLoss) {
  StateSnapshot snap;
  snap.bytes.assign(100, 5);
  const BlockKey key{1, 2};
  const std::string rec = EncodeSnapshotRecord(key, 9, snap);
  auto code = [](const absl::StatusOr<StateSnapshot>& s) { return s.status().code(); };
  EXPECT_EQ(code(DecodeSnapshotRecord(rec, BlockKey{1, 3}, 9, 100)), absl::StatusCode::kDataLoss);
  EXPECT_EQ(code(DecodeSnapshotRecord(rec, key, 8, 100)), absl::StatusCode::kDataLoss);
  EXPECT_EQ(code(DecodeSnapshotRecord(rec, key, 9, 99)), absl::StatusCode::kDataLoss);
  EXPECT_EQ(code(DecodeSnapshotRecord(rec.substr(0, 100), key, 9, 100)),
            absl::StatusCode::kDataLoss);
  std::string bad = rec;
  bad[64 + 50] ^= 1;  // state byte
  EXPECT_EQ(code(DecodeSnapshotRecord(bad, key, 9, 100)), absl::StatusCode::kDataLoss);
  bad = rec;
  bad[40] ^= 1;  // header byte
  EXPECT_EQ(code(DecodeSnapshotRecord(bad, key, 9, 100)), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace deepinfer::kv
