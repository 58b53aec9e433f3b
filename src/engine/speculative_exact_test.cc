// Exact speculative-decoding properties of ../shared/spec/speculative.md §7.3 not covered by
// speculative_test.cc (issue #26):
//   E1  decode/verify consistency: the logits of position p computed by a 1-token decode step
//       equal, bitwise, row p of an (L + 1)-token verify chunk over the same tokens, also when
//       other sequences (a prefill, a short prompt) share the verify's forward; through the
//       public model::CausalLM::Forward on stories260K (Llama, no state) and dsv4-tiny-a
//       (window rings, ratio-4 / 16 compressors: spans cross the window and every compression
//       boundary), with row-invariant kernels (DEEPINFER_BATCH_INVARIANT semantics, spec §7.1);
//   E11 grammar: with a tiny regex grammar over stories260K's vocabulary, greedy and seeded
//       sampled outputs with speculation equal speculation off, for oracle drafts, drafts
//       corrupted inside the grammar's language and drafts the grammar rejects; a rejected draft
//       is never accepted (accepted counts equal those of the same drafts truncated at the first
//       grammar-invalid token, the vLLM `num_invalid_spec_tokens` rule);
//   E13 metrics: per request, output tokens == forward passes that sampled + accepted drafts +
//       forced tokens - tokens dropped after a stop inside a block (0 for max_tokens finishes,
//       at most k for stops); the engine counters equal the sums of the per-request StepOutput
//       fields; per-position accepted counts sum to the accepted total and never increase;
//       oracle drafts accept everything they draft.
// Every comparison is between runs of the same binary, so it holds on every CPU.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/status_matchers.h"
#include "engine/engine.h"
#include "engine/llm.h"
#include "engine/speculative/drafter.h"
#include "engine/testing/engine_test_util.h"
#include "engine/testing/speculative_testing.h"
#include "gtest/gtest.h"
#include "model/kv_layout.h"
#include "model/model.h"
#include "structured/compiler.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::engine {
namespace {

namespace fs = std::filesystem;
using ::deepinfer::engine::testing::Greedy;
using ::deepinfer::engine::testing::LoadSharedModel;

const fs::path kShared = fs::path(DEEPINFER_SHARED_DIR);

// --- E1 -------------------------------------------------------------------------------------

// KV memory for `seqs` sequences of up to `max_tokens` tokens: 64-byte aligned arenas, sequence
// s owns blocks [s * per_seq, (s + 1) * per_seq) (in reverse order) and state slot s.
class Arena {
 public:
  Arena(const model::KvLayout& layout, int seqs, int64_t max_tokens) {
    per_seq_ = (max_tokens + model::kBlockTokens - 1) / model::kBlockTokens;
    blocks_.assign(static_cast<size_t>(seqs * per_seq_ * layout.BlockBytes()) + 64, 0);
    state_.assign(static_cast<size_t>(seqs * std::max<int64_t>(layout.StateBytes(), 64)) + 64, 0);
    view_.block_base = Aligned(blocks_);
    view_.num_blocks = seqs * per_seq_;
    view_.state_base = Aligned(state_);
    view_.num_state_slots = seqs;
    for (int s = 0; s < seqs; ++s) {
      std::vector<int32_t> t;
      for (int64_t b = per_seq_ - 1; b >= 0; --b)
        t.push_back(static_cast<int32_t>(s * per_seq_ + b));
      tables_.push_back(std::move(t));
    }
  }
  const model::KvCacheView& view() const { return view_; }

  // A chunk of sequence `seq`: tokens at [start, start + tokens.size()).
  model::SequenceChunk Chunk(int seq, int64_t start, std::span<const int32_t> tokens,
                             model::LogitsMode mode) const {
    model::SequenceChunk c;
    c.start_pos = start;
    c.tokens = tokens;
    const int64_t end = start + static_cast<int64_t>(tokens.size());
    c.block_table = std::span<const int32_t>(tables_[seq].data(),
                                             (end + model::kBlockTokens - 1) / model::kBlockTokens);
    c.state_slot = seq;
    c.logits = mode;
    return c;
  }

