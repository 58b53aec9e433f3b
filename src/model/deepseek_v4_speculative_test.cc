// DeepSeek-V4 speculative-decoding state (issue #26; ../shared/spec/speculative.md §2.3-2.4,
// §4.6, §7.3 E8 and E9) on random-weight checkpoints made by make-test-model:
//   - the state geometry, from first principles: window rings of window + 1 + k_max slots,
//     compressor rings of 2m + 1 + k_max (overlap, m = 4) and m + 1 + k_max entries (the m
//     entries of spec §4.6.2 are not enough for the non-overlap compressor: this test's E8
//     sweep failed with them — a rejected draft past the block's end wrapped onto an entry of
//     the block whose completion was rejected);
//   - E8 rollback as a frontier reset: a run whose steps verify L drafts and accept a of them
//     (no state copy, no restore, no recompute) holds, after every step, exactly the state of a
//     non-speculative run over the same committed tokens — window rings restricted to the
//     window-visible positions, compressor entries still to be pooled, compressed rows and
//     indexer keys of the committed blocks, the MTP ring — and its valid verify rows' logits
//     are the non-speculative run's, bitwise; (L, a) sweeps 1..5 x 0..L across ring wraps and
//     ratio 4 / 16 / 128 boundaries inside the verify span (the test counts that it saw them);
//   - E9: the MTP chain (ProposeDrafts, k = 1..5, after rounds whose provisional entries were
//     overwritten) equals a from-scratch chain in a fresh state over the full history, built
//     from the public ForwardMtp with the block outputs G read through the tracer.
// Both runs are the same binary with row-invariant kernels, so bitwise equality holds on every
// CPU (the comparison never involves a value computed by different arithmetic).
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "model/deepseek_v4.h"
#include "model/deepseek_v4_make_test_model.h"
#include "model/kv_layout.h"
#include "model/model.h"

namespace deepinfer::model::dsv4 {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxDrafts = kSpeculativeRollbackTokens - 1;  // k_max = 5

std::string TempDir(const std::string& name) {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string d = std::string(DEEPINFER_BINARY_DIR) + "/dsv4_spec_test_models/" + name + "." +
                        info->test_suite_name() + "." + info->name();
  fs::create_directories(d);
  return d;
}

std::unique_ptr<DeepseekV4Model> MakeModel(const std::string& preset, uint64_t seed,
                                            int64_t mtp_layers = 0) {
  EnvConfig env = Env();
  env.batch_invariant = true;
  SetEnvConfigForTesting(env);
  auto c = TestModelPreset(preset);
  CHECK(c.ok()) << c.status();
  if (mtp_layers > 0) {
    // One compress ratio per block: the added MTP modules are SWA-only, as mtp.0.
    c->compress_ratios.resize(c->num_layers + mtp_layers, 0);
    c->num_mtp_layers = mtp_layers;
  }
  const std::string dir = TempDir(preset + (mtp_layers > 0 ? "-mtp" + std::to_string(mtp_layers) : ""));
  CHECK(WriteTestModel(*c, seed, dir).ok());
  auto m = LoadModel(dir, LoadOptions{});
  CHECK(m.ok()) << m.status();
  return std::unique_ptr<DeepseekV4Model>(static_cast<DeepseekV4Model*>(m->release()));
}

std::vector<int32_t> RandomTokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  // Ids from 2 on: 0 is BOS and 1 is EOS in the test presets.
  for (int32_t& x : t) x = 2 + static_cast<int32_t>(rng() % (vocab - 2));
  return t;
}

// One sequence's memory (the engine's role): a block arena, one state slot, a block table in
// reverse order (a bug assuming block id == index shows up).
struct Arena {
  Arena(const KvLayout& L, int64_t max_tokens) {
    nblocks = (max_tokens + kBlockTokens - 1) / kBlockTokens;
    blocks.assign((nblocks * L.BlockBytes() + 3) / 4 + 16, 0.f);
    state.assign((L.StateBytes() + 3) / 4 + 16, 0.f);
    for (int64_t i = 0; i < nblocks; ++i) table.push_back(static_cast<int32_t>(nblocks - 1 - i));
    kv.block_base = reinterpret_cast<uint8_t*>(blocks.data());
    kv.num_blocks = nblocks;
    kv.state_base = reinterpret_cast<uint8_t*>(state.data());
    kv.num_state_slots = 1;
  }
  const uint8_t* StateBytes() const { return reinterpret_cast<const uint8_t*>(state.data()); }
  // Bytes of row `row` of paged cache `index` (rows of `ratio` tokens each).
  const uint8_t* PagedRow(const KvLayout& L, int index, int64_t row, int64_t ratio) const {
    const PagedCacheSpec& spec = L.paged[index];
    const int64_t blk = table[row * ratio / kBlockTokens];
    return reinterpret_cast<const uint8_t*>(blocks.data()) + blk * L.BlockBytes() +
           L.PagedOffset(index) + (row % spec.rows_per_block) * spec.row_bytes;
  }

