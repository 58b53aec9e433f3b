// KV tiers in the engine's serving path (issue "KV cache system, part 3"): write-back of
// complete blocks to the host tier (L1) and a KV store (L2), fetch + swap-in on admission, an
// engine restarted on the same store, and the fault cases (store down, stalling past the fetch
// deadline, corrupt and mismatched records, failed writes). The FakeModel's oracle
// (ReferenceLogits) is the uncached expectation: every request must produce it, whatever a tier
// does. Stateless FakeModel: a hit is plain block reuse, so L2 hits keep outputs exact.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/config.h"
#include "common/status_matchers.h"
#include "engine/engine.h"
#include "engine/kv_tiers.h"
#include "engine/llm.h"
#include "engine/testing/engine_test_util.h"
#include "engine/testing/fake_model.h"
#include "gtest/gtest.h"
#include "kv/host_tier.h"
#include "kv/snapshot_record.h"
#include "kvstore/fault_env.h"
#include "kvstore/store.h"
#include "model/model.h"

namespace deepinfer::engine {
namespace {

namespace fs = std::filesystem;
using ::deepinfer::engine::testing::ExpectAllReturned;
using ::deepinfer::engine::testing::FakeModel;
using ::deepinfer::engine::testing::FakeModelOptions;
using ::deepinfer::engine::testing::Greedy;
using ::deepinfer::engine::testing::MakeLLM;
using ::deepinfer::engine::testing::MakePrompts;
using ::deepinfer::engine::testing::ReferenceGreedy;

constexpr int kB = 128;

FakeModelOptions Stateless() {
  FakeModelOptions mo;
  mo.with_state = false;
  mo.eos_period = 0;
  return mo;
}

// A host-tier arena with a name unique to this test process and test.
class HostArena {
 public:
  explicit HostArena(const std::string& tag, int32_t slots = 64, size_t block_bytes = 4096) {
    name_ = "/deepinfer-test-" + std::to_string(getpid()) + "-" + tag;
    (void)kv::HostTier::Unlink(name_);
    auto t = kv::HostTier::Create(name_, kv::kBlockRecordHeaderBytes + block_bytes, slots);
    CHECK(t.ok()) << t.status();
    tier_ = std::move(*t);
  }
  ~HostArena() {
    // No leak: every reader (swap-in, fetch, verification) released its pin by the time the
    // engines using this arena are gone (they are declared after it, so destroyed before).
    EXPECT_EQ(tier_->Stats().pinned_slots, 0u) << name_;
    tier_.reset();
    (void)kv::HostTier::Unlink(name_);
  }
  kv::HostTier* get() { return tier_.get(); }

