// A caller-owned, grow-only scratch buffer for ops that take a workspace (Linear, attention).
// Ops themselves never allocate; a model keeps one Workspace per thread of control and asks it
// for LinearWorkspaceBytes(...) before each call. Get() reallocates only when a larger size is
// requested, so steady-state decoding allocates nothing.
#ifndef DEEPINFER_KERNELS_WORKSPACE_H_
#define DEEPINFER_KERNELS_WORKSPACE_H_

#include <cstddef>
#include <cstdlib>
#include <new>

namespace deepinfer::kernels {

class Workspace {
 public:
  Workspace() = default;
  ~Workspace() { std::free(data_); }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // A 64-byte aligned buffer of at least `bytes` bytes, valid until the next Get() with a
  // larger size or destruction. Contents are not preserved across growth.
  void* Get(size_t bytes) {
    if (bytes > capacity_) {
      std::free(data_);
      const size_t rounded = (bytes + 63) / 64 * 64;
      data_ = std::aligned_alloc(64, rounded);
      if (data_ == nullptr) throw std::bad_alloc();
      capacity_ = rounded;
    }
    return data_;
  }
  // Typed convenience: `floats` floats.
  float* GetFloats(size_t floats) { return static_cast<float*>(Get(floats * sizeof(float))); }
  size_t capacity() const { return capacity_; }

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace deepinfer::kernels

#endif  // DEEPINFER_KERNELS_WORKSPACE_H_
