// KV tiers (issue "KV cache system, part 3"): time to first token of an 8,000-token prompt on
// the DeepSeek-V4 `bench` preset served from L2 against computed, as a ratio, and the fetch
// bandwidth achieved next to the disk's read bandwidth. One iteration:
//   1. engine A (fresh L1 arena, a kvstore::KvStore on a fresh directory under the build dir)
//      computes the prompt (nothing cached anywhere: the "computed" TTFT) and writes its blocks
//      back to L1 and L2; the bench waits until the write queue is empty, then drops A and its L1.
//   2. the store's record files are fdatasync'ed and dropped from the page cache
//      (posix_fadvise DONTNEED), and the store is reopened from its directory, as another
//      process would: engine B's reads come from the disk, not from memory.
//   3. engine B (a fresh L1 arena: another machine, or a restart without the shared memory)
//      serves the same prompt: its blocks are fetched from L2 into L1 and swapped in; there is
//      no snapshot, so the default replay mode recomputes the last block (bounded replay).
//   4. the disk's read bandwidth: every record file of the store read sequentially with
//      O_DIRECT (no page cache), the same bytes the fetch read.
// Counters: ttft_computed_s, ttft_l2_s, ttft_speedup, cached_tokens, fetch_MBps
// (EngineStats tiers.fetched_bytes / tiers.fetch_nanos), disk_odirect_MBps, store_MB.
// Run: build/src/engine/kv_tiers_bench --benchmark_repetitions=3 (medians printed).
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/check.h"
#include "engine/engine.h"
#include "engine/llm.h"
#include "kv/block_record.h"
#include "kv/host_tier.h"
#include "kvstore/store.h"
#include "model/deepseek_v4_make_test_model.h"
#include "model/model.h"

