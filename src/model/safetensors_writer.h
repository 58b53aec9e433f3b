// Minimal safetensors writer (format: https://github.com/huggingface/safetensors): tensors are
// appended in memory and written as one file with an 8-byte little-endian header length, a JSON
// header (sorted names, data offsets) padded with spaces to 8 bytes, and the data buffer with
// every tensor 64-byte aligned. Used by make-test-model and tests.
#ifndef DEEPINFER_MODEL_SAFETENSORS_WRITER_H_
#define DEEPINFER_MODEL_SAFETENSORS_WRITER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace deepinfer::model {

class SafetensorsWriter {
 public:
  // Adds a tensor. `dtype` is the safetensors spelling ("F32", "BF16", "F8_E4M3", "F8_E8M0",
  // "I8", "I64"); bytes.size() must equal prod(shape) x element size (CHECKed).
  void Add(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
           std::span<const uint8_t> bytes);
  // Adds a tensor whose bytes are produced by `fill` (into a buffer of the exact size) only
  // while Write() runs, so large checkpoints never sit in memory as a whole.
  void AddGenerated(const std::string& name, const std::string& dtype,
                    const std::vector<int64_t>& shape, std::function<void(uint8_t*)> fill);
  // Removes a tensor (tests build malformed checkpoints with it). No-op when absent.
  void Remove(const std::string& name);
  // Writes the file. Errors: InvalidArgument naming the path when it cannot be written.
  absl::Status Write(const std::string& path) const;
  int64_t data_bytes() const;

 private:
  struct Entry {
    std::string dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
    int64_t size = 0;
    std::function<void(uint8_t*)> fill;  // set for generated tensors
  };
  std::map<std::string, Entry> tensors_;
};

}  // namespace deepinfer::model

#endif  // DEEPINFER_MODEL_SAFETENSORS_WRITER_H_