  int64_t nblocks = 0;
  std::vector<float> blocks, state;
  std::vector<int32_t> table;
  KvCacheView kv;
};

// Forward of one chunk with every row's logits and final streams.
void Forward(DeepseekV4Model* m, Arena& a, int64_t start, std::span<const int32_t> tokens,
             std::vector<float>* logits, std::vector<float>* streams) {
  SequenceChunk chunk;
  chunk.start_pos = start;
  chunk.tokens = tokens;
  const int64_t nb =
      (start + static_cast<int64_t>(tokens.size()) + kBlockTokens - 1) / kBlockTokens;
  chunk.block_table = std::span<const int32_t>(a.table.data(), nb);
  chunk.state_slot = 0;
  chunk.logits = LogitsMode::kAll;
  ASSERT_OK(m->ForwardChunk(chunk, a.kv, logits, streams));
}

int64_t Ratio(const Config& c, int64_t block) { return c.Ratio(block); }

// Index of the state / paged cache called `name`, or -1.
int StateIndex(const KvLayout& L, const std::string& name) {
  for (size_t i = 0; i < L.state.size(); ++i) {
    if (L.state[i].name == name) return static_cast<int>(i);
  }
  return -1;
}
int PagedIndex(const KvLayout& L, const std::string& name) {
  for (size_t i = 0; i < L.paged.size(); ++i) {
    if (L.paged[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

std::string BlockName(const Config& c, int64_t b) {
  return b < c.num_layers ? "layers." + std::to_string(b) + "."
                          : "mtp." + std::to_string(b - c.num_layers) + ".";
}

// Compares everything a later query of a sequence whose main model has computed positions
// [0, f) and whose MTP block has computed [0, f_mtp) can read (spec §7.3 E8). Returns the
// number of mismatching regions (each reported).
int CompareVisibleState(const Config& c, const KvLayout& L, const Arena& got, const Arena& want,
                        int64_t f, int64_t f_mtp, const std::string& where) {
  int bad = 0;
  auto same = [&](const uint8_t* x, const uint8_t* y, int64_t n, const std::string& what) {
    if (std::memcmp(x, y, n) != 0) {
      ADD_FAILURE() << where << ": " << what << " differs";
      ++bad;
    }
  };
  const int64_t W = c.window, R = W + kSpeculativeRollbackTokens;
  for (int64_t b = 0; b < c.TotalBlocks(); ++b) {
    const std::string name = BlockName(c, b);
    const int64_t frontier = b < c.num_layers ? f : f_mtp;
    const int si = StateIndex(L, name + "window");
    const int64_t row = c.head_dim * 4;
    const int64_t off = L.StateOffset(si);
    for (int64_t q = std::max<int64_t>(0, frontier - W); q < frontier; ++q) {
      same(got.StateBytes() + off + (q % R) * row, want.StateBytes() + off + (q % R) * row, row,
           name + "window position " + std::to_string(q));
    }
    const int64_t m = Ratio(c, b);
    if (m == 0) continue;
    const int64_t coff = m == 4 ? 2 : 1;
    for (const char* comp : {"compressor", "indexer_compressor"}) {
      const int ci = StateIndex(L, name + comp);
      if (ci < 0) continue;
      const int64_t width = std::string(comp) == "compressor" ? c.head_dim : c.index_head_dim;
      const int64_t entry = 2 * coff * width * 4;  // (a, g + ape) of one position
      const int64_t slots = coff * m + kSpeculativeRollbackTokens;
      // The entries the next pools read: the current block's and, overlapping, the previous
      // block's (positions before 0 hold the reset values in both runs).
      const int64_t first = (f / m) * m - (coff == 2 ? m : 0);
      for (int64_t q = first; q < f; ++q) {
        const int64_t e = ((q % slots) + slots) % slots;
        same(got.StateBytes() + L.StateOffset(ci) + e * entry,
             want.StateBytes() + L.StateOffset(ci) + e * entry, entry,
             name + comp + " position " + std::to_string(q));
      }
    }
    for (const char* cache : {"compressed_kv", "indexer_k"}) {
      const int pi = PagedIndex(L, name + cache);
      if (pi < 0) continue;
      for (int64_t r = 0; r < f / m; ++r) {
        same(got.PagedRow(L, pi, r, m), want.PagedRow(L, pi, r, m), L.paged[pi].row_bytes,
             name + cache + " row " + std::to_string(r));
      }
    }
  }
  return bad;
}

// The state geometry, from first principles (spec §4.6.1-4.6.2): every window ring (main layers
// and MTP) has window + 6 slots of head_dim FP32 values; the ratio-4 (overlap) compressor and
// its indexer compressor keep 2*4 + 6 entries of (a, g + ape) at 2 x head_dim (index_head_dim)
// values each, non-overlap compressors 16 + 6 (tiny) / 128 + 6 (tiny128) of head_dim values;
// the layout declares frontier rollback; the slot is the sum of the (64-aligned) parts.
TEST(DsV4SpeculativeState, RingGeometryFromFirstPrinciples) {
  for (const char* preset : {"tiny", "tiny128"}) {
    auto model = MakeModel(preset, 3);
    const Config& c = model->config();
    const KvLayout& L = model->kv_layout();
    EXPECT_TRUE(L.frontier_rollback);
    EXPECT_EQ(L.window_tokens, c.window);
    EXPECT_EQ(kSpeculativeRollbackTokens, 6);  // anchor + 5 drafts, the seed's 128 + 6
    int64_t expect_state = 0;
    auto add = [&](int64_t bytes) { expect_state += (bytes + 63) / 64 * 64; };
    for (int64_t b = 0; b < c.TotalBlocks(); ++b) {
      const std::string name = BlockName(c, b);
      const int wi = StateIndex(L, name + "window");
      ASSERT_GE(wi, 0) << name;
      EXPECT_EQ(L.state[wi].bytes, (16 + 6) * 128 * 4) << preset << " " << name;
      add(L.state[wi].bytes);
      const int64_t m = c.Ratio(b);
      if (m == 0) continue;
      const int ci = StateIndex(L, name + "compressor");
      ASSERT_GE(ci, 0);
      if (m == 4) {
        // 14 entries x (a, g) x (coff 2 x head_dim 128) FP32.
        EXPECT_EQ(L.state[ci].bytes, 14 * 2 * 2 * 128 * 4) << name;
        const int ii = StateIndex(L, name + "indexer_compressor");
        ASSERT_GE(ii, 0);
        EXPECT_EQ(L.state[ii].bytes, 14 * 2 * 2 * 128 * 4) << name;
        add(L.state[ci].bytes);
        add(L.state[ii].bytes);
      } else {
        // (16 or 128) + 6 entries x (a, g) x head_dim 128 FP32.
        EXPECT_EQ(L.state[ci].bytes, (m + 6) * 2 * 128 * 4) << name;
        EXPECT_LT(StateIndex(L, name + "indexer_compressor"), 0);
        add(L.state[ci].bytes);
      }
    }
    EXPECT_EQ(L.StateBytes(), expect_state) << preset;
    EXPECT_EQ(model->max_model_drafts(), 5);
  }
  // The V4-Flash geometry: window 128 -> 134 slots.
  auto demo = TestModelPreset("demo");
  ASSERT_OK(demo.status());
  EXPECT_EQ(demo->window + kSpeculativeRollbackTokens, 134);
}

// One speculative run against a non-speculative one (E8). Step s verifies L_s drafts of which
// a_s are accepted (the rest are wrong tokens); the committed tokens are the same in both runs.
// MTP: after every step the speculative run calls ProposeDrafts with k_s drafts (chaining
// writes provisional ring entries), the reference feeds the same committed rows to ForwardMtp.
struct Coverage {
  int ring_wraps = 0;                // a verify span crossed a multiple of the ring size
  int rejected_wraps = 0;            // ... and the position at the multiple was rejected
  int boundaries[3] = {};            // a verify span completed a block of ratio 4 / 16 / 128
  int rejected_completions[3] = {};  // ... by a rejected position
  int steps[kMaxDrafts + 1][kMaxDrafts + 1] = {};  // [L][a]
};

void RunE8(const std::string& preset, int64_t prompt_len, int64_t total, uint64_t seed,
           Coverage* cov) {
  auto model = MakeModel(preset, seed);
  const Config& c = model->config();
  const KvLayout& L = model->kv_layout();
  const int64_t V = c.vocab_size, R = c.window + kSpeculativeRollbackTokens;
  const int64_t per = c.hc_mult * c.hidden_size;
  const std::vector<int32_t> tok = RandomTokens(total + kMaxDrafts + 2, V, seed + 1);
  Arena spec(L, total + kMaxDrafts + 2), ref(L, total + kMaxDrafts + 2);
  std::vector<float> logits, streams, ref_logits, ref_streams, mtp_logits;
  // Prefill the prompt in both (positions [0, prompt_len)); MTP rows [0, prompt_len - 1).
  Forward(model.get(), spec, 0, std::span<const int32_t>(tok).first(prompt_len), &logits, &streams);
  Forward(model.get(), ref, 0, std::span<const int32_t>(tok).first(prompt_len), &ref_logits,
          &ref_streams);
  ASSERT_EQ(logits, ref_logits);
  DraftProposal proposal;
  const auto next_of = [&](int64_t start, int64_t n) {
    return std::span<const int32_t>(tok).subspan(start + 1, n);
  };
  ASSERT_OK(model->ProposeDrafts(0, streams, next_of(0, prompt_len), 0, spec.kv, 1, &proposal));
  ASSERT_OK(model->ForwardMtp(0, ref_streams, next_of(0, prompt_len), 0, ref.kv, LogitsMode::kNone,
                              &mtp_logits));
  // The committed frontier: positions [0, f) computed; tok[f] is the next anchor.
  int64_t f = prompt_len;
  std::mt19937 rng(static_cast<uint32_t>(seed));
  int combo = 0;
  const int64_t ratios[3] = {4, 16, 128};
  while (f + kMaxDrafts + 1 < total) {
    // (L, a) cycles through every pair 1..5 x 0..L; k (MTP chain length) through 1..5.
    int Ld = 1, a = 0;
    for (int k = combo++ % 20, l = 1; l <= kMaxDrafts; ++l) {
      if (k <= l) {
        Ld = l;
        a = k;
        break;
      }
      k -= l + 1;
    }
    const int chain = 1 + static_cast<int>(rng() % kMaxDrafts);
    ++cov->steps[Ld][a];
    // Verify chunk: the anchor tok[f], a correct drafts, then wrong ones.
    std::vector<int32_t> chunk(tok.begin() + f, tok.begin() + f + 1 + Ld);
    for (int j = a + 1; j <= Ld; ++j) chunk[j] = (tok[f + j] + 1 + j) % V;
    for (int64_t q = f + 1; q <= f + Ld; ++q) {
      const bool rejected = q > f + a;
      if (q % R == 0) {
        ++cov->ring_wraps;
        cov->rejected_wraps += rejected;
      }
      for (int i = 0; i < 3; ++i) {
        if ((q + 1) % ratios[i] == 0) {
          ++cov->boundaries[i];
          cov->rejected_completions[i] += rejected;
        }
      }
    }
    Forward(model.get(), spec, f, chunk, &logits, &streams);
    const int64_t f2 = f + 1 + a;  // accepted: the anchor and a drafts
    // The reference computes the committed tokens [f, f2) only.
    Forward(model.get(), ref, f, std::span<const int32_t>(tok).subspan(f, a + 1), &ref_logits,
            &ref_streams);
    ASSERT_TRUE(std::equal(ref_logits.begin(), ref_logits.end(), logits.begin()))
        << preset << " logits of the accepted rows at " << f << " L " << Ld << " a " << a;
    // MTP: rows [f, f2) pair the streams at p with tok[p + 1] (tok[f2] is the target's token).
    ASSERT_OK(model->ProposeDrafts(f, std::span<const float>(streams).first((a + 1) * per),
                                   next_of(f, a + 1), 0, spec.kv, chain, &proposal));
    ASSERT_OK(model->ForwardMtp(f, ref_streams, next_of(f, a + 1), 0, ref.kv, LogitsMode::kNone,
                                &mtp_logits));
    f = f2;
    ASSERT_EQ(CompareVisibleState(c, L, spec, ref, f, f,
                                  preset + " frontier " + std::to_string(f) + " (L " +
                                      std::to_string(Ld) + ", a " + std::to_string(a) + ")"),
              0);
  }
}

TEST(DsV4SpeculativeState, E8FrontierRollbackEqualsNonSpeculativeRun) {
  Coverage cov;
  // tiny: window 16 (ring 22), ratios 4 and 16; tiny128: ratio 128 and hc_mult 2.
  RunE8("tiny", 3, 200, 21, &cov);
  RunE8("tiny128", 5, 300, 22, &cov);
  // More verify spans around the ratio-128 boundary at 127, at other alignments.
  for (int64_t prompt_len : {100, 101, 102, 103}) RunE8("tiny128", prompt_len, 140, 22, &cov);
  for (int l = 1; l <= kMaxDrafts; ++l) {
    for (int a = 0; a <= l; ++a) EXPECT_GT(cov.steps[l][a], 0) << "L " << l << " a " << a;
  }
  EXPECT_GT(cov.rejected_wraps, 0);
  EXPECT_GT(cov.ring_wraps, cov.rejected_wraps);
  for (int i = 0; i < 3; ++i) {
    EXPECT_GT(cov.rejected_completions[i], 0) << "ratio index " << i;
    EXPECT_GT(cov.boundaries[i], cov.rejected_completions[i]) << "ratio index " << i;
  }
}

// Captures the MTP block's output streams G ("mtp.0.X") of one ForwardMtp call.
class GTracer : public Tracer {
 public:
  void Floats(const std::string& name, std::span<float> values) override {
    if (name == "mtp.0.X") g.assign(values.begin(), values.end());
  }
  void Ints(const std::string&, std::span<int32_t>) override {}
  std::vector<float> g;
};

// Drafts by hand in a fresh state: ForwardMtp over the whole committed history [0, f), then
// each chained row alone (the block output G of the previous row with the previous draft, one
// position further), with the argmax and its softmax probability.
DraftProposal FromScratchChain(DeepseekV4Model* m, std::span<const int32_t> committed, int k) {
  const Config& c = m->config();
  const int64_t V = c.vocab_size, per = c.hc_mult * c.hidden_size;
  const int64_t f = static_cast<int64_t>(committed.size()) - 1;  // committed[f] = next token
  Arena a(m->kv_layout(), f + kMaxDrafts + 2);
  std::vector<float> logits, streams;
  Forward(m, a, 0, committed.first(f), &logits, &streams);
  GTracer tracer;
  m->set_tracer(&tracer);
  DraftProposal out;
  std::vector<float> mtp;
  absl::Status st =
      m->ForwardMtp(0, streams, committed.subspan(1, f), 0, a.kv, LogitsMode::kLast, &mtp);
  int64_t pos = f - 1;
  for (int j = 0; st.ok() && j < k; ++j) {
    if (j > 0) {
      std::vector<float> g(tracer.g.end() - per, tracer.g.end());
      const int32_t prev = out.tokens.back();
      st = m->ForwardMtp(++pos, g, std::span<const int32_t>(&prev, 1), 0, a.kv, LogitsMode::kLast,
                         &mtp);
      if (!st.ok()) break;
    }
    const int64_t best = std::max_element(mtp.begin(), mtp.begin() + V) - mtp.begin();
    double z = 0;
    for (int64_t v = 0; v < V; ++v) z += std::exp(static_cast<double>(mtp[v] - mtp[best]));
    out.tokens.push_back(static_cast<int32_t>(best));
    out.confidence.push_back(static_cast<float>(1.0 / z));
    if (best == 1) break;  // EOS of the test presets
  }
  m->set_tracer(nullptr);
  EXPECT_OK(st);
  return out;
}

// E9: the chain a serving run proposes after rounds of speculation (its MTP ring holds
// provisional entries of earlier chains, overwritten by each first pass) equals the
// from-scratch chain over the same committed history, for k = 1..5, across ring wraps.
TEST(DsV4SpeculativeState, E9MtpChainEqualsFromScratchRecompute) {
  auto model = MakeModel("tiny", 31);
  const Config& c = model->config();
  const KvLayout& L = model->kv_layout();
  const int64_t V = c.vocab_size, per = c.hc_mult * c.hidden_size, total = 70;
  const std::vector<int32_t> tok = RandomTokens(total + 8, V, 32);
  Arena spec(L, total + 8);
  std::vector<float> logits, streams;
  const int64_t prompt_len = 4;
  Forward(model.get(), spec, 0, std::span<const int32_t>(tok).first(prompt_len), &logits, &streams);
  DraftProposal got;
  auto next_of = [&](int64_t start, int64_t n) {
    return std::span<const int32_t>(tok).subspan(start + 1, n);
  };
  ASSERT_OK(model->ProposeDrafts(0, streams, next_of(0, prompt_len), 0, spec.kv, 5, &got));
  int64_t f = prompt_len;
  int checked = 0, chained = 0;
  for (int step = 0; f + 7 < total; ++step) {
    const int Ld = 1 + step % kMaxDrafts, a = (step * 7) % (Ld + 1), k = 1 + (step * 3) % 5;
    std::vector<int32_t> chunk(tok.begin() + f, tok.begin() + f + 1 + Ld);
    for (int j = a + 1; j <= Ld; ++j) chunk[j] = (tok[f + j] + 3) % V;
    Forward(model.get(), spec, f, chunk, &logits, &streams);
    ASSERT_OK(model->ProposeDrafts(f, std::span<const float>(streams).first((a + 1) * per),
                                   next_of(f, a + 1), 0, spec.kv, k, &got));
    f += 1 + a;
    const DraftProposal want =
        FromScratchChain(model.get(), std::span<const int32_t>(tok).first(f + 1), k);
    ASSERT_EQ(got.tokens, want.tokens) << "frontier " << f << " k " << k;
    ASSERT_EQ(got.confidence, want.confidence) << "frontier " << f << " k " << k;
    ASSERT_GE(got.tokens.size(), 1u);
    for (float p : got.confidence) EXPECT_TRUE(p > 0.f && p <= 1.f);
    ++checked;
    chained += got.tokens.size() > 1;
  }
  EXPECT_GT(checked, 15);
  EXPECT_GT(chained, 10);
  // More drafts than the ring's spare slots allow are refused.
  EXPECT_FALSE(model
                   ->ProposeDrafts(f, std::span<const float>(streams).first(per), next_of(f, 1), 0,
                                   spec.kv, kMaxDrafts + 1, &got)
                   .ok());
}

// A checkpoint with more than one MTP module (num_nextn_predict_layers = 2) loads; drafting
// chains mtp.0 (spec §2.1), so with the same weights (a function of seed and tensor name) its
// main logits, MTP chain and confidences equal the one-module checkpoint's bitwise.
TEST(DsV4SpeculativeState, TwoMtpModulesLoadAndDraftWithTheFirst) {
  auto one = MakeModel("tiny", 41);
  auto two = MakeModel("tiny", 41, 2);
  ASSERT_EQ(one->config().num_mtp_layers, 1);
  ASSERT_EQ(two->config().num_mtp_layers, 2);
  const Config& c = one->config();
  const int64_t V = c.vocab_size, per = c.hc_mult * c.hidden_size;
  const std::vector<int32_t> tok = RandomTokens(48, V, 42);
  const int64_t prompt_len = 40;
  auto run = [&](DeepseekV4Model* m, std::vector<float>* logits, DraftProposal* p) {
    Arena a(m->kv_layout(), 64);
    std::vector<float> streams;
    Forward(m, a, 0, std::span<const int32_t>(tok).first(prompt_len), logits, &streams);
    ASSERT_OK(m->ProposeDrafts(0, streams, std::span<const int32_t>(tok).subspan(1, prompt_len),
                               0, a.kv, 4, p));
    ASSERT_EQ(static_cast<int64_t>(streams.size()), prompt_len * per);
  };
  std::vector<float> l1, l2;
  DraftProposal p1, p2;
  run(one.get(), &l1, &p1);
  run(two.get(), &l2, &p2);
  ASSERT_EQ(l1.size(), static_cast<size_t>(prompt_len * V));
  EXPECT_EQ(l1, l2);
  ASSERT_FALSE(p1.tokens.empty());
  EXPECT_EQ(p1.tokens, p2.tokens);
  EXPECT_EQ(p1.confidence, p2.confidence);
}

}  // namespace
}  // namespace deepinfer::model::dsv4
