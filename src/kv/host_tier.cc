#include "kv/host_tier.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace deepinfer::kv {

namespace {

constexpr uint64_t kArenaMagic = 0x3149544C564B4944ull;  // "DIKVLTI1"
constexpr uint32_t kArenaVersion = 1;
constexpr size_t kPage = 4096;

enum SlotState : uint32_t { kFree = 0, kWriting = 1, kReady = 2 };

struct ArenaHeader {
  std::atomic<uint64_t> magic;  // written last by the creator (release), checked by Open
  uint32_t version;
  int32_t num_slots;
  uint64_t slot_bytes;
  uint32_t num_buckets;  // power of two
  uint32_t pad0;
  uint64_t meta_offset;
  uint64_t buckets_offset;
  uint64_t data_offset;
  uint64_t total_bytes;
  pthread_mutex_t mu;  // process-shared, robust; guards everything below and all SlotMeta
  int32_t lru_head;    // most recently used ready slot, -1 if none
  int32_t lru_tail;    // least recently used ready slot
  int32_t free_head;   // free list through SlotMeta::next
  int32_t used;
  uint64_t hits;
  uint64_t misses;
  uint64_t inserts;
  uint64_t evictions;
};

struct SlotMeta {
  BlockKey key;
  uint64_t length;
  int32_t prev;
  int32_t next;
  int32_t bucket_next;
  uint32_t pins;
  uint32_t state;
  uint32_t pad;
};

size_t AlignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

absl::Status ErrnoStatus(int err, const std::string& what) {
  const std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(msg);
    case EEXIST:
      return absl::AlreadyExistsError(msg);
    case EINVAL:
    case ENAMETOOLONG:
      return absl::InvalidArgumentError(msg);
    case ENOMEM:
    case ENOSPC:
    case EMFILE:
    case ENFILE:
      return absl::ResourceExhaustedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace

// Typed accessors over the mapped arena. All methods except the constructor require the
// arena mutex (taken by Lock).
struct HostTier::Arena {
  explicit Arena(void* base) : h(static_cast<ArenaHeader*>(base)) {
    auto* b = static_cast<uint8_t*>(base);
    meta = reinterpret_cast<SlotMeta*>(b + h->meta_offset);
    buckets = reinterpret_cast<int32_t*>(b + h->buckets_offset);
    data = b + h->data_offset;
  }
  ArenaHeader* h;
  SlotMeta* meta;
  int32_t* buckets;
  uint8_t* data;

  // RAII lock; takes over a mutex whose owner died.
  struct Lock {
    explicit Lock(ArenaHeader* h) : mu(&h->mu) {
      const int rc = pthread_mutex_lock(mu);
      if (rc == EOWNERDEAD) {
        pthread_mutex_consistent(mu);
      } else {
        CHECK_EQ(rc, 0) << "host tier mutex: " << std::strerror(rc);
      }
    }
    ~Lock() { pthread_mutex_unlock(mu); }
    pthread_mutex_t* mu;
  };

  uint32_t Bucket(const BlockKey& k) const {
    return static_cast<uint32_t>(BlockKeyHash()(k)) & (h->num_buckets - 1);
  }
  int32_t Find(const BlockKey& k) const {
    for (int32_t s = buckets[Bucket(k)]; s >= 0; s = meta[s].bucket_next) {
      if (meta[s].key == k) return s;
    }
    return -1;
  }
  void BucketInsert(int32_t s) {
    int32_t& head = buckets[Bucket(meta[s].key)];
    meta[s].bucket_next = head;
    head = s;
  }
  void BucketRemove(int32_t s) {
    int32_t* p = &buckets[Bucket(meta[s].key)];
    while (*p != s) {
      CHECK_GE(*p, 0) << "host tier: slot missing from its bucket";
      p = &meta[*p].bucket_next;
    }
    *p = meta[s].bucket_next;
    meta[s].bucket_next = -1;
  }
  void LruUnlink(int32_t s) {
    SlotMeta& m = meta[s];
    if (m.prev >= 0)
      meta[m.prev].next = m.next;
    else
      h->lru_head = m.next;
    if (m.next >= 0)
      meta[m.next].prev = m.prev;
    else
      h->lru_tail = m.prev;
    m.prev = m.next = -1;
  }
  void LruPushFront(int32_t s) {
    SlotMeta& m = meta[s];
    m.prev = -1;
    m.next = h->lru_head;
    if (h->lru_head >= 0)
      meta[h->lru_head].prev = s;
    else
      h->lru_tail = s;
    h->lru_head = s;
  }
  void Touch(int32_t s) {
    if (h->lru_head == s) return;
    LruUnlink(s);
    LruPushFront(s);
  }
  void PushFree(int32_t s) {
    meta[s].state = kFree;
    meta[s].pins = 0;
    meta[s].prev = -1;
    meta[s].next = h->free_head;
    h->free_head = s;
  }
  // A slot to write into: a free one, else the least-recently-used unpinned ready one
  // (evicted). -1 when every slot is pinned or being written.
  int32_t Allocate() {
    if (h->free_head >= 0) {
      const int32_t s = h->free_head;
      h->free_head = meta[s].next;
      meta[s].next = -1;
      return s;
    }
    for (int32_t s = h->lru_tail; s >= 0; s = meta[s].prev) {
      if (meta[s].pins == 0) {
        BucketRemove(s);
        LruUnlink(s);
        --h->used;
        ++h->evictions;
        return s;
      }
    }
    return -1;
  }
};

PinnedSlot::PinnedSlot(PinnedSlot&& other) noexcept
    : tier_(other.tier_), slot_(other.slot_), bytes_(other.bytes_) {
  other.tier_ = nullptr;
  other.slot_ = -1;
}

PinnedSlot& PinnedSlot::operator=(PinnedSlot&& other) noexcept {
  if (this != &other) {
    Release();
    tier_ = other.tier_;
    slot_ = other.slot_;
    bytes_ = other.bytes_;
    other.tier_ = nullptr;
    other.slot_ = -1;
  }
  return *this;
}

void PinnedSlot::Release() {
  if (tier_ != nullptr) tier_->Unpin(slot_);
  tier_ = nullptr;
  slot_ = -1;
  bytes_ = {};
}

absl::StatusOr<std::unique_ptr<HostTier>> HostTier::Create(const std::string& name,
                                                           size_t slot_bytes, int32_t num_slots) {
  if (name.size() < 2 || name[0] != '/' || name.find('/', 1) != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("host tier name '", name, "' must be '/' followed by a name without '/'"));
  }
  if (slot_bytes == 0 || num_slots <= 0) {
    return absl::InvalidArgumentError("host tier: slot_bytes and num_slots must be positive");
  }
  uint32_t num_buckets = 1;
  while (num_buckets < 2u * static_cast<uint32_t>(num_slots)) num_buckets <<= 1;
  const size_t meta_offset = AlignUp(sizeof(ArenaHeader), 64);
  const size_t buckets_offset = AlignUp(meta_offset + sizeof(SlotMeta) * num_slots, 64);
  const size_t data_offset = AlignUp(buckets_offset + sizeof(int32_t) * num_buckets, kPage);
  const size_t slot_stride = AlignUp(slot_bytes, 64);
  const size_t total = data_offset + slot_stride * static_cast<size_t>(num_slots);

  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("shm_open(", name, ")"));
  if (ftruncate(fd, static_cast<off_t>(total)) != 0) {
    const int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    return ErrnoStatus(err, absl::StrCat("ftruncate(", name, ", ", total, ")"));
  }
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_err = errno;
  close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(name.c_str());
    return ErrnoStatus(map_err, absl::StrCat("mmap(", name, ")"));
  }
  auto* h = static_cast<ArenaHeader*>(base);
  h->version = kArenaVersion;
  h->num_slots = num_slots;
  h->slot_bytes = slot_bytes;
  h->num_buckets = num_buckets;
  h->meta_offset = meta_offset;
  h->buckets_offset = buckets_offset;
  h->data_offset = data_offset;
  h->total_bytes = total;
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&h->mu, &attr);
  pthread_mutexattr_destroy(&attr);
  h->lru_head = h->lru_tail = -1;
  h->free_head = -1;
  h->used = 0;
  h->hits = h->misses = h->inserts = h->evictions = 0;
  Arena a(base);
  for (int32_t b = 0; b < static_cast<int32_t>(num_buckets); ++b) a.buckets[b] = -1;
  for (int32_t s = num_slots - 1; s >= 0; --s) {
    a.meta[s] = SlotMeta{};
    a.meta[s].bucket_next = -1;
    a.PushFree(s);
  }
  h->magic.store(kArenaMagic, std::memory_order_release);
  return std::unique_ptr<HostTier>(new HostTier(base, total));
}