 private:
  static uint8_t* Aligned(std::vector<uint8_t>& v) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(v.data());
    return v.data() + ((64 - p % 64) % 64);
  }
  int64_t per_seq_ = 0;
  std::vector<uint8_t> blocks_, state_;
  std::vector<std::vector<int32_t>> tables_;
  model::KvCacheView view_;
};

using Rows = std::vector<std::vector<float>>;

Rows RowsOf(const model::ForwardOutput& out, size_t chunk, int64_t vocab) {
  Rows rows;
  for (int64_t r = out.chunk_row_begin[chunk]; r < out.chunk_row_begin[chunk + 1]; ++r) {
    rows.emplace_back(out.logits.begin() + r * vocab, out.logits.begin() + (r + 1) * vocab);
  }
  return rows;
}

// The logits of positions p0 .. p0 + L, each from its own 1-token decode step after a prefill
// of [0, p0).
Rows DecodeRows(model::CausalLM& m, const std::vector<int32_t>& t, int64_t p0, int L) {
  const int64_t vocab = m.info().vocab_size;
  Arena arena(m.kv_layout(), 1, p0 + L + 1);
  model::ForwardOutput out;
  model::ForwardBatch prefill;
  prefill.chunks.push_back(arena.Chunk(0, 0, std::span(t).first(p0), model::LogitsMode::kLast));
  CHECK(m.Forward(prefill, arena.view(), &out).ok());
  Rows rows;
  for (int64_t p = p0; p <= p0 + L; ++p) {
    model::ForwardBatch step;
    step.chunks.push_back(arena.Chunk(0, p, std::span(t).subspan(p, 1), model::LogitsMode::kLast));
    CHECK(m.Forward(step, arena.view(), &out).ok());
    Rows r = RowsOf(out, 0, vocab);
    CHECK_EQ(r.size(), 1u);
    rows.push_back(std::move(r[0]));
  }
  return rows;
}

// The same positions' rows from one (L + 1)-token verify chunk after the same prefill; with
// `cobatch` the verify shares its forward with a 40-token prefill and a 3-token prompt of two
// other sequences (verify chunk in the middle, so its rows do not start at row 0).
Rows VerifyRows(model::CausalLM& m, const std::vector<int32_t>& t, int64_t p0, int L, bool cobatch,
                const std::vector<int32_t>& other) {
  const int64_t vocab = m.info().vocab_size;
  Arena arena(m.kv_layout(), 3, std::max<int64_t>(p0 + L + 1, 64));
  model::ForwardOutput out;
  model::ForwardBatch prefill;
  prefill.chunks.push_back(arena.Chunk(0, 0, std::span(t).first(p0), model::LogitsMode::kLast));
  CHECK(m.Forward(prefill, arena.view(), &out).ok());
  model::ForwardBatch verify;
  if (cobatch) {
    verify.chunks.push_back(arena.Chunk(1, 0, std::span(other).first(40), model::LogitsMode::kAll));
  }
  verify.chunks.push_back(
      arena.Chunk(0, p0, std::span(t).subspan(p0, L + 1), model::LogitsMode::kAll));
  if (cobatch) {
    verify.chunks.push_back(arena.Chunk(2, 0, std::span(other).first(3), model::LogitsMode::kAll));
  }
  CHECK(m.Forward(verify, arena.view(), &out).ok());
  return RowsOf(out, cobatch ? 1 : 0, vocab);
}

std::vector<int32_t> RandomTokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = 3 + static_cast<int32_t>(rng() % (vocab - 3));
  return t;
}

class DecodeVerifyTest : public ::testing::TestWithParam<const char*> {};

