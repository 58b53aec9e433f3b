// SwapInCopier: copies blocks read from the host tier into the engine's pool on a helper thread
// while the forward runs (KV-CACHE.md §3 "swap-in ... overlapped with the forward: layer ℓ's
// copy must be done before layer ℓ's attention runs, not before the forward starts").
//
// The copy goes paged cache by paged cache (KvLayout::paged order, which is layer order), each
// over every swapped-in block; the model calls BeforeRead(c) (model::PagedCacheGate) before it
// first reads cache c, which returns once cache c of every block is in place. Finish() waits for
// the rest (a model may skip caches it never reads), so nothing is left half-copied.
//
// Thread-safety: BeforeRead may be called from any thread (the model's kernel pool); Start and
// Finish from the runner thread.
#ifndef DEEPINFER_ENGINE_SWAP_IN_H_
#define DEEPINFER_ENGINE_SWAP_IN_H_

#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "model/kv_layout.h"
#include "model/model.h"

namespace deepinfer::engine {

// How a step's swap-in went (nanoseconds, bytes).
struct SwapInStats {
  int64_t bytes = 0;
  int64_t copy_ns = 0;  // the copier thread's time copying
  int64_t wait_ns = 0;  // time the forward spent waiting for caches not yet copied
};

class SwapInCopier : public model::PagedCacheGate {
 public:
  // `blocks`: (pool block id, the block's bytes: KvLayout::BlockBytes() of them). The payloads
  // and the pool memory outlive Finish().
  SwapInCopier(const model::KvLayout& layout, uint8_t* block_base,
               std::vector<const std::pair<int32_t, std::string>*> blocks);
  ~SwapInCopier() override;

  // Starts the copier thread.
  void Start();
  void BeforeRead(int paged_index) const override;
  // Waits for every copy; returns the step's stats.
  SwapInStats Finish();

 private:
  void Run();

  const model::KvLayout& layout_;
  uint8_t* const block_base_;
  const std::vector<const std::pair<int32_t, std::string>*> blocks_;
  mutable absl::Mutex mu_;
  mutable absl::CondVar cv_;  // signalled when done_ grows
  int done_ ABSL_GUARDED_BY(mu_) = 0;  // paged caches fully copied
  mutable int64_t wait_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t copy_ns_ = 0;  // written by the copier, read after join
  std::thread thread_;
};

}  // namespace deepinfer::engine

#endif  // DEEPINFER_ENGINE_SWAP_IN_H_