absl::StatusOr<std::unique_ptr<HostTier>> HostTier::Open(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("shm_open(", name, ")"));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoStatus(err, absl::StrCat("fstat(", name, ")"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < sizeof(ArenaHeader)) {
    close(fd);
    return absl::DataLossError(absl::StrCat("host tier ", name, ": too small to be an arena"));
  }
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_err = errno;
  close(fd);
  if (base == MAP_FAILED) return ErrnoStatus(map_err, absl::StrCat("mmap(", name, ")"));
  auto* h = static_cast<ArenaHeader*>(base);
  if (h->magic.load(std::memory_order_acquire) != kArenaMagic || h->version != kArenaVersion ||
      h->total_bytes != size) {
    munmap(base, size);
    return absl::DataLossError(
        absl::StrCat("host tier ", name, ": not an initialised v", kArenaVersion, " arena"));
  }
  return std::unique_ptr<HostTier>(new HostTier(base, size));
}

absl::Status HostTier::Unlink(const std::string& name) {
  if (shm_unlink(name.c_str()) != 0)
    return ErrnoStatus(errno, absl::StrCat("shm_unlink(", name, ")"));
  return absl::OkStatus();
}

HostTier::HostTier(void* base, size_t mapped_bytes) : base_(base), mapped_bytes_(mapped_bytes) {}

