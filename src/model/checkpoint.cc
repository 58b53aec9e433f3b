#include "model/checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/status.h"
#include "common/strings.h"
#include "nlohmann/json.hpp"

namespace deepinfer::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct DTypeEntry {
  DType dtype;
  std::string_view name;
  int64_t size;
};

constexpr DTypeEntry kDTypes[] = {
    {DType::kBool, "BOOL", 1},      {DType::kU8, "U8", 1},          {DType::kI8, "I8", 1},
    {DType::kI16, "I16", 2},        {DType::kU16, "U16", 2},        {DType::kI32, "I32", 4},
    {DType::kU32, "U32", 4},        {DType::kI64, "I64", 8},        {DType::kU64, "U64", 8},
    {DType::kF16, "F16", 2},        {DType::kBF16, "BF16", 2},      {DType::kF32, "F32", 4},
    {DType::kF64, "F64", 8},        {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E5M2, "F8_E5M2", 1},
    {DType::kF8E8M0, "F8_E8M0", 1},
};

// Upper bound on the JSON header (the reference implementation uses 100 MB).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Reads a non-negative JSON integer that fits in int64. False otherwise.
bool GetNonNegative(const json& j, int64_t* out) {
  if (j.is_number_unsigned()) {
    uint64_t v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(v);
    return true;
  }
  if (j.is_number_integer()) {
    int64_t v = j.get<int64_t>();
    if (v < 0) return false;
    *out = v;
    return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<DType> ParseDType(std::string_view name) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.name == name) return e.dtype;
  }
  std::vector<std::string> names;
  for (const DTypeEntry& e : kDTypes) names.emplace_back(e.name);
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype '", AbslView(name), "' (supported: ", absl::StrJoin(names, ", "), ")"));
}

std::string_view DTypeName(DType dtype) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.dtype == dtype) return e.name;
  }
  return "?";
}

int64_t DTypeSize(DType dtype) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.dtype == dtype) return e.size;
  }
  CHECK(false) << "bad dtype " << static_cast<int>(dtype);
  return 0;
}

int64_t TensorView::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorView::DebugString() const {
  return absl::StrCat(name, " ", std::string(DTypeName(dtype)), ShapeString(shape));
}

// ---------------------------------------------------------------------------------------------
// SafetensorsFile

SafetensorsFile::~SafetensorsFile() {
  if (owns_mapping_ && base_ != nullptr) {
    munmap(const_cast<uint8_t*>(base_), size_);
  }
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::FailedPreconditionError(absl::StrCat(path, ": ", std::strerror(err)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ > 0) {
    void* p = mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return absl::ResourceExhaustedError(
          absl::StrCat(path, ": mmap of ", file->size_, " bytes failed: ", std::strerror(err)));
    }
    file->base_ = static_cast<const uint8_t*>(p);
    file->owns_mapping_ = true;
  }
  ::close(fd);
  RETURN_IF_ERROR(file->Parse());
  return file;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBytes(
    std::span<const uint8_t> bytes, const std::string& name) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = name;
  file->base_ = bytes.data();
  file->size_ = bytes.size();
  RETURN_IF_ERROR(file->Parse());
  return file;
}

void SafetensorsFile::Prefetch() const {
  if (owns_mapping_ && base_ != nullptr) {
    madvise(const_cast<uint8_t*>(base_), size_, MADV_WILLNEED);
  }
}