namespace deepinfer::engine {
namespace {

namespace fs = std::filesystem;

constexpr int kPromptTokens = 8000;

std::unique_ptr<model::CausalLM> LoadBenchModel() {
  const std::string dir = DSV4_BENCH_DIR;
  if (!fs::exists(dir + "/model.safetensors")) {
    auto config = model::dsv4::TestModelPreset("bench");
    CHECK(config.ok());
    CHECK(model::dsv4::WriteTestModel(*config, 1, dir).ok());
  }
  auto m = model::LoadModel(dir, model::LoadOptions{});
  CHECK(m.ok()) << m.status();
  return std::move(*m);
}

std::unique_ptr<kvstore::KvStore> OpenStore(const std::string& dir) {
  kvstore::KvStoreConfig c;
  c.dir = dir;
  c.capacity_bytes = uint64_t{16} << 30;
  c.sync = false;  // durability is not what is measured; the files are synced before step 3
  c.background_gc = false;
  auto s = kvstore::KvStore::Open(c, kvstore::Env::Posix());
  CHECK(s.ok()) << s.status();
  return std::move(*s);
}

struct Run {
  double ttft_s = 0;
  int cached = 0;
  KvTierStats tiers;
  int64_t swap_in_bytes = 0, swap_in_copy_ns = 0, swap_in_wait_ns = 0;
};

// Serves `prompt` once on a fresh engine whose L1 is a fresh arena and whose L2 is `store`.
Run Serve(const std::vector<int32_t>& prompt, kv::BlockStore* store, const std::string& shm) {
  auto m = LoadBenchModel();
  const model::KvLayout& layout = m->kv_layout();
  (void)kv::HostTier::Unlink(shm);
  auto host = kv::HostTier::Create(
      shm, kv::kBlockRecordHeaderBytes + static_cast<size_t>(layout.BlockBytes()),
      kPromptTokens / 128 + 64);
  CHECK(host.ok()) << host.status();
  EngineConfig config;
  config.enable_prefix_caching = true;
  config.kv_memory_bytes = int64_t{4} << 30;
  config.max_num_batched_tokens = 2048;
  config.tiers.host_tier = host->get();
  config.tiers.store = store;
  config.tiers.fetch_timeout_ms = 600000;  // measure the fetch, never cut it short
  config.tiers.write_queue_blocks = 4096;
  Run r;
  {
    auto llm = LLM::Create(std::move(m), config);
    CHECK(llm.ok()) << llm.status();
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = 1;
    p.ignore_eos = true;
    auto out = (*llm)->Generate({prompt}, p);
    CHECK(out.ok()) << out.status();
    const SampleOutput& s = (*out)[0].samples[0];
    r.ttft_s = static_cast<double>(s.first_token_ns - (*out)[0].arrival_ns) * 1e-9;
    r.cached = s.cached_tokens;
    // Let write-back finish (asynchronous) before the engine goes.
    for (int i = 0; i < 6000 && (*llm)->engine().Stats().tiers.write_queue_depth > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const EngineStats st = (*llm)->engine().Stats();
    r.tiers = st.tiers;
    r.swap_in_bytes = st.swap_in_bytes;
    r.swap_in_copy_ns = st.swap_in_copy_ns;
    r.swap_in_wait_ns = st.swap_in_wait_ns;
  }
  host->reset();
  (void)kv::HostTier::Unlink(shm);
  return r;
}

// fdatasync + POSIX_FADV_DONTNEED on every file under `dir`; returns their total size.
int64_t DropFromPageCache(const std::string& dir) {
  int64_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    (void)::fdatasync(fd);
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    total += static_cast<int64_t>(e.file_size());
    ::close(fd);
  }
  return total;
}

// Reads every file under `dir` with O_DIRECT, 4 MiB at a time; returns bytes per second.
double ODirectReadBandwidth(const std::string& dir) {
  constexpr size_t kChunk = size_t{4} << 20;
  void* buf = nullptr;
  CHECK(::posix_memalign(&buf, 4096, kChunk) == 0);
  int64_t bytes = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_DIRECT);
    if (fd < 0) continue;
    for (;;) {
      const ssize_t n = ::read(fd, buf, kChunk);
      if (n <= 0) break;
      bytes += n;
    }
    ::close(fd);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::free(buf);
  return static_cast<double>(bytes) / s;
}

void BM_TtftFromL2VsComputed(benchmark::State& state) {
  int rep = 0;
  for (auto _ : state) {
    const std::string dir = std::string(DEEPINFER_BINARY_DIR) + "/kv_tiers_bench/store-" +
                            std::to_string(getpid()) + "-" + std::to_string(rep++);
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::mt19937 rng(1234 + rep);  // each repetition starts from an empty store directory
    std::vector<int32_t> prompt(kPromptTokens);
    for (int32_t& t : prompt) t = 3 + static_cast<int32_t>(rng() % 120000);
    const std::string shm_a = "/deepinfer-bench-" + std::to_string(getpid()) + "-a";
    const std::string shm_b = "/deepinfer-bench-" + std::to_string(getpid()) + "-b";
    Run computed;
    {
      auto store = OpenStore(dir);
      computed = Serve(prompt, store.get(), shm_a);
    }
    const int64_t store_bytes = DropFromPageCache(dir);
    Run from_l2;
    {
      auto store = OpenStore(dir);  // another process's view: the directory only
      from_l2 = Serve(prompt, store.get(), shm_b);
    }
    const double disk_bps = ODirectReadBandwidth(dir);
    fs::remove_all(dir);
    CHECK_EQ(computed.cached, 0);
    state.counters["prompt_tokens"] = kPromptTokens;
    state.counters["cached_tokens"] = from_l2.cached;
    state.counters["written_blocks"] = static_cast<double>(computed.tiers.writes);
    state.counters["dropped_writes"] = static_cast<double>(computed.tiers.dropped_writes);
    state.counters["fetched_blocks"] = static_cast<double>(from_l2.tiers.fetched_blocks);
    state.counters["store_MB"] = static_cast<double>(store_bytes) / 1e6;
    state.counters["ttft_computed_s"] = computed.ttft_s;
    state.counters["ttft_l2_s"] = from_l2.ttft_s;
    state.counters["ttft_speedup"] = computed.ttft_s / from_l2.ttft_s;
    state.counters["fetch_ms"] = static_cast<double>(from_l2.tiers.fetch_nanos) * 1e-6;
    // Swap-in L1 -> pool beside the forward: copy time, time the forward waited for it, and the
    // part of the copy the forward hid (1 - wait / copy).
    state.counters["swap_in_MB"] = static_cast<double>(from_l2.swap_in_bytes) / 1e6;
    state.counters["swap_in_copy_ms"] = static_cast<double>(from_l2.swap_in_copy_ns) * 1e-6;
    state.counters["swap_in_wait_ms"] = static_cast<double>(from_l2.swap_in_wait_ns) * 1e-6;
    if (from_l2.swap_in_copy_ns > 0) {
      state.counters["swap_in_hidden"] =
          1.0 - static_cast<double>(from_l2.swap_in_wait_ns) / from_l2.swap_in_copy_ns;
    }
    state.counters["fetch_MBps"] =
        from_l2.tiers.fetch_nanos > 0 ? static_cast<double>(from_l2.tiers.fetched_bytes) * 1e3 /
                                            static_cast<double>(from_l2.tiers.fetch_nanos)
                                      : 0;
    state.counters["disk_odirect_MBps"] = disk_bps / 1e6;
  }
}
BENCHMARK(BM_TtftFromL2VsComputed)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

}  // namespace
}  // namespace deepinfer::engine

BENCHMARK_MAIN();
