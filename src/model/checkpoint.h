// Checkpoint: memory-mapped, zero-copy reader for Hugging Face safetensors checkpoints.
//
// File format (https://github.com/huggingface/safetensors, "Format"):
//   [8 bytes: N, little-endian u64][N bytes: UTF-8 JSON header][data buffer]
//   header = {"__metadata__": {str: str}?, "<tensor>": {"dtype": "F32", "shape": [..],
//             "data_offsets": [begin, end]}, ...}   offsets are relative to the data buffer.
// Sharded checkpoints list their files in `model.safetensors.index.json` ("weight_map":
// tensor name -> shard file name). Dtypes are those of shared/spec/deepseek-v4.md §2.2 plus the
// other byte-sized safetensors dtypes.
//
// Every header is validated when the file is opened; a malformed file gives a Status naming the
// file (and tensor), never a crash or an out-of-bounds read:
//   DataLoss        - truncated file, header length beyond the file, header not a JSON object,
//                     bad tensor entry, offsets outside the data buffer, overlapping tensors,
//                     byte count != shape x dtype size, index tensor absent from its shard
//   InvalidArgument - unknown dtype string; shard path escaping the checkpoint directory
//   NotFound        - no checkpoint in the directory, missing shard file, unknown tensor name
// Thread-safety: a Checkpoint is immutable after Open(); all methods are const and thread-safe.
// Views stay valid as long as the Checkpoint lives (the files stay mapped).
#ifndef DEEPINFER_MODEL_CHECKPOINT_H_
#define DEEPINFER_MODEL_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/check.h"

namespace deepinfer::model {

// Element types of safetensors tensors. Sub-byte formats (FP4) are stored packed in I8/U8
// tensors and interpreted by the model (spec §2.4), so every dtype here is whole bytes.
enum class DType {
  kBool,
  kU8,
  kI8,
  kI16,
  kU16,
  kI32,
  kU32,
  kI64,
  kU64,
  kF16,
  kBF16,
  kF32,
  kF64,
  kF8E4M3,  // "F8_E4M3" (e4m3fn: no infinities, 0x7f/0xff = NaN)
  kF8E5M2,  // "F8_E5M2"
  kF8E8M0,  // "F8_E8M0": power-of-two scale, value = 2^(e-127)
};

// Parses a safetensors dtype string ("F32", "BF16", "F8_E4M3", ...). InvalidArgument otherwise.
absl::StatusOr<DType> ParseDType(std::string_view name);
// The safetensors spelling of `dtype` ("F32", ...).
std::string_view DTypeName(DType dtype);
// Bytes per element (1, 2, 4 or 8).
int64_t DTypeSize(DType dtype);

// A read-only view of one tensor inside a mapped file. Row-major, shape as stored.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // first byte; alignment is whatever the file gives
  int64_t byte_size = 0;          // == NumElements() * DTypeSize(dtype)
  std::string file;               // path of the file holding it (for error messages)

  int64_t NumElements() const;
  // True when data is `alignment`-byte aligned (safetensors files written by HF are 8-aligned).
  bool IsAligned(int64_t alignment) const {
    return reinterpret_cast<uintptr_t>(data) % static_cast<uintptr_t>(alignment) == 0;
  }
  // Typed span over the elements. CHECKs that sizeof(T) == DTypeSize(dtype) and that data is
  // aligned for T; callers verify dtype (and IsAligned) first.
  template <typename T>
  std::span<const T> As() const;
  // "name F32[64, 512]" for messages and logs.
  std::string DebugString() const;
};

// One mapped safetensors file.
class SafetensorsFile {
 public:
  // Maps and validates `path`. Errors as described at the top of this file.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // Validates an in-memory image (tests, embedded files). `bytes` must outlive the result;
  // `name` is used in messages.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> FromBytes(std::span<const uint8_t> bytes,
                                                                    const std::string& name);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t file_bytes() const { return static_cast<int64_t>(size_); }
  // Tensors by name (sorted).
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  // The "__metadata__" string map (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Asks the kernel to read the whole mapping ahead (madvise WILLNEED). No-op for FromBytes.
  void Prefetch() const;

 private:
  SafetensorsFile() = default;
  absl::Status Parse();

  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  bool owns_mapping_ = false;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Options for Checkpoint::Open.
struct CheckpointOptions {
  // Called after each file is mapped and validated with (bytes mapped so far, total bytes), so
  // callers can show progress for large sharded checkpoints.
  std::function<void(int64_t done_bytes, int64_t total_bytes)> progress;
  // madvise(WILLNEED) each file after mapping, so weights stream in ahead of the first forward.
  bool prefetch = false;
};

// A whole checkpoint: one safetensors file or a sharded set.
class Checkpoint {
 public:
  // `path` is a directory (uses model.safetensors.index.json when present, else
  // model.safetensors, else the only *.safetensors file) or a single .safetensors file.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& path,
                                                          const CheckpointOptions& options = {});

  // The tensor called `name`. NotFound naming the tensor and the checkpoint otherwise.
  absl::StatusOr<TensorView> Get(std::string_view name) const;
  // Get() plus checks: dtype must be `dtype` and shape must equal `shape` (InvalidArgument naming
  // the tensor, the file, the expected and the actual dtype/shape otherwise).
  absl::StatusOr<TensorView> GetTyped(std::string_view name, DType dtype,
                                      const std::vector<int64_t>& shape) const;
  bool Has(std::string_view name) const;
  // All tensor names, sorted.
  std::vector<std::string> TensorNames() const;
  int64_t num_tensors() const { return static_cast<int64_t>(index_.size()); }
  // Sum of tensor byte sizes / of file sizes.
  int64_t tensor_bytes() const { return tensor_bytes_; }
  int64_t file_bytes() const { return file_bytes_; }
  // The checkpoint's directory (or the file, when opened on a file).
  const std::string& path() const { return path_; }
  // The "__metadata__" of the first file.
  const std::map<std::string, std::string>& metadata() const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  Checkpoint() = default;

  std::string path_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*, std::less<>> index_;
  int64_t tensor_bytes_ = 0;
  int64_t file_bytes_ = 0;
};

template <typename T>
std::span<const T> TensorView::As() const {
  CHECK_EQ(static_cast<int64_t>(sizeof(T)), DTypeSize(dtype)) << name;
  CHECK(IsAligned(alignof(T))) << name << " is not aligned for its element type";
  return std::span<const T>(reinterpret_cast<const T*>(data),
                            static_cast<size_t>(byte_size) / sizeof(T));
}

}  // namespace deepinfer::model

#endif  // DEEPINFER_MODEL_CHECKPOINT_H_
