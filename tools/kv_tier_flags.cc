#include "tools/kv_tier_flags.h"

#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/strings.h"
#include "kv/block_record.h"
#include "kv/snapshot_record.h"
#include "kvstore/client.h"
#include "kvstore/rados_store.h"
#include "kvstore/store.h"
#include "tools/engine_flags.h"

namespace deepinfer::cli {
namespace {

absl::StatusOr<int> PositiveIntFlag(const FlagSet& flags, const std::string& name) {
  absl::StatusOr<int64_t> v = flags.GetInt(name);
  if (!v.ok()) return v.status();
  if (*v < 1 || *v > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, ": expected a positive integer, got ", *v));
  }
  return static_cast<int>(*v);
}

// Maps shm arena `name` if it exists with `slot_bytes` slots, else creates it with as many slots
// as `bytes` holds. `flag` names the size flag in errors.
absl::StatusOr<std::unique_ptr<kv::HostTier>> OpenOrCreateArena(const std::string& name,
                                                                 size_t slot_bytes, int64_t bytes,
                                                                 const std::string& flag) {
  const int64_t slots = bytes / static_cast<int64_t>(slot_bytes);
  if (slots < 1 || slots > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", bytes, " bytes hold ", slots,
                                                   " records of ", slot_bytes,
                                                   " bytes; give room for at least one"));
  }
  absl::StatusOr<std::unique_ptr<kv::HostTier>> tier = kv::HostTier::Open(name);
  if (tier.ok() && (*tier)->slot_bytes() != slot_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--host-kv-name: arena ", name, " has ", (*tier)->slot_bytes(),
        "-byte slots but this model needs ", slot_bytes, " (another layout uses that name)"));
  }
  if (!tier.ok()) {
    tier = kv::HostTier::Create(name, slot_bytes, static_cast<int32_t>(slots));
    if (!tier.ok() && tier.status().code() == absl::StatusCode::kAlreadyExists) {
      tier = kv::HostTier::Open(name);  // another engine created it meanwhile
    }
  }
  return tier;
}

}  // namespace

void AddKvTierFlags(FlagSet& flags) {
  flags.AddString("host-kv-memory", "",
                  "host shared memory for the L1 KV tier, shared by this machine's engines and "
                  "kept across restarts (e.g. 4G; 0 = none; default 1G with a KV store, else 0)");
  flags.AddString("host-kv-name", "",
                  "POSIX shm name of the L1 arena (default /deepinfer-kv-<layout id>)");
  flags.AddString("host-snapshot-memory", "1G",
                  "host shared memory for SWA state snapshots next to the L1 tier, so a restarted "
                  "engine finds its predecessor's (0 = none; used only with an L1 tier)");
  flags.AddString("kv-store", "",
                  "L2 KV store: a node HOST:PORT (`deepinfer kvstore`), or a Ceph RADOS pool "
                  "rados://POOL?conf=PATH&id=CLIENT (GC: `deepinfer kvstore --rados URL "
                  "--gc-only`)");
  flags.AddString("kv-store-dir", "",
                  "L2 KV store as record files in this directory (local SSD or DFS mount), "
                  "shared with other engines; its GC runs on the storage side as `deepinfer "
                  "kvstore --dir PATH --gc-only --capacity SIZE` (or here with --kv-store-gc)");
  flags.AddBool("kv-store-gc", false,
                "also run the --kv-store-dir GC (rescans of the directory) in this process: for "
                "a single engine without a `deepinfer kvstore --gc-only` process");
  flags.AddString("kv-store-capacity", "64G",
                  "bytes of records --kv-store-dir may hold (the in-process GC's watermark base, "
                  "with --kv-store-gc)");
  flags.AddString("kv-fetch-timeout-ms", "2000",
                  "how long a request waits in the queue for its blocks from the KV store");
  flags.AddString("kv-write-queue", "1024",
                  "blocks queued for write-back at most (further writes are dropped, counted)");
}

