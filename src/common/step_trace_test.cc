// StepTrace: recording only while enabled, the event cap, nesting of RAII spans and the
// Chrome-trace JSON shape (parsed with nlohmann/json).
#include "common/step_trace.h"

#include <map>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace deepinfer {
namespace {

TEST(StepTraceTest, RecordsOnlyWhileEnabledAndCaps) {
  StepTrace& t = StepTrace::Get();
  t.Stop();
  { TraceSpan s("schedule"); }
  t.Start(/*max_events=*/3);
  EXPECT_TRUE(t.Events().empty());  // the span before Start() was not kept
  for (int i = 0; i < 5; ++i) TraceSpan s("step");
  t.Stop();
  { TraceSpan s("step"); }
  EXPECT_EQ(t.Events().size(), 3u);
  EXPECT_EQ(t.dropped(), 2);
}

TEST(StepTraceTest, NestedSpansAndJson) {
  StepTrace& t = StepTrace::Get();
  t.Start();
  {
    TraceSpan step("step");
    {
      TraceSpan forward("forward");
    }
    TraceSpan sample("sample");
    sample.End();
    sample.End();  // idempotent
  }
  std::thread([] { TraceSpan s("post_process"); }).join();
  t.Stop();
  const nlohmann::json j = nlohmann::json::parse(t.ToJson());
  ASSERT_TRUE(j["traceEvents"].is_array());
  std::map<std::string, nlohmann::json> by_name;
  int threads = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M") {
      EXPECT_EQ(e["name"], "thread_name");
      ++threads;
      continue;
    }
    ASSERT_EQ(e["ph"], "X");
    EXPECT_EQ(e["pid"], 1);
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    by_name[e["name"].get<std::string>()] = e;
  }
  ASSERT_EQ(by_name.size(), 4u);
  EXPECT_EQ(threads, 2);
  const auto& step = by_name["step"];
  EXPECT_EQ(step["ts"].get<double>(), 0.0);  // relative to the first span
  for (const char* child : {"forward", "sample"}) {
    const auto& c = by_name[child];
    EXPECT_EQ(c["tid"], step["tid"]);
    EXPECT_GE(c["ts"].get<double>(), step["ts"].get<double>());
    EXPECT_LE(c["ts"].get<double>() + c["dur"].get<double>(),
              step["ts"].get<double>() + step["dur"].get<double>() + 1e-6);
  }
  EXPECT_LE(by_name["forward"]["ts"].get<double>() + by_name["forward"]["dur"].get<double>(),
            by_name["sample"]["ts"].get<double>() + 1e-6);
  EXPECT_NE(by_name["post_process"]["tid"], step["tid"]);
  EXPECT_FALSE(t.WriteJson("/nonexistent-dir/trace.json").ok());
}

}  // namespace
}  // namespace deepinfer
