// The Prometheus sink of the NVMe tier: what the tier records shows up
// under the names docs/metrics.md lists, labelled by job and op.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "server/core/metrics.h"

namespace zerostate::server {
namespace {

// name{labels} -> value of every counter, gauge and histogram count.
std::map<std::string, double> Collect(prometheus::Registry& registry) {
  std::map<std::string, double> out;
  for (const auto& family : registry.Collect()) {
    for (const auto& m : family.metric) {
      std::string key = family.name;
      for (const auto& l : m.label) key += "," + l.name + "=" + l.value;
      out[key] = family.type == prometheus::MetricType::Histogram
                     ? static_cast<double>(m.histogram.sample_count)
                     : m.counter.value + m.gauge.value;
    }
  }
  return out;
}

TEST(TierMetricsTest, SinkRecordsIntoTheServersRegistry) {
  ServerMetrics metrics(std::make_shared<prometheus::Registry>());
  std::shared_ptr<TierMetricsSink> sink = metrics.TierSink("j1");
  sink->RecordIo(io::IoOp::kRead, 4096, 0.001);
  sink->RecordIo(io::IoOp::kRead, 4096, 0.002);
  sink->RecordIo(io::IoOp::kWrite, 8192, 0.003);
  sink->SetQueueDepth(5);
  sink->RecordCache(true);
  sink->RecordCache(false);
  sink->RecordCache(false);
  auto m = Collect(*metrics.registry());
  EXPECT_EQ(m["zerostate_tier_bytes_read_total,job_id=j1"], 8192);
  EXPECT_EQ(m["zerostate_tier_bytes_written_total,job_id=j1"], 8192);
  EXPECT_EQ(m["zerostate_tier_io_duration_seconds,op=read"], 2);
  EXPECT_EQ(m["zerostate_tier_io_duration_seconds,op=write"], 1);
  EXPECT_EQ(m["zerostate_tier_queue_depth,job_id=j1"], 5);
  EXPECT_EQ(m["zerostate_tier_cache_hits_total,job_id=j1"], 1);
  EXPECT_EQ(m["zerostate_tier_cache_misses_total,job_id=j1"], 2);
}

}  // namespace
}  // namespace zerostate::server
