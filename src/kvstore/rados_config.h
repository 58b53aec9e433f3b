// Configuration of kvstore::RadosStore (rados_store.h) and the parser of its URL form, the value
// `deepinfer serve --kv-store` and `deepinfer kvstore --rados` take:
//
//   rados://POOL[?conf=PATH][&id=CLIENT][&keyring=PATH][&ns=NAMESPACE][&timeout_ms=N]
//
//   POOL        the data pool (an erasure-coded pool the operator created, docs/kv-store-rados.md)
//   conf        ceph.conf of the cluster (default: librados' search, /etc/ceph/ceph.conf)
//   id          cephx client id without "client." (default "admin")
//   keyring     keyring file (default: the conf's `keyring`)
//   ns          RADOS namespace inside the pool (default none): separate deployments (or
//               tests) share a pool without seeing each other's blocks
//   timeout_ms  deadline of every monitor and OSD operation (default 10000): an operation that
//               does not complete in time fails Unavailable (rados_osd_op_timeout,
//               rados_mon_op_timeout, client_mount_timeout)
// Thread-safety: plain data and pure functions.
#ifndef DEEPINFER_KVSTORE_RADOS_CONFIG_H_
#define DEEPINFER_KVSTORE_RADOS_CONFIG_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv/block_record.h"
#include "kvstore/config.h"

namespace deepinfer::kvstore {

struct RadosStoreConfig {
  std::string pool;
  std::string conf_path;  // "" = librados' default search
  std::string client_id = "admin";
  std::string keyring;     // "" = the conf's
  std::string name_space;  // RADOS namespace ("" = the default one)
  // Deadline of each RADOS operation (and of connecting), milliseconds; >= 1000 (librados
  // counts whole seconds: rounded up).
  int64_t timeout_ms = 10000;
  // GC (RadosStore::RunGc, `deepinfer kvstore --rados URL --gc-only`): record bytes the pool may
  // hold (logical, before erasure coding; 0 = no watermark eviction, TTL only), the watermarks,
  // and the TTL per kv::TrafficClass, as in KvStoreConfig.
  uint64_t capacity_bytes = 0;
  double high_watermark = 0.9;
  double low_watermark = 0.8;
  std::array<int64_t, kv::kNumTrafficClasses> ttl_nanos = {7 * kNanosPerDay, 3 * kNanosPerDay};
  // A hit rewrites an object's last-use xattr only when it is older than this (a hot prefix
  // costs one small write per interval, not one per lookup). Nanoseconds.
  int64_t refresh_nanos = 15 * kNanosPerSecond;
  // GC never removes a record used within this (its lookup's fetch is under way); keep it above
  // refresh_nanos plus the fetch deadline plus clock skew between hosts. Nanoseconds.
  int64_t hit_grace_nanos = 60 * kNanosPerSecond;
  // Metadata reads in flight: per LongestPrefix window, and during a GC scan.
  int lookup_batch = 64;
  int gc_batch = 256;

  // InvalidArgument naming the bad field.
  absl::Status Validate() const;
};

// Parses the URL form above. InvalidArgument naming the bad part.
absl::StatusOr<RadosStoreConfig> ParseRadosUrl(std::string_view url);

}  // namespace deepinfer::kvstore

#endif  // DEEPINFER_KVSTORE_RADOS_CONFIG_H_