TEST_P(DecodeVerifyTest, VerifyRowsEqualDecodeStepsBitwise) {
  std::unique_ptr<model::CausalLM> m = LoadSharedModel(GetParam());
  if (m == nullptr) GTEST_SKIP() << "no " << GetParam();
  const int64_t vocab = m->info().vocab_size;
  const std::vector<int32_t> t = RandomTokens(200, vocab, 17);
  const std::vector<int32_t> other = RandomTokens(64, vocab, 23);
  // dsv4-tiny-a: window 16, compress ratios 4 and 16; the spans start just before and on the
  // window end, ratio-4 / ratio-16 block ends, and the 128-token block boundary.
  int checked = 0;
  for (int64_t p0 : {1, 3, 12, 15, 16, 31, 47, 63, 125, 127}) {
    for (int L : {1, 3, 5}) {
      const Rows decode = DecodeRows(*m, t, p0, L);
      for (bool cobatch : {false, true}) {
        const Rows verify = VerifyRows(*m, t, p0, L, cobatch, other);
        ASSERT_EQ(verify.size(), decode.size());
        for (int j = 0; j <= L; ++j) {
          ASSERT_EQ(std::memcmp(verify[j].data(), decode[j].data(), vocab * sizeof(float)), 0)
              << GetParam() << ": position " << p0 + j << " (row " << j << " of a " << L + 1
              << "-token verify from " << p0 << (cobatch ? ", co-batched" : "") << ")";
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 10 * (2 + 4 + 6) * 2);
}

INSTANTIATE_TEST_SUITE_P(Models, DecodeVerifyTest, ::testing::Values("stories260K", "dsv4-tiny-a"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// --- E11 and E13 (engine, stories260K) -------------------------------------------------------

// Every message of one request (sample 0), in order.
std::vector<StepOutput> Messages(RequestStream& stream) {
  std::vector<StepOutput> out;
  while (std::optional<StepOutput> o = stream.Next()) {
    if (o->sample_index == 0) out.push_back(*std::move(o));
  }
  return out;
}

std::vector<int32_t> TokensOf(const std::vector<StepOutput>& msgs) {
  std::vector<int32_t> t;
  for (const StepOutput& o : msgs) t.insert(t.end(), o.token_ids.begin(), o.token_ids.end());
  return t;
}

// Drafts for requests whose committed tokens extend one of `conts` (prompt + continuation):
// the continuation's next tokens, with `invalid` written over draft positions whose output
// index i has i % 4 == 2 (truncate_at_invalid: the proposal ends before such a position).
struct ContinuationDrafts {
  std::vector<std::vector<int32_t>> conts;
  int32_t invalid = -1;
  bool truncate_at_invalid = false;
  std::vector<int32_t> operator()(const DraftContext& ctx, int k) const {
    for (const std::vector<int32_t>& c : conts) {
      if (c.size() <= ctx.tokens.size() ||
          !std::equal(ctx.tokens.begin(), ctx.tokens.end(), c.begin())) {
        continue;
      }
      std::vector<int32_t> d;
      for (size_t i = ctx.tokens.size(); i < c.size() && static_cast<int>(d.size()) < k; ++i) {
        const bool bad = invalid >= 0 && (i - ctx.prompt_len) % 4 == 2;
        if (bad && truncate_at_invalid) break;
        d.push_back(bad ? invalid : c[i]);
      }
      return d;
    }
    return {};
  }
};

struct SpecRun {
  std::vector<std::vector<StepOutput>> messages;  // per request
  EngineStats stats;
};

class SpecExactModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kShared / "models/stories260K/config.json")) GTEST_SKIP() << "no stories260K";
    auto tok = Tokenizer::FromDirectory((kShared / "models/stories260K").string());
    ASSERT_OK(tok.status());
    tokenizer_ = std::move(*tok);
    for (const char* text :
         {"Once upon a time", "One day", "Lily", "Tom went", "The sun", "A girl"}) {
      std::vector<int32_t> p = {tokenizer_->bos_id()};
      for (int32_t id : tokenizer_->EncodeText(text)) p.push_back(id);
      prompts_.push_back(std::move(p));
    }
  }

  // One run of every prompt with its params, in one batch, through the offline LLM (so_args
  // compiled by its grammar compiler), jump-forward off.
  SpecRun Generate(const std::vector<SamplingParams>& params, SpeculativeConfig spec, bool async) {
    EngineConfig cfg;
    cfg.kv_memory_bytes = 64 << 20;
    cfg.async_scheduling = async;
    cfg.jump_forward = false;
    cfg.speculative = std::move(spec);
    auto llm = LLM::Create(LoadSharedModel("stories260K"), cfg, *tokenizer_);
    CHECK(llm.ok()) << llm.status();
    auto streams = (*llm)->Submit(prompts_, params);
    CHECK(streams.ok()) << streams.status();
    SpecRun r;
    for (auto& st : *streams) r.messages.push_back(Messages(*st));
    (*llm)->engine().Shutdown(int64_t{5} * 1000 * 1000 * 1000);
    r.stats = (*llm)->engine().Stats();
    return r;
  }

  static SpeculativeConfig Scripted(ContinuationDrafts d, int k) {
    SpeculativeConfig spec;
    spec.method = SpeculativeConfig::Method::kCustom;
    spec.num_speculative_tokens = k;
    spec.drafter = std::make_shared<ScriptedDrafter>(std::move(d));
    return spec;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<std::vector<int32_t>> prompts_;
};

// E13 on one run: per step (messages grouped by their forward-pass count), the step commits
// Δaccepted + Δforward_passes + Δforced tokens, except the last step, which may commit fewer
// only when it finished on a stop (tokens after the stop are dropped; at most k of them); the
// engine counters equal the per-request sums; per-position counts sum to the accepted total
// and never increase. Returns the stop truncations seen.
int CheckMetrics(const SpecRun& r, int k, const std::string& what) {
  int64_t drafted = 0, accepted = 0, output = 0, verify_steps = 0;
  int truncations = 0;
  for (size_t q = 0; q < r.messages.size(); ++q) {
    const std::vector<StepOutput>& msgs = r.messages[q];
    EXPECT_FALSE(msgs.empty()) << what;
    if (msgs.empty()) continue;
    const StepOutput& last = msgs.back();
    EXPECT_TRUE(last.finish.has_value()) << what;
    int prev_passes = 0, prev_accepted = 0, prev_forced = 0;
    size_t i = 0;
    while (i < msgs.size()) {
      size_t j = i;
      int committed = 0;
      while (j < msgs.size() && msgs[j].forward_passes == msgs[i].forward_passes) {
        committed += static_cast<int>(msgs[j].token_ids.size());
        ++j;
      }
      const StepOutput& m = msgs[j - 1];
      const int expected = (m.forward_passes - prev_passes) + (m.accepted_tokens - prev_accepted) +
                           (m.forced_tokens - prev_forced);
      if (j < msgs.size() || !(last.finish == FinishReason::kStop)) {
        EXPECT_EQ(committed, expected)
            << what << ": request " << q << " step ending at message " << j - 1;
      } else {
        EXPECT_LE(committed, expected) << what << ": request " << q;
        EXPECT_GE(committed, expected - k) << what << ": request " << q;
        truncations += expected - committed;
      }
      EXPECT_EQ(m.output_tokens,
                static_cast<int>(TokensOf({msgs.begin(), msgs.begin() + j}).size()))
          << what;
      prev_passes = m.forward_passes;
      prev_accepted = m.accepted_tokens;
      prev_forced = m.forced_tokens;
      i = j;
    }
    drafted += last.drafted_tokens;
    accepted += last.accepted_tokens;
    output += last.output_tokens;
    verify_steps += last.verify_steps;
    // The request's accepted drafts by position sum to its accepted count and never increase.
    int request_per_position = 0;
    for (int j = 0; j < kStepOutputDraftPositions; ++j) {
      request_per_position += last.accepted_per_position[j];
      if (j > 0) {
        EXPECT_LE(last.accepted_per_position[j], last.accepted_per_position[j - 1]) << what;
      }
      EXPECT_EQ(last.accepted_per_position[j] > 0 && j >= k, false) << what;
    }
    EXPECT_EQ(request_per_position, last.accepted_tokens) << what;
    EXPECT_LE(last.drafted_tokens, k * last.verify_steps) << what;
  }
  EXPECT_EQ(r.stats.spec_verify_steps, verify_steps) << what;
  EXPECT_EQ(r.stats.spec_draft_tokens, drafted) << what;
  EXPECT_EQ(r.stats.spec_accepted_tokens, accepted) << what;
  EXPECT_EQ(r.stats.total_output_tokens, output) << what;
  int64_t per_position = 0;
  for (size_t j = 0; j < r.stats.spec_accepted_per_position.size(); ++j) {
    per_position += r.stats.spec_accepted_per_position[j];
    if (j > 0) {
      EXPECT_LE(r.stats.spec_accepted_per_position[j], r.stats.spec_accepted_per_position[j - 1])
          << what;
    }
  }
  EXPECT_EQ(per_position, accepted) << what;
  EXPECT_LE(r.stats.spec_accepted_tokens, r.stats.spec_draft_tokens) << what;
  EXPECT_LE(r.stats.spec_draft_tokens, int64_t{k} * r.stats.spec_verify_steps) << what;
  return truncations;
}

// E13 with oracle drafts (the run's own continuation, so every draft is accepted) and
// corrupted ones, greedy and seeded sampled, stop tokens and max_tokens inside blocks, sync and
// async scheduling: outputs equal speculation off and the metric identities hold exactly.
TEST_F(SpecExactModelTest, CommittedTokensEqualAcceptedPlusOneMinusStopTruncations) {
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < prompts_.size(); ++i) {
    SamplingParams p = Greedy(30 + static_cast<int>(i));
    if (i % 2 == 1) {
      p.temperature = 0.9f;
      p.seed = 40 + i;
    }
    params.push_back(p);
  }
  const SpecRun full = Generate(params, {}, true);
  ContinuationDrafts oracle;
  for (size_t i = 0; i < prompts_.size(); ++i) {
    std::vector<int32_t> c = prompts_[i];
    const std::vector<int32_t> t = TokensOf(full.messages[i]);
    c.insert(c.end(), t.begin(), t.end());
    oracle.conts.push_back(std::move(c));
  }
  // Stop tokens at output positions 3..8 of the first four requests (their first occurrence
  // decides), the others end on max_tokens.
  std::vector<SamplingParams> stops = params;
  for (size_t i = 0; i < 4; ++i) {
    const std::vector<int32_t> t = TokensOf(full.messages[i]);
    stops[i].stop_token_ids = {t[3 + i]};
  }
  const SpecRun off = Generate(stops, {}, true);
  int truncations = 0;
  for (int k : {2, 5}) {
    for (bool async : {false, true}) {
      const std::string what = "k " + std::to_string(k) + (async ? " async" : " sync");
      const SpecRun on = Generate(stops, Scripted(oracle, k), async);
      for (size_t i = 0; i < prompts_.size(); ++i) {
        EXPECT_EQ(TokensOf(on.messages[i]), TokensOf(off.messages[i])) << what << " request " << i;
        EXPECT_EQ(on.messages[i].back().finish, off.messages[i].back().finish) << what;
      }
      truncations += CheckMetrics(on, k, what);
      EXPECT_GT(on.stats.spec_accepted_tokens, 0) << what;
      // Oracle drafts are all accepted, except those after a stop inside the block (the
      // verifier ends the block at the stop).
      for (size_t i = 0; i < prompts_.size(); ++i) {
        const StepOutput& last = on.messages[i].back();
        if (last.finish == FinishReason::kLength) {
          EXPECT_EQ(last.accepted_tokens, last.drafted_tokens) << what << " request " << i;
        } else {
          EXPECT_LE(last.accepted_tokens, last.drafted_tokens) << what << " request " << i;
        }
      }
      EXPECT_EQ(on.stats.spec_accepted_per_position[k - 1] > 0, true) << what;
      // Corrupted drafts (a token at every output index i % 4 == 2 replaced): fewer accepted,
      // the same outputs, the same identities.
      ContinuationDrafts corrupt = oracle;
      corrupt.invalid = tokenizer_->eos_id() == 2 ? 3 : 2;
      const SpecRun bad = Generate(stops, Scripted(corrupt, k), async);
      for (size_t i = 0; i < prompts_.size(); ++i) {
        EXPECT_EQ(TokensOf(bad.messages[i]), TokensOf(off.messages[i])) << what << " request " << i;
      }
      CheckMetrics(bad, k, what + " corrupted");
      EXPECT_LT(bad.stats.spec_accepted_tokens, bad.stats.spec_draft_tokens) << what;
    }
  }
  EXPECT_GT(truncations, 0) << "some stop fell inside an accepted block";
}

// E11: a regex grammar over stories260K's vocabulary. Drafts are the grammar-valid oracle
// continuation with a token the grammar never allows (a digit) at every output index
// i % 4 == 2. Greedy and seeded sampled outputs equal speculation off; the invalid draft is
// never accepted: acceptance equals that of the same drafts truncated before the invalid token
// (what vLLM's validate_tokens does), and outputs match the grammar.
TEST_F(SpecExactModelTest, GrammarInvalidDraftsAreNeverAccepted) {
  StructuredOutputArgs so;
  so.schema_type = StructuredOutputArgs::SchemaType::kRegex;
  so.schema =
      "(the|a) (cat|dog|bird|girl) (sat|ran|saw|was) (on|in|to|by) the (mat|park|tree|"
      "house)( and (sat|ran|saw|was) (on|in|to|by) the (mat|park|tree|house))*\\.";
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < prompts_.size(); ++i) {
    SamplingParams p = Greedy(60);
    if (i % 2 == 1) {
      p.temperature = 1.0f;
      p.seed = 70 + i;
    }
    p.so_args = so;
    params.push_back(p);
  }
  const std::regex language(so.schema);
  const SpecRun off = Generate(params, {}, true);
  ContinuationDrafts oracle;
  for (size_t i = 0; i < prompts_.size(); ++i) {
    std::vector<int32_t> c = prompts_[i];
    const std::vector<int32_t> t = TokensOf(off.messages[i]);
    c.insert(c.end(), t.begin(), t.end());
    oracle.conts.push_back(std::move(c));
  }
  std::vector<int32_t> digit = tokenizer_->EncodeText("7");
  ASSERT_FALSE(digit.empty());
  ASSERT_EQ(tokenizer_->TokenBytes(digit.back()), "7");
  ContinuationDrafts invalid = oracle;
  invalid.invalid = digit.back();
  ContinuationDrafts truncated = invalid;
  truncated.truncate_at_invalid = true;
  int matched = 0;
  for (bool async : {false, true}) {
    const SpecRun with_invalid = Generate(params, Scripted(invalid, 4), async);
    const SpecRun without = Generate(params, Scripted(truncated, 4), async);
    for (size_t i = 0; i < prompts_.size(); ++i) {
      const std::vector<int32_t> want = TokensOf(off.messages[i]);
      EXPECT_EQ(TokensOf(with_invalid.messages[i]), want) << "request " << i;
      EXPECT_EQ(TokensOf(without.messages[i]), want) << "request " << i;
      std::string text;
      for (int32_t id : want) {
        if (id != tokenizer_->eos_id()) text += tokenizer_->TokenBytes(id);
      }
      EXPECT_TRUE(std::regex_match(text, language) ||
                  off.messages[i].back().finish == FinishReason::kLength)
          << "request " << i << ": " << text;
      matched += std::regex_match(text, language);
      EXPECT_EQ(with_invalid.messages[i].back().accepted_tokens,
                without.messages[i].back().accepted_tokens)
          << "request " << i << ": an invalid draft was accepted";
    }
    EXPECT_GT(with_invalid.stats.spec_accepted_tokens, 0);
    EXPECT_GT(with_invalid.stats.spec_draft_tokens, without.stats.spec_draft_tokens)
        << "the invalid drafts were verified (and rejected)";
    CheckMetrics(with_invalid, 4, async ? "grammar async" : "grammar sync");
  }
  EXPECT_GE(matched, 2 * 3) << "most outputs are complete sentences of the grammar";
}

}  // namespace
}  // namespace deepinfer::engine
