#include "client/metrics.h"

#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace zerostate::client {

const char* MethodName(Method m) {
  static constexpr const char* kNames[kNumMethods] = {
      "RegisterJob", "JobStatus", "PushGradients", "InitWeights",
      "GradStats",   "Step",      "Gather",        "Rendezvous",
      "Checkpoint",  "Restore",   "DeleteJob"};
  return kNames[static_cast<int>(m)];
}

ClientMetrics::ClientMetrics(prometheus::Registry* registry,
                             const std::vector<std::string>& servers) {
  if (registry == nullptr) return;
  auto& sent = prometheus::BuildCounter()
                   .Name("zerostate_client_bytes_sent_total")
                   .Help("payload bytes pushed")
                   .Register(*registry);
  auto& received = prometheus::BuildCounter()
                       .Name("zerostate_client_bytes_received_total")
                       .Help("payload bytes gathered")
                       .Register(*registry);
  auto& zero_copy = prometheus::BuildCounter()
                        .Name("zerostate_client_zero_copy_bytes_total")
                        .Help("payload bytes moved in place in shared buffers (same host)")
                        .Register(*registry);
  for (const std::string& s : servers) {
    sent_.push_back(&sent.Add({{"server", s}}));
    received_.push_back(&received.Add({{"server", s}}));
    zero_copy_.push_back(&zero_copy.Add({{"server", s}, {"op", "push"}}));
    zero_copy_.push_back(&zero_copy.Add({{"server", s}, {"op", "gather"}}));
  }
  auto& seconds = prometheus::BuildHistogram()
                      .Name("zerostate_client_rpc_duration_seconds")
                      .Help("latency of one call, all attempts")
                      .Register(*registry);
  auto& retries = prometheus::BuildCounter()
                      .Name("zerostate_client_retries_total")
                      .Help("attempts retried after UNAVAILABLE or DEADLINE_EXCEEDED")
                      .Register(*registry);
  const prometheus::Histogram::BucketBoundaries buckets = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  for (int i = 0; i < kNumMethods; ++i) {
    const char* name = MethodName(static_cast<Method>(i));
    seconds_.push_back(&seconds.Add({{"method", name}}, buckets));
    retries_.push_back(&retries.Add({{"method", name}}));
  }
}

void ClientMetrics::AddBytesSent(int server, uint64_t bytes) {
  if (!sent_.empty()) sent_[server]->Increment(static_cast<double>(bytes));
}

void ClientMetrics::AddBytesReceived(int server, uint64_t bytes) {
  if (!received_.empty()) received_[server]->Increment(static_cast<double>(bytes));
}

void ClientMetrics::AddBytesZeroCopy(int server, bool push, uint64_t bytes) {
  if (!zero_copy_.empty())
    zero_copy_[2 * server + (push ? 0 : 1)]->Increment(static_cast<double>(bytes));
}

void ClientMetrics::ObserveSeconds(Method m, double seconds) {
  if (!seconds_.empty()) seconds_[static_cast<int>(m)]->Observe(seconds);
}

void ClientMetrics::AddRetry(Method m) {
  if (!retries_.empty()) retries_[static_cast<int>(m)]->Increment();
}

}  // namespace zerostate::client
