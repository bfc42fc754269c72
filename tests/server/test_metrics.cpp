#include <gtest/gtest.h>

#include <thread>

#include "server/metrics.h"

using namespace mlxcel::server;

TEST(Metrics, HistogramBucketsAreCumulative) {
  Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.5);
  h.observe(0.5);
  h.observe(7.0);
  auto s = h.snapshot();
  ASSERT_EQ(s.cumulative.size(), 3u);
  EXPECT_EQ(s.cumulative[0], 1u);
  EXPECT_EQ(s.cumulative[1], 3u);
  EXPECT_EQ(s.cumulative[2], 4u);
  EXPECT_DOUBLE_EQ(s.sum, 8.05);
}

TEST(Metrics, CountersAreThreadSafeAndRendered) {
  ServerMetrics m;
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) m.generated_tokens_total.add();
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(m.generated_tokens_total.value(), 40000.0);
  m.ttft_seconds.observe(0.2);
  std::string text = m.render();
  EXPECT_NE(text.find("mlxcel_generated_tokens_total 40000"), std::string::npos);
  EXPECT_NE(text.find("# TYPE mlxcel_time_to_first_token_seconds histogram"), std::string::npos);
  EXPECT_NE(text.find("mlxcel_time_to_first_token_seconds_bucket{le=\"0.25\"} 1"), std::string::npos);
  EXPECT_NE(text.find("mlxcel_time_to_first_token_seconds_bucket{le=\"+Inf\"} 1"), std::string::npos);
}
