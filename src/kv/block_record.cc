#include "kv/block_record.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "xxhash.h"

namespace deepinfer::kv {
namespace {

constexpr size_t kOffMagic = 0;
constexpr size_t kOffVersion = 4;
constexpr size_t kOffHeaderBytes = 6;
constexpr size_t kOffLayout = 8;
constexpr size_t kOffSalt = 16;
constexpr size_t kOffKey = 24;
constexpr size_t kOffParent = 40;
constexpr size_t kOffNumTokens = 56;
constexpr size_t kOffClass = 60;
constexpr size_t kOffFlags = 61;
constexpr size_t kOffReserved = 62;
constexpr uint8_t kFlagApproximate = 1;
constexpr size_t kOffPayloadBytes = 64;
constexpr size_t kOffPayloadChecksum = 72;
constexpr size_t kOffTokens = 80;
constexpr size_t kOffHeaderChecksum = kOffTokens + 4 * kKeyBlockTokens;
static_assert(kOffHeaderChecksum + 8 == kBlockRecordHeaderBytes);

template <typename T>
void Put(uint8_t* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i)
    p[i] = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
}
template <typename T>
T Get(const uint8_t* p) {
  uint64_t v = 0;
  for (size_t i = sizeof(T); i-- > 0;) v = (v << 8) | p[i];
  return static_cast<T>(v);
}

uint64_t Checksum(const void* data, size_t n) {
  return XXH3_64bits_withSeed(data, n, kRecordChecksumSeed);
}

}  // namespace

const char* TrafficClassName(TrafficClass c) {
  switch (c) {
    case TrafficClass::kChat:
      return "chat";
    case TrafficClass::kAgent:
      return "agent";
  }
  return "unknown";
}

BlockMeta MakeBlockMeta(const BlockKey& parent, uint64_t cache_salt, uint64_t layout_id,
                        std::span<const int32_t> tokens, TrafficClass traffic_class) {
  CHECK_EQ(tokens.size(), static_cast<size_t>(kKeyBlockTokens));
  BlockMeta meta;
  meta.parent = parent;
  meta.cache_salt = cache_salt;
  meta.layout_id = layout_id;
  meta.traffic_class = traffic_class;
  std::memcpy(meta.tokens.data(), tokens.data(), sizeof(int32_t) * kKeyBlockTokens);
  meta.key = ComputeBlockKey(parent, cache_salt, layout_id, tokens);
  return meta;
}

absl::StatusOr<std::string> EncodeBlockRecord(const BlockMeta& meta, std::string_view payload) {
  if (ComputeBlockKey(meta.parent, meta.cache_salt, meta.layout_id, meta.tokens) != meta.key) {
    return absl::InvalidArgumentError(
        absl::StrCat("block record: key ", meta.key.ToHex(),
                     " is not the hash of its parent, salt, layout id and tokens"));
  }
  std::string out(kBlockRecordHeaderBytes + payload.size(), '\0');
  auto* h = reinterpret_cast<uint8_t*>(out.data());
  Put<uint32_t>(h + kOffMagic, kBlockRecordMagic);
  Put<uint16_t>(h + kOffVersion, kBlockRecordVersion);
  Put<uint16_t>(h + kOffHeaderBytes, static_cast<uint16_t>(kBlockRecordHeaderBytes));
  Put<uint64_t>(h + kOffLayout, meta.layout_id);
  Put<uint64_t>(h + kOffSalt, meta.cache_salt);
  meta.key.EncodeTo(h + kOffKey);
  meta.parent.EncodeTo(h + kOffParent);
  Put<uint32_t>(h + kOffNumTokens, kKeyBlockTokens);
  h[kOffClass] = static_cast<uint8_t>(meta.traffic_class);
  h[kOffFlags] = meta.approximate ? kFlagApproximate : 0;
  Put<uint64_t>(h + kOffPayloadBytes, payload.size());
  Put<uint64_t>(h + kOffPayloadChecksum, Checksum(payload.data(), payload.size()));
  for (int i = 0; i < kKeyBlockTokens; ++i) {
    Put<uint32_t>(h + kOffTokens + 4 * i, static_cast<uint32_t>(meta.tokens[i]));
  }
  Put<uint64_t>(h + kOffHeaderChecksum, Checksum(h, kOffHeaderChecksum));
  if (!payload.empty()) std::memcpy(h + kBlockRecordHeaderBytes, payload.data(), payload.size());
  return out;
}

