#include "engine/scheduler.h"

#include <memory>
#include <vector>

#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace deepinfer::engine {
namespace {

struct Fixture {
  std::unique_ptr<kv::BlockPool> blocks;
  std::unique_ptr<kv::StateCache> slots;
  std::unique_ptr<Scheduler> scheduler;
  std::vector<std::unique_ptr<Sequence>> seqs;

  Fixture(int num_blocks, int max_seqs, int budget) {
    blocks = *kv::BlockPool::Create(num_blocks, 64);
    slots = *kv::StateCache::Create(max_seqs, 0);
    scheduler = std::make_unique<Scheduler>(SchedulerConfig{max_seqs, budget, 100000}, blocks.get(),
                                            slots.get());
  }
  Sequence* Add(int prompt_len, int max_tokens = 100) {
    auto info = std::make_shared<RequestInfo>();
    info->prompt.assign(prompt_len, 7);
    info->params.max_tokens = max_tokens;
    auto seq = std::make_unique<Sequence>();
    seq->seq_id = static_cast<int64_t>(seqs.size());
    seq->order = seq->seq_id;
    seq->info = info;
    seq->tokens = info->prompt;
    scheduler->AddWaiting(seq.get());
    seqs.push_back(std::move(seq));
    return seqs.back().get();
  }
  // What the engine does with a sampled token.
  void Resolve(Sequence* seq, int32_t token) {
    --seq->num_pending;
    seq->tokens.push_back(token);
  }
};

TEST(SchedulerTest, ChunksLongPromptsUnderTheTokenBudget) {
  Fixture f(/*num_blocks=*/100, /*max_seqs=*/4, /*budget=*/300);
  Sequence* a = f.Add(700);
  Sequence* b = f.Add(50);
  StepPlan p1 = f.scheduler->Schedule();
  ASSERT_EQ(p1.items.size(), 1u);  // a takes the whole budget
  EXPECT_EQ(p1.items[0].seq_id, a->seq_id);
  EXPECT_EQ(p1.items[0].tokens.size(), 300u);
  EXPECT_FALSE(p1.items[0].sample);
  EXPECT_EQ(p1.items[0].block_table.size(), 3u);  // ceil(300 / 128)
  StepPlan p2 = f.scheduler->Schedule();
  ASSERT_EQ(p2.items.size(), 1u);
  EXPECT_EQ(p2.items[0].start_pos, 300);
  StepPlan p3 = f.scheduler->Schedule();
  ASSERT_EQ(p3.items.size(), 2u);  // a's last 100 tokens + b (FIFO admission)
  EXPECT_EQ(p3.items[0].tokens.size(), 100u);
  EXPECT_TRUE(p3.items[0].sample);
  EXPECT_EQ(p3.items[1].seq_id, b->seq_id);
  EXPECT_EQ(p3.items[1].tokens.size(), 50u);
  EXPECT_EQ(p3.num_tokens(), 150);
  EXPECT_EQ(a->num_pending, 1);
  // Async: a's next decode feeds the in-flight sample as a placeholder.
  StepPlan p4 = f.scheduler->Schedule();
  ASSERT_EQ(p4.items.size(), 2u);
  EXPECT_TRUE(p4.items[0].use_last_sample);
  EXPECT_EQ(p4.items[0].start_pos, 700);
  EXPECT_EQ(a->num_pending, 2);
  f.Resolve(a, 3);
  f.Resolve(a, 4);
  StepPlan p5 = f.scheduler->Schedule();
  EXPECT_FALSE(p5.items[0].use_last_sample);
  EXPECT_EQ(p5.items[0].tokens, std::vector<int32_t>{4});
  EXPECT_EQ(p5.items[0].start_pos, 701);
}

TEST(SchedulerTest, RespectsMaxNumSeqsAndMaxTokens) {
  Fixture f(100, /*max_seqs=*/2, 1000);
  Sequence* a = f.Add(10, /*max_tokens=*/1);
  f.Add(10);
  f.Add(10);
  StepPlan p = f.scheduler->Schedule();
  EXPECT_EQ(p.items.size(), 2u);
  EXPECT_EQ(f.scheduler->num_waiting(), 1);
  // a has its one token in flight: nothing more is planned for it.
  StepPlan p2 = f.scheduler->Schedule();
  for (const PlanItem& it : p2.items) EXPECT_NE(it.seq_id, a->seq_id);
}

TEST(SchedulerTest, PreemptsNewestWhenBlocksRunOut) {
  Fixture f(/*num_blocks=*/2, 4, 1000);
  Sequence* a = f.Add(128);
  Sequence* b = f.Add(128);
  StepPlan p1 = f.scheduler->Schedule();
  ASSERT_EQ(p1.items.size(), 2u);
  EXPECT_EQ(f.blocks->num_free(), 0);
  f.Resolve(a, 1);
  f.Resolve(b, 1);
  // Both need a second block for position 128: b (newest) is preempted so a can go on.
  StepPlan p2 = f.scheduler->Schedule();
  EXPECT_EQ(p2.num_preempted, 1);
  ASSERT_EQ(p2.items.size(), 1u);
  EXPECT_EQ(p2.items[0].seq_id, a->seq_id);
  EXPECT_EQ(b->status, SeqStatus::kWaiting);
  EXPECT_EQ(b->num_computed, 0);
  EXPECT_TRUE(b->blocks.empty());
  f.scheduler->Remove(a);
  f.scheduler->Remove(b);
  EXPECT_EQ(f.blocks->num_free(), 2);
  EXPECT_EQ(f.slots->num_free(), 4);
}

}  // namespace
}  // namespace deepinfer::engine