HostTier::~HostTier() { munmap(base_, mapped_bytes_); }

size_t HostTier::slot_bytes() const { return static_cast<ArenaHeader*>(base_)->slot_bytes; }
int32_t HostTier::num_slots() const { return static_cast<ArenaHeader*>(base_)->num_slots; }

absl::Status HostTier::Put(const BlockKey& key, std::string_view bytes) {
  Arena a(base_);
  if (bytes.size() > a.h->slot_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host tier: block of ", bytes.size(), " bytes exceeds the slot size ", a.h->slot_bytes));
  }
  int32_t s;
  {
    Arena::Lock lock(a.h);
    if (const int32_t found = a.Find(key); found >= 0) {
      a.Touch(found);
      return absl::OkStatus();
    }
    s = a.Allocate();
    if (s < 0) {
      return absl::ResourceExhaustedError("host tier: every slot is pinned or being written");
    }
    a.meta[s].state = kWriting;
  }
  // The slot is reserved (in no list), so nobody else reads or writes it during the copy.
  const size_t stride = (a.h->slot_bytes + 63) / 64 * 64;
  if (!bytes.empty()) std::memcpy(a.data + stride * s, bytes.data(), bytes.size());
  Arena::Lock lock(a.h);
  if (a.Find(key) >= 0) {  // another writer published the same block meanwhile
    a.PushFree(s);
    return absl::OkStatus();
  }
  SlotMeta& m = a.meta[s];
  m.key = key;
  m.length = bytes.size();
  m.pins = 0;
  m.state = kReady;
  a.BucketInsert(s);
  a.LruPushFront(s);
  ++a.h->used;
  ++a.h->inserts;
  return absl::OkStatus();
}

absl::StatusOr<PinnedSlot> HostTier::Acquire(const BlockKey& key) {
  Arena a(base_);
  Arena::Lock lock(a.h);
  const int32_t s = a.Find(key);
  if (s < 0) {
    ++a.h->misses;
    return absl::NotFoundError(absl::StrCat("host tier: no block ", key.ToHex()));
  }
  ++a.h->hits;
  ++a.meta[s].pins;
  a.Touch(s);
  const size_t stride = (a.h->slot_bytes + 63) / 64 * 64;
  return PinnedSlot(this, s, std::span<const uint8_t>(a.data + stride * s, a.meta[s].length));
}

absl::StatusOr<std::string> HostTier::Get(const BlockKey& key) {
  auto pin = Acquire(key);
  if (!pin.ok()) return pin.status();
  return std::string(pin->view());
}

bool HostTier::Contains(const BlockKey& key) {
  Arena a(base_);
  Arena::Lock lock(a.h);
  return a.Find(key) >= 0;
}

absl::Status HostTier::Erase(const BlockKey& key) {
  Arena a(base_);
  Arena::Lock lock(a.h);
  const int32_t s = a.Find(key);
  if (s < 0) return absl::OkStatus();
  if (a.meta[s].pins > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("host tier: block ", key.ToHex(), " is pinned"));
  }
  a.BucketRemove(s);
  a.LruUnlink(s);
  --a.h->used;
  a.PushFree(s);
  return absl::OkStatus();
}

HostTierStats HostTier::Stats() {
  Arena a(base_);
  Arena::Lock lock(a.h);
  HostTierStats st;
  st.num_slots = a.h->num_slots;
  st.slot_bytes = a.h->slot_bytes;
  st.used_slots = a.h->used;
  st.hits = a.h->hits;
  st.misses = a.h->misses;
  st.inserts = a.h->inserts;
  st.evictions = a.h->evictions;
  for (int32_t s = 0; s < a.h->num_slots; ++s) {
    if (a.meta[s].pins > 0) ++st.pinned_slots;
  }
  return st;
}

void HostTier::Unpin(int32_t slot) {
  Arena a(base_);
  Arena::Lock lock(a.h);
  CHECK_GT(a.meta[slot].pins, 0u) << "host tier: unpin of an unpinned slot";
  --a.meta[slot].pins;
}

}  // namespace deepinfer::kv