absl::StatusOr<std::unique_ptr<KvTierSetup>> SetUpKvTiers(const FlagSet& flags,
                                                          const model::KvLayout& layout) {
  auto setup = std::make_unique<KvTierSetup>();
  const std::string node = flags.GetString("kv-store");
  const std::string dir = flags.GetString("kv-store-dir");
  if (!node.empty() && !dir.empty()) {
    return absl::InvalidArgumentError("--kv-store and --kv-store-dir are exclusive: pick one L2");
  }
  const bool has_store = !node.empty() || !dir.empty();
  const std::string host_text = flags.GetString("host-kv-memory");
  int64_t host_bytes = has_store ? int64_t{1} << 30 : 0;
  if (!host_text.empty()) {
    absl::StatusOr<int64_t> b = ParseByteSize("host-kv-memory", host_text, /*allow_zero=*/true);
    if (!b.ok()) return b.status();
    host_bytes = *b;
  }
  if (has_store && host_bytes == 0) {
    return absl::InvalidArgumentError(
        "--host-kv-memory: a KV store needs an L1 host tier to fetch into (give a size > 0)");
  }
  absl::StatusOr<int> fetch_ms = PositiveIntFlag(flags, "kv-fetch-timeout-ms");
  if (!fetch_ms.ok()) return fetch_ms.status();
  absl::StatusOr<int> queue = PositiveIntFlag(flags, "kv-write-queue");
  if (!queue.ok()) return queue.status();
  setup->options.fetch_timeout_ms = *fetch_ms;
  setup->options.write_queue_blocks = *queue;

  if (host_bytes > 0) {
    const size_t slot_bytes =
        kv::kBlockRecordHeaderBytes + static_cast<size_t>(layout.BlockBytes());
    std::string name = flags.GetString("host-kv-name");
    if (name.empty()) {
      char buf[48];
      std::snprintf(buf, sizeof(buf), "/deepinfer-kv-%016llx",
                    static_cast<unsigned long long>(layout.layout_id));
      name = buf;
    }
    absl::StatusOr<std::unique_ptr<kv::HostTier>> tier =
        OpenOrCreateArena(name, slot_bytes, host_bytes, "host-kv-memory");
    if (!tier.ok()) return tier.status();
    setup->host = std::move(*tier);
    absl::StrAppend(&setup->description, "L1 host tier ", name, " (", setup->host->num_slots(),
                    " blocks)");
    absl::StatusOr<int64_t> snap_bytes = ParseByteSize(
        "host-snapshot-memory", flags.GetString("host-snapshot-memory"), /*allow_zero=*/true);
    if (!snap_bytes.ok()) return snap_bytes.status();
    if (*snap_bytes > 0 && layout.StateBytes() > 0) {
      absl::StatusOr<std::unique_ptr<kv::HostTier>> snaps =
          OpenOrCreateArena(name + "-snap",
                            kv::kSnapshotRecordHeaderBytes + static_cast<size_t>(layout.StateBytes()),
                            *snap_bytes, "host-snapshot-memory");
      if (!snaps.ok()) return snaps.status();
      setup->snapshots = std::move(*snaps);
      absl::StrAppend(&setup->description, ", snapshots ", name, "-snap (",
                      setup->snapshots->num_slots(), " slots)");
    }
  }
  if (node.starts_with("rados://")) {
    absl::StatusOr<kvstore::RadosStoreConfig> c = kvstore::ParseRadosUrl(node);
    if (!c.ok()) return deepinfer::Annotate(c.status(), "--kv-store");
    absl::StatusOr<std::unique_ptr<kvstore::RadosStore>> store = kvstore::RadosStore::Open(*c);
    if (!store.ok()) return deepinfer::Annotate(store.status(), "--kv-store");
    setup->store = std::move(*store);
    absl::StrAppend(&setup->description, ", L2 RADOS pool ", c->pool,
                    c->name_space.empty() ? "" : " namespace ", c->name_space, " (client.",
                    c->client_id, "; GC: `deepinfer kvstore --rados ... --gc-only`)");
  } else if (!node.empty()) {
    const size_t colon = node.rfind(':');
    int port = 0;
    if (colon == std::string::npos || colon == 0 ||
        !absl::SimpleAtoi(AbslView(node.substr(colon + 1)), &port) || port < 1 ||
        port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("--kv-store: expected HOST:PORT, got '", node, "'"));
    }
    kvstore::KvStoreClientConfig c;
    c.host = node.substr(0, colon);
    c.port = port;
    c.timeout_ms = std::max(1000, *fetch_ms);
    setup->store = kvstore::KvStoreClient::Create(c);
    absl::StrAppend(&setup->description, ", L2 store node ", node);
  } else if (!dir.empty()) {
    absl::StatusOr<int64_t> cap =
        ParseByteSize("kv-store-capacity", flags.GetString("kv-store-capacity"));
    if (!cap.ok()) return cap.status();
    // Shared-directory mode (kvstore/store.h): other engines write the same directory and the
    // GC is a separate `deepinfer kvstore --gc-only` process unless --kv-store-gc.
    kvstore::KvStoreConfig c;
    c.dir = dir;
    c.capacity_bytes = static_cast<uint64_t>(*cap);
    c.shared = true;
    c.background_gc = flags.GetBool("kv-store-gc");
    absl::StatusOr<std::unique_ptr<kvstore::KvStore>> store = kvstore::KvStore::Open(c);
    if (!store.ok()) return store.status();
    setup->store = std::move(*store);
    absl::StrAppend(&setup->description, ", L2 shared store directory ", dir,
                    c.background_gc ? " (GC in this process)"
                                    : " (GC: `deepinfer kvstore --dir ... --gc-only`)");
  }
  setup->options.host_tier = setup->host.get();
  setup->options.snapshot_tier = setup->snapshots.get();
  setup->options.store = setup->store.get();
  return setup;
}

}  // namespace deepinfer::cli
