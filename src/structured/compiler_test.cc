// GrammarCompiler (compiler.h): a compile that outlives the timeout is cancelled and frees the
// compiler thread for the requests behind it; it leaves no cache entry behind; bad constraints
// are rejected before queueing. Time limits here are seconds apart from the behaviour they
// separate (a cancelled compile vs. one that would run for minutes), never tight measurements.
#include "structured/compiler.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "structured/matcher.h"

namespace deepinfer::structured {
namespace {

using ::deepinfer::testing::StatusIs;

// 60,000 random lowercase tokens (1-8 bytes) plus the single bytes: large enough that walking
// the vocabulary from a state that accepts every letter takes milliseconds.
std::shared_ptr<const VocabularyIndex> LetterVocab() {
  Vocabulary v;
  for (int b = 0; b < 256; ++b) v.token_bytes.push_back(std::string(1, static_cast<char>(b)));
  std::mt19937 rng(3);
  for (int i = 0; i < 60000; ++i) {
    std::string t(1 + rng() % 8, 'a');
    for (char& c : t) c = static_cast<char>('a' + rng() % 26);
    v.token_bytes.push_back(t);
  }
  v.token_bytes.push_back("");
  v.eos_ids = {static_cast<int32_t>(v.token_bytes.size()) - 1};
  v.special_ids = v.eos_ids;
  return std::make_shared<VocabularyIndex>(std::move(v));
}

// 4,000 distinct states that each accept every letter token: precomputing their token sets
// takes minutes on this vocabulary (each is a full vocabulary walk).
ConstraintSpec SlowSpec() {
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::kRegex;
  spec.text = "[a-z]{0,4000}";
  return spec;
}

double SecondsSince(int64_t start_nanos) { return (MonotonicNanos() - start_nanos) * 1e-9; }

TEST(GrammarCompiler, TimedOutCompileIsCancelledAndFreesTheThread) {
  GrammarCompiler compiler(LetterVocab(), {.num_threads = 1, .compile_timeout_ms = 2000});

  int64_t start = MonotonicNanos();
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> slow;
  std::thread waiter([&] { slow = compiler.Get(SlowSpec()); });
  // While the only compiler thread is busy, a bad constraint is still answered at once: it is
  // parsed on the caller's thread and never queued (queued, it would time out instead).
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ConstraintSpec bad;
  bad.kind = ConstraintSpec::Kind::kJsonSchema;
  bad.text = R"({"type":"string","uniqueItems":true})";
  EXPECT_THAT(compiler.Get(bad), StatusIs(absl::StatusCode::kInvalidArgument));
  waiter.join();
  EXPECT_THAT(slow, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_LT(SecondsSince(start), 30.0);

  // The next request gets the thread: before cancellation it queued behind minutes of work and
  // timed out as well.
  ConstraintSpec small;
  small.kind = ConstraintSpec::Kind::kRegex;
  small.text = "ab|cd";
  start = MonotonicNanos();
  ASSERT_OK_AND_ASSIGN(auto compiled, compiler.Get(small));
  EXPECT_LT(SecondsSince(start), 5.0);
  GrammarMatcher m(compiled);
  EXPECT_TRUE(m.AcceptBytes("cd"));
  EXPECT_TRUE(m.CanTerminate());

  // The cancelled compile left nothing in the cache: the same request compiles again and ends
  // with the same clean error, not a partial grammar.
  const int64_t hits = compiler.cache_hits();
  EXPECT_THAT(compiler.Get(SlowSpec()), StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_EQ(compiler.cache_hits(), hits);
}

TEST(GrammarCompiler, SuccessfulCompilesAreCachedAndErrorsAreNot) {
  GrammarCompiler compiler(LetterVocab(), {.num_threads = 1});
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::kEbnf;
  spec.text = R"(root ::= "x" [a-c]*)";
  ASSERT_OK_AND_ASSIGN(auto first, compiler.Get(spec));
  ASSERT_OK_AND_ASSIGN(auto second, compiler.Get(spec));
  EXPECT_EQ(first.get(), second.get());
  EXPECT_EQ(compiler.compiles(), 1);
  EXPECT_EQ(compiler.cache_hits(), 1);
  ConstraintSpec bad;
  bad.kind = ConstraintSpec::Kind::kEbnf;
  bad.text = "root ::= undefined_rule";
  EXPECT_THAT(compiler.Get(bad), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(compiler.Get(bad), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(compiler.cache_hits(), 1);
}

// The LRU bound never drops a compile in flight: it stays tracked and is evicted, in LRU order,
// once done (before, it left the LRU list but stayed in the cache for good).
TEST(GrammarCompiler, PendingCompilesAreEvictedOnlyOnceDone) {
  GrammarCompiler compiler(LetterVocab(), {.num_threads = 1, .max_cache_entries = 1});
  ConstraintSpec medium;  // seconds of work: still compiling when the next request arrives
  medium.kind = ConstraintSpec::Kind::kRegex;
  medium.text = "[a-z]{0,60}";
  auto small = [](const char* text) {
    ConstraintSpec s;
    s.kind = ConstraintSpec::Kind::kRegex;
    s.text = text;
    return s;
  };
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> medium_result;
  std::thread waiter([&] { medium_result = compiler.Get(medium); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_OK(compiler.Get(small("ab|cd")).status());  // queued behind `medium`
  waiter.join();
  ASSERT_OK(medium_result.status());
  EXPECT_EQ(compiler.compiles(), 2);
  // A third grammar evicts both older entries, `medium` (least recently used) included.
  ASSERT_OK(compiler.Get(small("ef|gh")).status());
  const int64_t hits = compiler.cache_hits();
  ASSERT_OK(compiler.Get(medium).status());
  EXPECT_EQ(compiler.cache_hits(), hits);  // compiled afresh, not found
  EXPECT_EQ(compiler.compiles(), 4);
  ASSERT_OK(compiler.Get(medium).status());  // and now cached
  EXPECT_EQ(compiler.cache_hits(), hits + 1);
}

// The byte bound: a grammar larger than max_cache_bytes is returned but not kept; with room for
// one grammar, the least recently used one goes.
TEST(GrammarCompiler, CacheIsBoundedByBytes) {
  ConstraintSpec a;
  a.kind = ConstraintSpec::Kind::kEbnf;
  a.text = R"(root ::= "x" [a-c]*)";
  ConstraintSpec b = a;
  b.text = R"(root ::= "y" [a-c]*)";
  {
    GrammarCompiler tiny(LetterVocab(), {.num_threads = 1, .max_cache_bytes = 1});
    ASSERT_OK_AND_ASSIGN(auto first, tiny.Get(a));
    EXPECT_GT(first->MemoryBytes(), 1u);
    ASSERT_OK(tiny.Get(a).status());
    EXPECT_EQ(tiny.compiles(), 2);  // not cached
    EXPECT_EQ(tiny.cache_hits(), 0);
  }
  GrammarCompiler probe(LetterVocab(), {.num_threads = 1});
  ASSERT_OK_AND_ASSIGN(auto compiled_a, probe.Get(a));
  ASSERT_OK_AND_ASSIGN(auto compiled_b, probe.Get(b));
  const size_t one = std::max(compiled_a->MemoryBytes(), compiled_b->MemoryBytes());
  GrammarCompiler compiler(LetterVocab(), {.num_threads = 1, .max_cache_bytes = one + one / 2});
  ASSERT_OK(compiler.Get(a).status());
  ASSERT_OK(compiler.Get(a).status());
  EXPECT_EQ(compiler.cache_hits(), 1);  // a is kept
  ASSERT_OK(compiler.Get(b).status());  // b evicts a
  ASSERT_OK(compiler.Get(b).status());
  EXPECT_EQ(compiler.cache_hits(), 2);
  ASSERT_OK(compiler.Get(a).status());
  EXPECT_EQ(compiler.cache_hits(), 2);
  EXPECT_EQ(compiler.compiles(), 3);
}

TEST(CompileBudget, ExpiresAtItsDeadlineAndFollowsAMovedOne) {
  EXPECT_TRUE(CompileBudget().Check().ok());
  EXPECT_THAT(CompileBudget(MonotonicNanos() - 1).Check(),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  std::atomic<int64_t> deadline{MonotonicNanos() + 60'000'000'000};
  CompileBudget budget(&deadline);
  EXPECT_FALSE(budget.Expired());
  deadline.store(0);  // cancel
  EXPECT_TRUE(budget.Expired());
}

}  // namespace
}  // namespace deepinfer::structured