 private:
  std::string name_;
  std::unique_ptr<kv::HostTier> tier_;
};

std::string TempStoreDir(const std::string& tag) {
  const std::string d = std::string(DEEPINFER_BINARY_DIR) + "/kv_tiers_test/" + tag + "-" +
                        std::to_string(getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::unique_ptr<kvstore::KvStore> OpenStore(const std::string& dir,
                                            kvstore::Env* env = kvstore::Env::Posix()) {
  kvstore::KvStoreConfig c;
  c.dir = dir;
  c.capacity_bytes = uint64_t{1} << 30;
  c.sync = false;
  c.background_gc = false;
  auto s = kvstore::KvStore::Open(c, env);
  CHECK(s.ok()) << s.status();
  return std::move(*s);
}

// A BlockStore wrapper whose failures the test switches on.
class FaultyStore : public kv::BlockStore {
 public:
  explicit FaultyStore(kv::BlockStore* base) : base_(base) {}
  std::atomic<bool> down{false};
  std::atomic<int> stall_ms{0};
  std::atomic<bool> fail_puts{false};
  std::atomic<bool> mismatch{false};  // Get returns another block's record

  absl::Status Put(const kv::BlockMeta& meta, std::string_view payload) override {
    if (down) return absl::UnavailableError("store down");
    if (fail_puts) return absl::ResourceExhaustedError("disk full (injected)");
    return base_->Put(meta, payload);
  }
  absl::StatusOr<kv::StoredBlock> Get(const kv::BlockKey& key) override {
    Stall();
    if (down) return absl::UnavailableError("store down");
    if (mismatch) {
      // A record that claims the asked key but holds other tokens (a buggy or hostile store).
      absl::StatusOr<kv::StoredBlock> b = base_->Get(key);
      if (b.ok()) b->meta.tokens[0] ^= 1;
      return b;
    }
    return base_->Get(key);
  }
  absl::StatusOr<size_t> LongestPrefix(std::span<const kv::BlockKey> chain) override {
    Stall();
    if (down) return absl::UnavailableError("store down");
    return base_->LongestPrefix(chain);
  }
  absl::Status Delete(const kv::BlockKey& key) override { return base_->Delete(key); }
  absl::StatusOr<kv::BlockStoreStats> Stats() override { return base_->Stats(); }

 private:
  void Stall() {
    if (stall_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(stall_ms.load()));
  }
  kv::BlockStore* base_;
};

EngineConfig TierConfig(kv::HostTier* host, kv::BlockStore* store) {
  EngineConfig c;
  c.max_num_batched_tokens = 256;
  c.kv_memory_bytes = int64_t{32} << 20;
  c.tiers.host_tier = host;
  c.tiers.store = store;
  c.tiers.fetch_timeout_ms = 500;
  return c;
}

std::vector<int32_t> Prompt(uint32_t seed) { return MakePrompts(1, 700, 700, seed)[0]; }

// A greedy run's tokens and the final StepOutput's hit counts.
struct TierRun {
  std::vector<int32_t> tokens;
  int cached = 0, host = 0, store = 0;
};
// Through the engine's stream, to read the per-tier counts.
TierRun GenerateStream(Engine& engine, const std::vector<int32_t>& prompt, int max_tokens = 5) {
  GenerateRequest r;
  r.prompt = prompt;
  r.params = Greedy(max_tokens);
  auto stream = engine.Submit(r);
  CHECK(stream.ok()) << stream.status();
  TierRun run;
  while (std::optional<StepOutput> o = (*stream)->Next()) {
    run.tokens.insert(run.tokens.end(), o->token_ids.begin(), o->token_ids.end());
    run.cached = o->cached_tokens;
    run.host = o->cached_host_tokens;
    run.store = o->cached_store_tokens;
  }
  return run;
}

// No leak after Shutdown: the write-back queue drained (Shutdown finishes queued writes), no
// block is left in use, and nothing in L1 is pinned.
void ExpectNoTierLeak(Engine& engine, kv::HostTier* host) {
  // A fetch the request stopped waiting for (deadline) may still be running: it must end.
  EngineStats s = engine.Stats();
  for (int i = 0; i < 500 && s.tiers.fetch_queue_depth > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    s = engine.Stats();
  }
  EXPECT_EQ(s.tiers.fetch_queue_depth, 0);
  EXPECT_EQ(s.tiers.write_queue_depth, 0);
  EXPECT_EQ(s.kv_blocks_used, 0);
  if (host != nullptr) EXPECT_EQ(host->Stats().pinned_slots, 0u);
}

std::unique_ptr<Engine> MakeEngine(const FakeModelOptions& mo, const EngineConfig& c) {
  auto e = Engine::Create(std::make_unique<FakeModel>(mo), c);
  CHECK(e.ok()) << e.status();
  return std::move(*e);
}

std::vector<int32_t> Oracle(const FakeModelOptions& mo, const std::vector<int32_t>& p, int n) {
  FinishReason finish;
  return ReferenceGreedy(FakeModel(mo), p, n, &finish);
}

TEST(KvTiersTest, RestartedEngineHitsTheStoreAndTheHostTier) {
  const FakeModelOptions mo = Stateless();
  const std::string dir = TempStoreDir("restart");
  auto store = OpenStore(dir);
  HostArena l1("restart-l1");
  const std::vector<int32_t> p = Prompt(1);
  {
    auto engine = MakeEngine(mo, TierConfig(l1.get(), store.get()));
    const TierRun first = GenerateStream(*engine, p);
    EXPECT_EQ(first.cached, 0);
    EXPECT_EQ(first.tokens, Oracle(mo, p, 5));
    engine->Shutdown();
    ExpectNoTierLeak(*engine, l1.get());
  }  // the engine's tiers finish their writes when it goes
  auto stats = store->Stats();
  ASSERT_OK(stats.status());
  EXPECT_EQ(stats->records, 5u);  // floor((700 + 5 - 1) / 128) complete blocks
  // Same machine (the host arena survived): the hit comes from L1.
  {
    auto engine = MakeEngine(mo, TierConfig(l1.get(), store.get()));
    const TierRun again = GenerateStream(*engine, p);
    EXPECT_EQ(again.cached, 5 * kB);
    EXPECT_EQ(again.host, 5 * kB);
    EXPECT_EQ(again.store, 0);
    EXPECT_EQ(again.tokens, Oracle(mo, p, 5));
    engine->Shutdown();
    ExpectNoTierLeak(*engine, l1.get());
    EXPECT_EQ(engine->Stats().kv_blocks_used, 0);
  }
  // Another machine (a fresh host arena) on the same store, after the store restarted too.
  store.reset();
  store = OpenStore(dir);
  HostArena other("restart-other");
  {
    auto engine = MakeEngine(mo, TierConfig(other.get(), store.get()));
    const TierRun remote = GenerateStream(*engine, p);
    EXPECT_EQ(remote.cached, 5 * kB);
    EXPECT_EQ(remote.store, 5 * kB);
    EXPECT_EQ(remote.tokens, Oracle(mo, p, 5));
    const EngineStats s = engine->Stats();
    EXPECT_EQ(s.tiers.fetched_blocks, 5);
    EXPECT_EQ(s.prefix_cache_store_hit_tokens, 5 * kB);
    engine->Shutdown();
    ExpectNoTierLeak(*engine, other.get());
    EXPECT_EQ(engine->Stats().kv_blocks_used, 0);
    EXPECT_EQ(engine->Stats().tiers.write_queue_depth, 0);
  }
  EXPECT_EQ(other.get()->Stats().used_slots, 5u);
}

TEST(KvTiersTest, StoreDownAtStartAndMidRunNeverChangesOutputs) {
  const FakeModelOptions mo = Stateless();
  auto store = OpenStore(TempStoreDir("down"));
  FaultyStore faulty(store.get());
  faulty.down = true;
  HostArena l1("down-l1");
  auto engine = MakeEngine(mo, TierConfig(l1.get(), &faulty));
  const std::vector<int32_t> p = Prompt(2);
  EXPECT_EQ(GenerateStream(*engine, p).tokens, Oracle(mo, p, 5));
  // Blocks reached L1 but not L2: the write failures are counted (once the writer got to them).
  EngineStats s = engine->Stats();
  for (int i = 0; i < 200 && s.tiers.l2_write_failures == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    s = engine->Stats();
  }
  EXPECT_GT(s.tiers.l2_write_failures, 0);
  faulty.down = false;
  const std::vector<int32_t> q = Prompt(3);
  EXPECT_EQ(GenerateStream(*engine, q).tokens, Oracle(mo, q, 5));
  // The store goes down again while a fetch is needed: a new machine (fresh L1) misses.
  faulty.down = true;
  HostArena fresh("down-fresh");
  auto engine2 = MakeEngine(mo, TierConfig(fresh.get(), &faulty));
  const TierRun r = GenerateStream(*engine2, q);
  EXPECT_EQ(r.cached, 0);
  EXPECT_EQ(r.tokens, Oracle(mo, q, 5));
  EXPECT_GT(engine2->Stats().tiers.fetch_failures, 0);
  engine->Shutdown();
  ExpectNoTierLeak(*engine, l1.get());
  engine2->Shutdown();
  ExpectNoTierLeak(*engine2, fresh.get());
  EXPECT_EQ(engine2->Stats().kv_blocks_used, 0);
}

TEST(KvTiersTest, StallPastTheFetchDeadlineSchedulesTheRequestAnyway) {
  const FakeModelOptions mo = Stateless();
  auto store = OpenStore(TempStoreDir("stall"));
  FaultyStore faulty(store.get());
  const std::vector<int32_t> p = Prompt(4);
  {
    HostArena l1("stall-w");
    auto writer = MakeEngine(mo, TierConfig(l1.get(), &faulty));
    GenerateStream(*writer, p);
  }
  faulty.stall_ms = 1500;  // every store call stalls 3x the 500 ms deadline
  HostArena l1("stall-r");
  auto engine = MakeEngine(mo, TierConfig(l1.get(), &faulty));
  const auto t0 = std::chrono::steady_clock::now();
  const TierRun r = GenerateStream(*engine, p);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.tokens, Oracle(mo, p, 5));
  EXPECT_EQ(r.store, 0);
  EXPECT_LT(waited, 1.4);  // did not wait for the stalled store
  faulty.stall_ms = 0;
  engine->Shutdown();
  ExpectNoTierLeak(*engine, l1.get());
}

TEST(KvTiersTest, CorruptAndMismatchedRecordsAreMissesNeverData) {
  const FakeModelOptions mo = Stateless();
  const std::string dir = TempStoreDir("corrupt");
  auto store = OpenStore(dir);
  const std::vector<int32_t> p = Prompt(5);
  {
    HostArena l1("corrupt-w");
    auto writer = MakeEngine(mo, TierConfig(l1.get(), store.get()));
    GenerateStream(*writer, p);
  }
  // Flip a payload byte of block 2's record on disk: blocks 0-1 still hit, 2+ do not.
  const std::vector<kv::BlockKey> keys = kv::ComputeBlockKeyChain(0, 0xFA4E, p);
  {
    const std::string path = store->RecordPath(keys[2]);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << path;
    f.seekp(kv::kBlockRecordHeaderBytes + 10);
    f.put('\x5A');
  }
  {
    HostArena l1("corrupt-r");
    auto engine = MakeEngine(mo, TierConfig(l1.get(), store.get()));
    const TierRun r = GenerateStream(*engine, p);
    EXPECT_EQ(r.tokens, Oracle(mo, p, 5));
    EXPECT_EQ(r.store, 2 * kB);
    engine->Shutdown();
    ExpectNoTierLeak(*engine, l1.get());
  }
  auto stats = store->Stats();
  ASSERT_OK(stats.status());
  EXPECT_GE(stats->evicted_corrupt, 1u);
  // A store that returns a record whose tokens do not match the key: nothing is used.
  FaultyStore faulty(store.get());
  faulty.mismatch = true;
  HostArena l1("mismatch");
  auto engine = MakeEngine(mo, TierConfig(l1.get(), &faulty));
  const TierRun r = GenerateStream(*engine, p);
  EXPECT_EQ(r.tokens, Oracle(mo, p, 5));
  EXPECT_EQ(r.store, 0);
  EXPECT_GE(engine->Stats().tiers.fetch_failures, 1);  // the mismatch is counted
  engine->Shutdown();
  ExpectNoTierLeak(*engine, l1.get());
  EXPECT_EQ(engine->Stats().kv_blocks_used, 0);
}

TEST(KvTiersTest, FailedWritesLeaveNoVisibleKey) {
  const FakeModelOptions mo = Stateless();
  const std::string dir = TempStoreDir("failwrite");
  kvstore::FaultInjectionEnv env(kvstore::Env::Posix());
  auto store = OpenStore(dir, &env);
  env.FailOp(kvstore::FaultInjectionEnv::Op::kAppend, ENOSPC);  // disk full, short writes
  HostArena l1("failwrite");
  const std::vector<int32_t> p = Prompt(6);
  {
    auto engine = MakeEngine(mo, TierConfig(l1.get(), store.get()));
    EXPECT_EQ(GenerateStream(*engine, p).tokens, Oracle(mo, p, 5));
    engine->Shutdown();
    ExpectNoTierLeak(*engine, l1.get());
    EXPECT_GT(engine->Stats().tiers.l2_write_failures, 0);
  }
  env.ClearFaults();
  const std::vector<kv::BlockKey> keys = kv::ComputeBlockKeyChain(0, 0xFA4E, p);
  for (const kv::BlockKey& k : keys) {
    EXPECT_EQ(store->Get(k).status().code(), absl::StatusCode::kNotFound);
  }
  auto n = store->LongestPrefix(keys);
  ASSERT_OK(n.status());
  EXPECT_EQ(*n, 0u);
}

TEST(KvTiersTest, AFullWriteQueueDropsAndCounts) {
  const FakeModelOptions mo = Stateless();
  auto store = OpenStore(TempStoreDir("queue"));
  FaultyStore faulty(store.get());
  faulty.stall_ms = 0;
  HostArena l1("queue");
  EngineConfig c = TierConfig(l1.get(), &faulty);
  c.tiers.write_queue_blocks = 1;
  auto engine = MakeEngine(mo, c);
  faulty.stall_ms = 200;  // the writer is slower than the engine
  const std::vector<int32_t> p = Prompt(7);
  EXPECT_EQ(GenerateStream(*engine, p).tokens, Oracle(mo, p, 5));
  EXPECT_GT(engine->Stats().tiers.dropped_writes, 0);
  faulty.stall_ms = 0;
  engine->Shutdown();
  ExpectNoTierLeak(*engine, l1.get());
}

TEST(KvTiersTest, SnapshotsInSharedMemorySurviveARestart) {
  FakeModelOptions mo;  // with window-like state: a hit needs a snapshot or a replay
  mo.eos_period = 0;
  HostArena l1("snap-l1");
  const std::string snap_name = "/deepinfer-test-" + std::to_string(getpid()) + "-snaps";
  (void)kv::HostTier::Unlink(snap_name);
  auto snaps = kv::HostTier::Create(
      snap_name, kv::kSnapshotRecordHeaderBytes + FakeModel(mo).kv_layout().StateBytes(), 16);
  ASSERT_OK(snaps.status());
  EngineConfig c = TierConfig(l1.get(), nullptr);
  c.tiers.snapshot_tier = snaps->get();
  const std::vector<int32_t> p = Prompt(8);
  const std::vector<int32_t> p1(p.begin(), p.begin() + 400);
  {
    auto engine = MakeEngine(mo, c);
    GenerateStream(*engine, p1, 2);  // leaves blocks 0-2 and the snapshot at 384
    engine->Shutdown();
    ExpectNoTierLeak(*engine, l1.get());
    EXPECT_GE(engine->Stats().tiers.snapshot_writes, 1);
  }
  auto engine = MakeEngine(mo, c);  // a new engine: empty pool and snapshot cache
  const TierRun r = GenerateStream(*engine, p);
  EXPECT_EQ(r.cached, 3 * kB);
  EXPECT_EQ(r.host, 3 * kB);
  EXPECT_EQ(r.tokens, Oracle(mo, p, 5));  // restored from the snapshot: no replay
  EXPECT_EQ(engine->Stats().prefix_cache_replays, 0);
  engine->Shutdown();
  ExpectNoTierLeak(*engine, l1.get());
  EXPECT_GE(engine->Stats().tiers.snapshot_reads, 1);
  EXPECT_EQ((*snaps)->Stats().pinned_slots, 0u);
  snaps->reset();
  (void)kv::HostTier::Unlink(snap_name);
}

// DeepSeek-V4 restarted on another machine (fresh host arena, no snapshots): the hit comes from
// the store and its last block is replayed. The reference is the same request on an uncached
// engine: on dsv4-tiny-a a replay is exact (docs/prefix-cache.md, "What a replay costs in
// accuracy": (L - 1)(W - 1) + W <= 128), so the logprobs must be bitwise equal.
TEST(KvTiersTest, DeepSeekV4RestartFromTheStoreWithAReplayEqualsTheUncachedRun) {
  const std::string dir = std::string(DEEPINFER_SHARED_DIR) + "/models/dsv4-tiny-a";
  if (!fs::exists(dir + "/config.json")) GTEST_SKIP() << "model absent: " << dir;
  EnvConfig env = Env();
  env.batch_invariant = true;
  SetEnvConfigForTesting(env);
  auto load = [&] {
    model::LoadOptions o;
    o.show_progress = false;
    auto m = model::LoadModel(dir, o);
    CHECK(m.ok()) << m.status();
    return std::move(*m);
  };
  std::mt19937 rng(77);
  std::vector<int32_t> p2(450);
  for (int32_t& t : p2) t = 3 + static_cast<int32_t>(rng() % 500);
  const std::vector<int32_t> p1(p2.begin(), p2.begin() + 300);
  SamplingParams sp = Greedy(6);
  sp.logprobs = 3;
  sp.ignore_eos = true;
  auto run = [&](Engine& e, const std::vector<int32_t>& prompt, StepOutput* last) {
    GenerateRequest r;
    r.prompt = prompt;
    r.params = sp;
    auto stream = e.Submit(r);
    CHECK(stream.ok()) << stream.status();
    std::vector<TokenLogprob> lps;
    while (std::optional<StepOutput> o = (*stream)->Next()) {
      lps.insert(lps.end(), o->logprobs.begin(), o->logprobs.end());
      *last = *o;
    }
    return lps;
  };
  auto store = OpenStore(TempStoreDir("dsv4"));
  EngineConfig c;
  c.kv_memory_bytes = int64_t{256} << 20;
  HostArena writer_l1("dsv4-w", 16, 1 << 16);
  {
    EngineConfig wc = c;
    wc.tiers.host_tier = writer_l1.get();
    wc.tiers.store = store.get();
    auto writer = Engine::Create(load(), wc);
    ASSERT_OK(writer.status());
    StepOutput last;
    run(**writer, p1, &last);
    (*writer)->Shutdown();
  }
  EngineConfig plain = c;
  plain.enable_prefix_caching = false;
  auto ref_engine = Engine::Create(load(), plain);
  ASSERT_OK(ref_engine.status());
  StepOutput ref_last;
  const std::vector<TokenLogprob> ref = run(**ref_engine, p2, &ref_last);

  HostArena fresh("dsv4-r", 16, 1 << 16);
  EngineConfig rc = c;
  rc.tiers.host_tier = fresh.get();
  rc.tiers.store = store.get();
  auto reader = Engine::Create(load(), rc);
  ASSERT_OK(reader.status());
  StepOutput last;
  const std::vector<TokenLogprob> got = run(**reader, p2, &last);
  // Cap 450 - 22 = 428: L1 = 256 (blocks 0-1 from the store), no snapshot: replay [128, 256).
  EXPECT_EQ(last.cached_tokens, kB);
  EXPECT_EQ(last.cached_store_tokens, kB);
  EXPECT_EQ(last.replayed_tokens, kB);
  EXPECT_TRUE(last.approximate);
  EXPECT_EQ(got, ref);
  (*reader)->Shutdown();
  ExpectNoTierLeak(**reader, fresh.get());
  env.batch_invariant = false;
  SetEnvConfigForTesting(env);
}

}  // namespace
}  // namespace deepinfer::engine
