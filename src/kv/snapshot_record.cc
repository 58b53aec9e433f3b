#include "kv/snapshot_record.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "xxhash.h"

namespace deepinfer::kv {
namespace {

constexpr uint32_t kMagic = 0x4E534944;  // "DISN" as LE bytes
constexpr uint16_t kVersion = 1;
constexpr uint64_t kSeed = 0x6B76736E61707331ull;  // "kvsnaps1"
constexpr uint32_t kFlagApproximate = 1;

template <class T>
void Put(uint8_t* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
template <class T>
T Get(const uint8_t* p) {
  T v = 0;
  for (size_t i = sizeof(T); i-- > 0;) v = static_cast<T>((v << 8) | p[i]);
  return v;
}

}  // namespace

std::string EncodeSnapshotRecord(const BlockKey& key, uint64_t layout_id,
                                 const StateSnapshot& snapshot) {
  std::string out(kSnapshotRecordHeaderBytes + snapshot.bytes.size(), '\0');
  auto* h = reinterpret_cast<uint8_t*>(out.data());
  Put<uint32_t>(h + 0, kMagic);
  Put<uint16_t>(h + 4, kVersion);
  Put<uint16_t>(h + 6, static_cast<uint16_t>(kSnapshotRecordHeaderBytes));
  Put<uint64_t>(h + 8, layout_id);
  key.EncodeTo(h + 16);
  Put<uint32_t>(h + 32, snapshot.approximate ? kFlagApproximate : 0);
  Put<uint64_t>(h + 40, snapshot.bytes.size());
  Put<uint64_t>(h + 48, XXH3_64bits_withSeed(snapshot.bytes.data(), snapshot.bytes.size(), kSeed));
  Put<uint64_t>(h + 56, XXH3_64bits_withSeed(h, 56, kSeed));
  if (!snapshot.bytes.empty()) {
    std::memcpy(h + kSnapshotRecordHeaderBytes, snapshot.bytes.data(), snapshot.bytes.size());
  }
  return out;
}

absl::StatusOr<StateSnapshot> DecodeSnapshotRecord(std::string_view bytes, const BlockKey& key,
                                                   uint64_t layout_id, size_t state_bytes) {
  if (bytes.size() < kSnapshotRecordHeaderBytes) {
    return absl::DataLossError("snapshot record: shorter than its header");
  }
  const auto* h = reinterpret_cast<const uint8_t*>(bytes.data());
  if (Get<uint32_t>(h) != kMagic || Get<uint16_t>(h + 4) != kVersion ||
      Get<uint16_t>(h + 6) != kSnapshotRecordHeaderBytes) {
    return absl::DataLossError("snapshot record: bad magic, version or header size");
  }
  if (Get<uint64_t>(h + 56) != XXH3_64bits_withSeed(h, 56, kSeed)) {
    return absl::DataLossError("snapshot record: header checksum mismatch");
  }
  if (Get<uint64_t>(h + 8) != layout_id || BlockKey::DecodeFrom(h + 16) != key) {
    return absl::DataLossError("snapshot record: not the snapshot asked for (key or layout)");
  }
  const uint32_t flags = Get<uint32_t>(h + 32);
  if ((flags & ~kFlagApproximate) != 0 || Get<uint32_t>(h + 36) != 0) {
    return absl::DataLossError("snapshot record: unknown flags or reserved bytes");
  }
  const uint64_t n = Get<uint64_t>(h + 40);
  if (n != state_bytes || bytes.size() != kSnapshotRecordHeaderBytes + n) {
    return absl::DataLossError(absl::StrCat("snapshot record: ", n, " state bytes (", bytes.size(),
                                            " in all), expected ", state_bytes));
  }
  const uint8_t* state = h + kSnapshotRecordHeaderBytes;
  if (Get<uint64_t>(h + 48) != XXH3_64bits_withSeed(state, n, kSeed)) {
    return absl::DataLossError("snapshot record: state checksum mismatch");
  }
  StateSnapshot s;
  s.bytes.assign(state, state + n);
  s.approximate = (flags & kFlagApproximate) != 0;
  return s;
}

}  // namespace deepinfer::kv
