// The worker's Prometheus metrics (docs/metrics.md, zerostate-worker).
// Thread-safe: prometheus-cpp metrics may be updated from any thread.
#pragma once

#include <memory>

#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "worker/engine.h"

namespace zerostate::worker {

class WorkerMetrics {
 public:
  // Registers the metrics in `registry`, which must outlive this object.
  explicit WorkerMetrics(prometheus::Registry& registry);

  // Adds one rank's step. `samples`: samples this rank trained in it.
  // Steps, loss and loss scale are recorded for `primary` ranks only (one
  // per process), phase times and samples for every rank.
  void Record(const StepReport& report, uint64_t samples, bool primary);

 private:
  prometheus::Counter& steps_;
  prometheus::Counter& skipped_;
  prometheus::Counter& samples_;
  prometheus::Gauge& loss_;
  prometheus::Gauge& loss_scale_;
  prometheus::Family<prometheus::Counter>& phase_;
  prometheus::Counter *compute_, *exchange_, *push_, *step_, *gather_;
};

}  // namespace zerostate::worker
