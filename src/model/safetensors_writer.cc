#include "model/safetensors_writer.h"

#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "nlohmann/json.hpp"

namespace deepinfer::model {
namespace {

int64_t ElementSize(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "BF16" || dtype == "F16" || dtype == "I16") return 2;
  if (dtype == "I64" || dtype == "F64" || dtype == "U64") return 8;
  return 1;
}

}  // namespace

void SafetensorsWriter::Add(const std::string& name, const std::string& dtype,
                            const std::vector<int64_t>& shape, std::span<const uint8_t> bytes) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  CHECK_EQ(n * ElementSize(dtype), static_cast<int64_t>(bytes.size())) << name;
  tensors_[name] = Entry{dtype, shape, std::vector<uint8_t>(bytes.begin(), bytes.end()),
                         static_cast<int64_t>(bytes.size()), nullptr};
}

void SafetensorsWriter::AddGenerated(const std::string& name, const std::string& dtype,
                                     const std::vector<int64_t>& shape,
                                     std::function<void(uint8_t*)> fill) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  tensors_[name] = Entry{dtype, shape, {}, n * ElementSize(dtype), std::move(fill)};
}

void SafetensorsWriter::Remove(const std::string& name) { tensors_.erase(name); }

int64_t SafetensorsWriter::data_bytes() const {
  int64_t total = 0;
  for (const auto& [name, e] : tensors_) total += (e.size + 63) / 64 * 64;
  return total;
}

absl::Status SafetensorsWriter::Write(const std::string& path) const {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  int64_t offset = 0;
  std::vector<std::pair<const Entry*, int64_t>> layout;
  for (const auto& [name, e] : tensors_) {
    const int64_t size = e.size;
    header[name] = {
        {"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + size}}};
    layout.push_back({&e, offset});
    offset += (size + 63) / 64 * 64;
  }
  std::string text = header.dump();
  // Pad so that the data buffer starts 64-byte aligned in the file (8 + header length).
  while ((8 + text.size()) % 64 != 0) text.push_back(' ');
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (f == nullptr) return absl::InvalidArgumentError(absl::StrCat("cannot write ", path));
  uint64_t len = text.size();
  uint8_t len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<uint8_t>(len >> (8 * i));
  bool ok = std::fwrite(len_bytes, 1, 8, f.get()) == 8;
  ok = ok && std::fwrite(text.data(), 1, text.size(), f.get()) == text.size();
  static const uint8_t kZeros[64] = {};
  std::vector<uint8_t> buf;
  for (const auto& [e, off] : layout) {
    const uint8_t* data = e->bytes.data();
    if (e->fill) {
      buf.assign(e->size, 0);
      e->fill(buf.data());
      data = buf.data();
    }
    const size_t size = static_cast<size_t>(e->size);
    ok = ok && std::fwrite(data, 1, size, f.get()) == size;
    const size_t pad = (64 - size % 64) % 64;
    ok = ok && std::fwrite(kZeros, 1, pad, f.get()) == pad;
  }
  if (!ok) return absl::InvalidArgumentError(absl::StrCat("write failed: ", path));
  return absl::OkStatus();
}

}  // namespace deepinfer::model