absl::Status SafetensorsFile::Parse() {
  const std::string& f = path_;
  if (size_ < 8) {
    return absl::DataLossError(absl::StrCat(f, ": truncated safetensors file (", size_,
                                            " bytes; the header length alone is 8)"));
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | base_[i];
  if (header_len > size_ - 8 || header_len > kMaxHeaderBytes) {
    return absl::DataLossError(absl::StrCat(f, ": header length ", header_len,
                                            " overflows the file (", size_ - 8,
                                            " bytes after the length field)"));
  }
  const char* header_begin = reinterpret_cast<const char*>(base_ + 8);
  json header = json::parse(header_begin, header_begin + header_len, nullptr,
                            /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return absl::DataLossError(absl::StrCat(f, ": header is not a JSON object"));
  }
  const uint64_t data_start = 8 + header_len;
  const int64_t data_size = static_cast<int64_t>(size_ - data_start);

  struct Range {
    int64_t begin, end;
    const std::string* name;
  };
  std::vector<Range> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) {
        return absl::DataLossError(absl::StrCat(f, ": __metadata__ is not an object"));
      }
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string()) {
          return absl::DataLossError(
              absl::StrCat(f, ": __metadata__ value '", m.key(), "' is not a string"));
        }
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = absl::StrCat(f, ": tensor '", name, "'");
    if (!entry.is_object())
      return absl::DataLossError(absl::StrCat(where, ": entry is not an object"));
    auto dt = entry.find("dtype");
    auto sh = entry.find("shape");
    auto off = entry.find("data_offsets");
    if (dt == entry.end() || !dt->is_string()) {
      return absl::DataLossError(absl::StrCat(where, ": missing or non-string \"dtype\""));
    }
    if (sh == entry.end() || !sh->is_array()) {
      return absl::DataLossError(absl::StrCat(where, ": missing or non-array \"shape\""));
    }
    if (off == entry.end() || !off->is_array() || off->size() != 2) {
      return absl::DataLossError(absl::StrCat(where, ": \"data_offsets\" must be [begin, end]"));
    }
    TensorView v;
    v.name = name;
    v.file = f;
    absl::StatusOr<DType> dtype = ParseDType(dt->get<std::string>());
    if (!dtype.ok()) return Annotate(dtype.status(), where);
    v.dtype = *dtype;
    // Element count with overflow checks: any product beyond the file size is already wrong.
    int64_t numel = 1;
    bool overflow = false;
    for (const json& d : *sh) {
      int64_t dim = 0;
      if (!GetNonNegative(d, &dim)) {
        return absl::DataLossError(
            absl::StrCat(where, ": shape entries must be non-negative integers"));
      }
      v.shape.push_back(dim);
      if (dim != 0 && numel > std::numeric_limits<int64_t>::max() / 8 / dim) overflow = true;
      numel *= overflow ? 1 : dim;
    }
    int64_t begin = 0, end = 0;
    if (!GetNonNegative((*off)[0], &begin) || !GetNonNegative((*off)[1], &end) || end < begin) {
      return absl::DataLossError(
          absl::StrCat(where, ": data_offsets must be non-negative integers with begin <= end"));
    }
    if (end > data_size) {
      return absl::DataLossError(absl::StrCat(where, ": data_offsets [", begin, ", ", end,
                                              ") are outside the file (data buffer is ", data_size,
                                              " bytes)"));
    }
    const int64_t expected = overflow ? -1 : numel * DTypeSize(v.dtype);
    if (expected != end - begin) {
      return absl::DataLossError(absl::StrCat(
          where, ": shape ", ShapeString(v.shape), " x ", std::string(DTypeName(v.dtype)),
          " needs ",
          overflow ? std::string("an impossibly large number of") : absl::StrCat(expected),
          " bytes but data_offsets span ", end - begin));
    }
    v.data = base_ + data_start + begin;
    v.byte_size = end - begin;
    auto [pos, inserted] = tensors_.emplace(name, std::move(v));
    ranges.push_back({begin, end, &pos->first});
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < ranges.size(); ++i) {
    const Range& prev = ranges[i - 1];
    const Range& cur = ranges[i];
    // Empty tensors occupy no bytes and cannot overlap anything.
    if (cur.begin < prev.end && cur.end > cur.begin && prev.end > prev.begin) {
      return absl::DataLossError(absl::StrCat(f, ": tensors '", *prev.name, "' [", prev.begin, ", ",
                                              prev.end, ") and '", *cur.name, "' [", cur.begin,
                                              ", ", cur.end, ") overlap"));
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Checkpoint

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& path,
                                                             const CheckpointOptions& options) {
  std::error_code ec;
  std::vector<std::string> shard_paths;
  std::map<std::string, std::string> weight_map;  // tensor -> shard path (sharded only)
  std::string index_path;
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    if (fs::exists(dir / "model.safetensors.index.json", ec)) {
      index_path = (dir / "model.safetensors.index.json").string();
      ASSIGN_OR_RETURN(std::string text, ReadFileToString(index_path));
      json index = json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (index.is_discarded() || !index.is_object()) {
        return absl::DataLossError(absl::StrCat(index_path, ": not a JSON object"));
      }
      auto wm = index.find("weight_map");
      if (wm == index.end() || !wm->is_object()) {
        return absl::DataLossError(absl::StrCat(index_path, ": missing \"weight_map\" object"));
      }
      std::set<std::string> seen;
      for (auto it = wm->begin(); it != wm->end(); ++it) {
        if (!it.value().is_string()) {
          return absl::DataLossError(
              absl::StrCat(index_path, ": weight_map entry '", it.key(), "' is not a string"));
        }
        const std::string shard = it.value().get<std::string>();
        const fs::path rel(shard);
        if (shard.empty() || rel.is_absolute() ||
            std::any_of(rel.begin(), rel.end(), [](const fs::path& c) { return c == ".."; })) {
          return absl::InvalidArgumentError(
              absl::StrCat(index_path, ": shard '", shard, "' of tensor '", it.key(),
                           "' is not a relative path inside the checkpoint directory"));
        }
        const std::string full = (dir / rel).string();
        weight_map[it.key()] = full;
        if (seen.insert(full).second) shard_paths.push_back(full);
      }
      if (shard_paths.empty()) {
        return absl::DataLossError(absl::StrCat(index_path, ": empty weight_map"));
      }
    } else if (fs::exists(dir / "model.safetensors", ec)) {
      shard_paths.push_back((dir / "model.safetensors").string());
    } else {
      for (const auto& entry : fs::directory_iterator(dir, ec)) {
        if (entry.path().extension() == ".safetensors")
          shard_paths.push_back(entry.path().string());
      }
      std::sort(shard_paths.begin(), shard_paths.end());
      if (shard_paths.size() != 1) {
        return absl::NotFoundError(absl::StrCat(
            path, ": no model.safetensors.index.json or model.safetensors",
            shard_paths.empty() ? " and no *.safetensors file"
                                : absl::StrCat(" and ", shard_paths.size(),
                                               " *.safetensors files without an index")));
      }
    }
  } else if (fs::exists(path, ec)) {
    shard_paths.push_back(path);
  } else {
    return absl::NotFoundError(absl::StrCat(path, ": no such file or directory"));
  }

  // Total bytes for progress (stat only; missing shards are reported when opened).
  int64_t total = 0;
  for (const std::string& p : shard_paths) {
    auto sz = fs::file_size(p, ec);
    if (!ec) total += static_cast<int64_t>(sz);
  }

  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());
  ckpt->path_ = path;
  int64_t done = 0;
  for (const std::string& p : shard_paths) {
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(p);
    if (!file.ok()) {
      if (!index_path.empty() && absl::IsNotFound(file.status())) {
        return absl::NotFoundError(
            absl::StrCat(p, ": shard listed in ", index_path, " does not exist"));
      }
      return file.status();
    }
    if (options.prefetch) (*file)->Prefetch();
    done += (*file)->file_bytes();
    ckpt->file_bytes_ += (*file)->file_bytes();
    for (const auto& [name, view] : (*file)->tensors()) {
      if (!weight_map.empty()) {
        auto wm = weight_map.find(name);
        // Tensors a shard holds but the index does not list are ignored, as in transformers.
        if (wm == weight_map.end() || wm->second != p) continue;
      }
      auto [it, inserted] = ckpt->index_.emplace(name, &view);
      if (!inserted) {
        return absl::DataLossError(
            absl::StrCat("tensor '", name, "' is in both ", it->second->file, " and ", p));
      }
      ckpt->tensor_bytes_ += view.byte_size;
    }
    ckpt->files_.push_back(std::move(*file));
    if (options.progress) options.progress(done, std::max(total, done));
  }
  for (const auto& [name, shard] : weight_map) {
    if (ckpt->index_.find(name) == ckpt->index_.end()) {
      return absl::DataLossError(absl::StrCat(index_path, " maps tensor '", name, "' to ", shard,
                                              ", which does not contain it"));
    }
  }
  return ckpt;
}

absl::StatusOr<TensorView> Checkpoint::Get(std::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError(
        absl::StrCat("tensor '", std::string(name), "' not found in checkpoint ", path_));
  }
  return *it->second;
}

absl::StatusOr<TensorView> Checkpoint::GetTyped(std::string_view name, DType dtype,
                                                const std::vector<int64_t>& shape) const {
  ASSIGN_OR_RETURN(TensorView v, Get(name));
  if (v.dtype != dtype || v.shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        v.file, ": tensor '", v.name, "' is ", std::string(DTypeName(v.dtype)),
        ShapeString(v.shape), ", expected ", std::string(DTypeName(dtype)), ShapeString(shape)));
  }
  return v;
}

bool Checkpoint::Has(std::string_view name) const { return index_.find(name) != index_.end(); }

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(index_.size());
  for (const auto& [name, view] : index_) names.push_back(name);
  return names;
}

const std::map<std::string, std::string>& Checkpoint::metadata() const {
  static const std::map<std::string, std::string> kEmpty;
  return files_.empty() ? kEmpty : files_.front()->metadata();
}

}  // namespace deepinfer::model
