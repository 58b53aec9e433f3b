#include "engine/swap_in.h"

#include <cstring>

#include "common/check.h"
#include "common/clock.h"

namespace deepinfer::engine {

SwapInCopier::SwapInCopier(const model::KvLayout& layout, uint8_t* block_base,
                           std::vector<const std::pair<int32_t, std::string>*> blocks)
    : layout_(layout), block_base_(block_base), blocks_(std::move(blocks)) {
  for (const auto* b : blocks_) {
    CHECK(static_cast<int64_t>(b->second.size()) == layout_.BlockBytes());
  }
}

SwapInCopier::~SwapInCopier() {
  if (thread_.joinable()) thread_.join();
}

void SwapInCopier::Start() {
  CHECK(!thread_.joinable());
  thread_ = std::thread([this] { Run(); });
}

void SwapInCopier::Run() {
  const int64_t t0 = MonotonicNanos();
  const int64_t block_bytes = layout_.BlockBytes();
  const int n = static_cast<int>(layout_.paged.size());
  for (int c = 0; c < n; ++c) {
    const int64_t off = layout_.PagedOffset(c);
    const int64_t len = layout_.paged[c].BlockBytes();
    for (const auto* b : blocks_) {
      std::memcpy(block_base_ + b->first * block_bytes + off, b->second.data() + off,
                  static_cast<size_t>(len));
    }
    absl::MutexLock lock(&mu_);
    done_ = c + 1;
    cv_.SignalAll();
  }
  copy_ns_ = MonotonicNanos() - t0;
}

void SwapInCopier::BeforeRead(int paged_index) const {
  absl::MutexLock lock(&mu_);
  if (done_ > paged_index) return;
  const int64_t t0 = MonotonicNanos();
  while (done_ <= paged_index) cv_.Wait(&mu_);
  wait_ns_ += MonotonicNanos() - t0;
}

SwapInStats SwapInCopier::Finish() {
  if (thread_.joinable()) thread_.join();
  SwapInStats s;
  s.bytes = static_cast<int64_t>(blocks_.size()) * layout_.BlockBytes();
  s.copy_ns = copy_ns_;
  absl::MutexLock lock(&mu_);
  s.wait_ns = wait_ns_;
  return s;
}

}  // namespace deepinfer::engine
