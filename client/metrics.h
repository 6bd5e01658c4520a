// The client library's Prometheus metrics (docs/metrics.md, "zerostate
// client library"): bytes by server, call latency and retries by method.
// Every method is a no-op when the library was given no registry.
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace prometheus {
class Counter;
class Histogram;
class Registry;
}  // namespace prometheus

namespace zerostate::client {

// The RPCs the client makes, for the `method` label.
enum class Method {
  kRegisterJob,
  kJobStatus,
  kPushGradients,
  kInitWeights,
  kGradStats,
  kStep,
  kGather,
  kRendezvous,
  kCheckpoint,
  kRestore,
  kDeleteJob,
};
inline constexpr int kNumMethods = 11;

// The method's name as in the .proto ("PushGradients").
const char* MethodName(Method m);

class ClientMetrics {
 public:
  // Registers the families in `registry` (merged with families of the same
  // name already there); `registry` may be null: nothing is recorded.
  ClientMetrics(prometheus::Registry* registry, const std::vector<std::string>& servers);

  void AddBytesSent(int server, uint64_t bytes);
  void AddBytesReceived(int server, uint64_t bytes);
  // Payload bytes the same-host plane read (a push) or wrote (a gather) in
  // place in a shared buffer (client/shared_buffer.h): bytes the client
  // did not copy. Counted per frame sent or piece placed, so a retried
  // attempt counts again.
  void AddBytesZeroCopy(int server, bool push, uint64_t bytes);
  void ObserveSeconds(Method m, double seconds);
  void AddRetry(Method m);

 private:
  std::vector<prometheus::Counter*> sent_;      // by server
  std::vector<prometheus::Counter*> received_;  // by server
  std::vector<prometheus::Counter*> zero_copy_;  // by server: push, gather
  std::vector<prometheus::Histogram*> seconds_;  // by method
  std::vector<prometheus::Counter*> retries_;    // by method
};

}  // namespace zerostate::client
