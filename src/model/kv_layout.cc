#include "model/kv_layout.h"

namespace deepinfer::model {
namespace {
int64_t Align64(int64_t n) { return (n + 63) & ~int64_t{63}; }
}  // namespace

int64_t KvLayout::PagedOffset(int index) const {
  int64_t off = 0;
  for (int i = 0; i < index; ++i) off += Align64(paged[i].BlockBytes());
  return off;
}

int64_t KvLayout::StateOffset(int index) const {
  int64_t off = 0;
  for (int i = 0; i < index; ++i) off += Align64(state[i].bytes);
  return off;
}

int64_t KvLayout::BlockBytes() const { return PagedOffset(static_cast<int>(paged.size())); }
int64_t KvLayout::StateBytes() const { return StateOffset(static_cast<int>(state.size())); }

}  // namespace deepinfer::model
