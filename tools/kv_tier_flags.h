// The KV tiers below the engine's block pool (KV-CACHE.md §3), from command-line flags, for the
// commands that build an engine (`deepinfer serve`):
//   --host-kv-memory SIZE   L1: host shared memory (a kv::HostTier arena shared by every engine
//                           of this machine and kept across restarts; 0 = none; default 1G
//                           when a store is given)
//   --host-snapshot-memory SIZE  SWA state snapshots in shared memory next to L1 (arena
//                           NAME-snap; default 1G with L1; 0 = none)
//   --host-kv-name NAME     its POSIX shm name (default /deepinfer-kv-<layout id>, so engines
//                           of one model share it and different models never do)
//   --kv-store HOST:PORT    L2: a `deepinfer kvstore` node
//   --kv-store rados://POOL?conf=PATH&id=CLIENT[&keyring=PATH&ns=NS&timeout_ms=N]
//                           L2: a Ceph RADOS pool (kvstore::RadosStore; its GC runs as
//                           `deepinfer kvstore --rados URL --gc-only`, docs/kv-store-rados.md)
//   --kv-store-dir PATH     L2: record files in PATH (local SSD or a DFS mount), shared with
//                           other engines (kvstore::KvStore shared mode); the LRU / TTL GC runs
//                           as `deepinfer kvstore --dir PATH --gc-only` on the storage side
//   --kv-store-gc           run that GC in this process instead (single-engine shape)
//   --kv-store-capacity SIZE  bytes of records --kv-store-dir may hold (default 64G)
//   --kv-fetch-timeout-ms N how long a request waits for its blocks from L2 (default 2000)
//   --kv-write-queue N      blocks queued for write-back at most (default 1024)
#ifndef DEEPINFER_TOOLS_KV_TIER_FLAGS_H_
#define DEEPINFER_TOOLS_KV_TIER_FLAGS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "kv/block_store.h"
#include "kv/host_tier.h"
#include "model/kv_layout.h"
#include "tools/cli_flags.h"

namespace deepinfer::cli {

// Declares the flags above.
void AddKvTierFlags(FlagSet& flags);

// The tiers an engine uses; must outlive the engine.
struct KvTierSetup {
  std::unique_ptr<kv::HostTier> host;
  std::unique_ptr<kv::HostTier> snapshots;
  std::unique_ptr<kv::BlockStore> store;
  engine::KvTierOptions options;  // points into host / store
  std::string description;        // for the start-up log line ("" when no tier)
};

// Opens (or creates) the tiers the flags ask for, sized for `layout`'s block records.
// Errors: InvalidArgument naming the flag (bad size, HOST:PORT or rados:// URL, both --kv-store
// and --kv-store-dir); the host tier's or store's error when they cannot be opened (a RADOS
// cluster that cannot be reached within its timeout_ms: Unavailable naming --kv-store). A store
// node that is down is not an error: the engine serves without it until it is up.
absl::StatusOr<std::unique_ptr<KvTierSetup>> SetUpKvTiers(const FlagSet& flags,
                                                          const model::KvLayout& layout);

}  // namespace deepinfer::cli

#endif  // DEEPINFER_TOOLS_KV_TIER_FLAGS_H_
