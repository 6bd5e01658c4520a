#include "worker/metrics.h"

namespace zerostate::worker {
namespace {

prometheus::Counter& NewCounter(prometheus::Registry& r, const std::string& name, const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({});
}

prometheus::Gauge& NewGauge(prometheus::Registry& r, const std::string& name, const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
}

}  // namespace

WorkerMetrics::WorkerMetrics(prometheus::Registry& r)
    : steps_(NewCounter(r, "zerostate_worker_steps_total", "optimizer steps completed")),
      skipped_(NewCounter(r, "zerostate_worker_steps_skipped_total", "steps skipped (overflow)")),
      samples_(NewCounter(r, "zerostate_worker_samples_total", "samples trained")),
      loss_(NewGauge(r, "zerostate_worker_loss", "loss of the last step")),
      loss_scale_(NewGauge(r, "zerostate_worker_loss_scale", "current fp16 loss scale")),
      phase_(prometheus::BuildCounter()
                 .Name("zerostate_worker_phase_seconds_total")
                 .Help("time per phase: compute, exchange, push, step, gather")
                 .Register(r)),
      compute_(&phase_.Add({{"phase", "compute"}})),
      exchange_(&phase_.Add({{"phase", "exchange"}})),
      push_(&phase_.Add({{"phase", "push"}})),
      step_(&phase_.Add({{"phase", "step"}})),
      gather_(&phase_.Add({{"phase", "gather"}})) {}

void WorkerMetrics::Record(const StepReport& report, uint64_t samples, bool primary) {
  compute_->Increment(report.times.compute);
  exchange_->Increment(report.times.exchange);
  push_->Increment(report.times.push);
  step_->Increment(report.times.step);
  gather_->Increment(report.times.gather);
  samples_.Increment(static_cast<double>(samples));
  if (!primary) return;
  steps_.Increment();
  if (report.skipped) skipped_.Increment();
  loss_.Set(report.loss);
  loss_scale_.Set(report.loss_scale);
}

}  // namespace zerostate::worker