absl::StatusOr<BlockRecordHeader> DecodeBlockRecordHeader(std::string_view bytes) {
  if (bytes.size() < kBlockRecordHeaderBytes) {
    return absl::DataLossError(absl::StrCat("block record: ", bytes.size(),
                                            " bytes is shorter than the ", kBlockRecordHeaderBytes,
                                            "-byte header"));
  }
  const auto* h = reinterpret_cast<const uint8_t*>(bytes.data());
  if (Get<uint32_t>(h + kOffMagic) != kBlockRecordMagic) {
    return absl::DataLossError("block record: bad magic");
  }
  if (const uint16_t v = Get<uint16_t>(h + kOffVersion); v != kBlockRecordVersion) {
    return absl::DataLossError(absl::StrCat("block record: unsupported version ", v));
  }
  if (Get<uint16_t>(h + kOffHeaderBytes) != kBlockRecordHeaderBytes) {
    return absl::DataLossError("block record: bad header size");
  }
  if (Get<uint64_t>(h + kOffHeaderChecksum) != Checksum(h, kOffHeaderChecksum)) {
    return absl::DataLossError("block record: header checksum mismatch");
  }
  // The fields below are covered by the header checksum; checking them as well catches
  // records written by a buggy encoder.
  if (Get<uint32_t>(h + kOffNumTokens) != kKeyBlockTokens) {
    return absl::DataLossError("block record: token count is not 128");
  }
  if (h[kOffClass] >= kNumTrafficClasses) {
    return absl::DataLossError(absl::StrCat("block record: bad traffic class ", h[kOffClass]));
  }
  if ((h[kOffFlags] & ~kFlagApproximate) != 0) {
    return absl::DataLossError(absl::StrCat("block record: unknown flags ", h[kOffFlags]));
  }
  if (h[kOffReserved] != 0 || h[kOffReserved + 1] != 0) {
    return absl::DataLossError("block record: reserved bytes are not zero");
  }
  BlockRecordHeader out;
  BlockMeta& m = out.meta;
  m.layout_id = Get<uint64_t>(h + kOffLayout);
  m.cache_salt = Get<uint64_t>(h + kOffSalt);
  m.key = BlockKey::DecodeFrom(h + kOffKey);
  m.parent = BlockKey::DecodeFrom(h + kOffParent);
  m.traffic_class = static_cast<TrafficClass>(h[kOffClass]);
  m.approximate = (h[kOffFlags] & kFlagApproximate) != 0;
  for (int i = 0; i < kKeyBlockTokens; ++i) {
    m.tokens[i] = static_cast<int32_t>(Get<uint32_t>(h + kOffTokens + 4 * i));
  }
  out.payload_bytes = Get<uint64_t>(h + kOffPayloadBytes);
  out.payload_checksum = Get<uint64_t>(h + kOffPayloadChecksum);
  if (ComputeBlockKey(m.parent, m.cache_salt, m.layout_id, m.tokens) != m.key) {
    return absl::DataLossError(absl::StrCat("block record: key ", m.key.ToHex(),
                                            " does not match its parent, salt, layout and tokens"));
  }
  return out;
}

absl::StatusOr<DecodedBlockRecord> DecodeBlockRecord(std::string_view bytes,
                                                     std::optional<BlockKey> expected_key) {
  auto header = DecodeBlockRecordHeader(bytes);
  if (!header.ok()) return header.status();
  if (expected_key.has_value() && header->meta.key != *expected_key) {
    return absl::DataLossError(absl::StrCat("block record: holds key ", header->meta.key.ToHex(),
                                            ", expected ", expected_key->ToHex()));
  }
  const uint64_t available = bytes.size() - kBlockRecordHeaderBytes;
  if (header->payload_bytes != available) {
    return absl::DataLossError(absl::StrCat("block record: payload is ", available,
                                            " bytes, header says ", header->payload_bytes));
  }
  std::string_view payload = bytes.substr(kBlockRecordHeaderBytes);
  if (Checksum(payload.data(), payload.size()) != header->payload_checksum) {
    return absl::DataLossError("block record: payload checksum mismatch");
  }
  return DecodedBlockRecord{header->meta, payload};
}

}  // namespace deepinfer::kv
