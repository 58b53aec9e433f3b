#include "kvstore/protocol.h"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace deepinfer::kvstore::wire {
namespace {

void PutLe(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
uint64_t GetLe(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

absl::Status ReadAll(int fd, char* buf, size_t n, bool* clean_eof) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = recv(fd, buf + done, n - done, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("kvstore socket recv: ", std::strerror(errno)));
    }
    if (r == 0) {
      if (clean_eof != nullptr) *clean_eof = done == 0;
      return absl::UnavailableError("kvstore socket closed");
    }
    done += static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteFrame(int fd, uint8_t tag, std::string_view a, std::string_view b) {
  const uint64_t length = 1 + a.size() + b.size();
  if (length > kMaxFrameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("kvstore frame of ", length, " bytes exceeds ", kMaxFrameBytes));
  }
  char head[5];
  for (int i = 0; i < 4; ++i) head[i] = static_cast<char>((length >> (8 * i)) & 0xFF);
  head[4] = static_cast<char>(tag);
  iovec iov[3] = {
      {head, 5}, {const_cast<char*>(a.data()), a.size()}, {const_cast<char*>(b.data()), b.size()}};
  int first = 0;
  size_t remaining = 5 + a.size() + b.size();
  while (remaining > 0) {
    msghdr msg{};
    msg.msg_iov = iov + first;
    msg.msg_iovlen = 3 - first;
    const ssize_t w = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("kvstore socket send: ", std::strerror(errno)));
    }
    remaining -= static_cast<size_t>(w);
    size_t left = static_cast<size_t>(w);
    while (first < 3 && left >= iov[first].iov_len) {
      left -= iov[first].iov_len;
      ++first;
    }
    if (first < 3) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return absl::OkStatus();
}

absl::Status ReadFrame(int fd, uint8_t* tag, std::string* body) {
  char head[4];
  if (absl::Status s = ReadAll(fd, head, 4, nullptr); !s.ok()) return s;
  const uint64_t length = GetLe(head, 4);
  if (length == 0 || length > kMaxFrameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("kvstore frame length ", length, " outside [1, ", kMaxFrameBytes, "]"));
  }
  char t;
  if (absl::Status s = ReadAll(fd, &t, 1, nullptr); !s.ok()) return s;
  *tag = static_cast<uint8_t>(t);
  body->resize(length - 1);
  return ReadAll(fd, body->data(), length - 1, nullptr);
}

std::string EncodeKey(const kv::BlockKey& key) {
  std::string out(16, '\0');
  key.EncodeTo(reinterpret_cast<uint8_t*>(out.data()));
  return out;
}

absl::StatusOr<kv::BlockKey> DecodeKey(std::string_view bytes) {
  if (bytes.size() != 16) {
    return absl::InvalidArgumentError(absl::StrCat("key must be 16 bytes, got ", bytes.size()));
  }
  return kv::BlockKey::DecodeFrom(reinterpret_cast<const uint8_t*>(bytes.data()));
}

std::string EncodeKeys(std::span<const kv::BlockKey> keys) {
  std::string out;
  out.reserve(4 + 16 * keys.size());
  PutLe(&out, keys.size(), 4);
  for (const kv::BlockKey& k : keys) {
    PutLe(&out, k.lo, 8);
    PutLe(&out, k.hi, 8);
  }
  return out;
}

absl::StatusOr<std::vector<kv::BlockKey>> DecodeKeys(std::string_view bytes) {
  if (bytes.size() < 4) return absl::InvalidArgumentError("key list shorter than its count");
  const uint64_t n = GetLe(bytes.data(), 4);
  if (n > kMaxChainKeys) {
    return absl::InvalidArgumentError(
        absl::StrCat("key list of ", n, " keys exceeds ", kMaxChainKeys));
  }
  if (bytes.size() != 4 + 16 * n) {
    return absl::InvalidArgumentError(
        absl::StrCat("key list of ", n, " keys has ", bytes.size(), " bytes"));
  }
  std::vector<kv::BlockKey> keys(n);
  for (uint64_t i = 0; i < n; ++i) {
    keys[i].lo = GetLe(bytes.data() + 4 + 16 * i, 8);
    keys[i].hi = GetLe(bytes.data() + 12 + 16 * i, 8);
  }
  return keys;
}

std::string EncodeU32(uint32_t v) {
  std::string out;
  PutLe(&out, v, 4);
  return out;
}

absl::StatusOr<uint32_t> DecodeU32(std::string_view bytes) {
  if (bytes.size() != 4) return absl::InvalidArgumentError("expected a 4-byte count");
  return static_cast<uint32_t>(GetLe(bytes.data(), 4));
}

std::string EncodeStats(const kv::BlockStoreStats& s) {
  std::string out;
  for (uint64_t v :
       {s.records, s.bytes, s.capacity_bytes, s.hits, s.misses, s.puts, s.evicted_watermark,
        s.evicted_ttl, s.evicted_corrupt, s.deleted, s.gc_runs, s.gc_nanos}) {
    PutLe(&out, v, 8);
  }
  return out;
}

absl::StatusOr<kv::BlockStoreStats> DecodeStats(std::string_view bytes) {
  if (bytes.size() != 12 * 8) return absl::InvalidArgumentError("stats must be 96 bytes");
  kv::BlockStoreStats s;
  uint64_t* fields[] = {&s.records,         &s.bytes,   &s.capacity_bytes,    &s.hits,
                        &s.misses,          &s.puts,    &s.evicted_watermark, &s.evicted_ttl,
                        &s.evicted_corrupt, &s.deleted, &s.gc_runs,           &s.gc_nanos};
  for (int i = 0; i < 12; ++i) *fields[i] = GetLe(bytes.data() + 8 * i, 8);
  return s;
}

}  // namespace deepinfer::kvstore::wire
