#include "server/core/metrics.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace zerostate::server {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

// The labels of a per-job series. Not `job`: Prometheus keeps that name for
// the scrape job and would rename ours to `exported_job` on scrape.
prometheus::Labels JobLabels(const std::string& job) { return {{"job_id", job}}; }

prometheus::Labels FormatLabels(const std::string& job, MomentFormat format) {
  static constexpr const char* kNames[kMomentFormatCount] = {"fp32", "bf16", "int8"};
  return {{"job_id", job}, {"moment_format", kNames[static_cast<int>(format)]}};
}

// 100 us .. ~200 s, factor 2.5 per bucket.
prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  prometheus::Histogram::BucketBoundaries b;
  for (double v = 1e-4; v < 250; v *= 2.5) b.push_back(v);
  return b;
}

// 10 us .. ~250 s: one phase of a step, from a wait that did not wait to
// a pass over a large shard on disk.
prometheus::Histogram::BucketBoundaries PhaseBuckets() {
  prometheus::Histogram::BucketBoundaries b;
  for (double v = 1e-5; v < 300; v *= 2.5) b.push_back(v);
  return b;
}

// 10 us .. ~2.5 s: one direct read or write of a block.
prometheus::Histogram::BucketBoundaries IoBuckets() {
  prometheus::Histogram::BucketBoundaries b;
  for (double v = 1e-5; v < 3; v *= 2.5) b.push_back(v);
  return b;
}

class PrometheusTierSink final : public TierMetricsSink {
 public:
  PrometheusTierSink(std::shared_ptr<prometheus::Registry> registry, prometheus::Counter& read,
                     prometheus::Counter& written, prometheus::Histogram& read_seconds,
                     prometheus::Histogram& write_seconds, prometheus::Gauge& depth,
                     prometheus::Counter& hits, prometheus::Counter& misses)
      : registry_(std::move(registry)), read_(read), written_(written),
        read_seconds_(read_seconds), write_seconds_(write_seconds), depth_(depth),
        hits_(hits), misses_(misses) {}

  void RecordIo(io::IoOp op, uint64_t bytes, double seconds) override {
    bool is_read = op == io::IoOp::kRead;
    (is_read ? read_ : written_).Increment(static_cast<double>(bytes));
    (is_read ? read_seconds_ : write_seconds_).Observe(seconds);
  }
  void SetQueueDepth(int in_flight) override { depth_.Set(in_flight); }
  void RecordCache(bool hit) override { (hit ? hits_ : misses_).Increment(); }

 private:
  const std::shared_ptr<prometheus::Registry> registry_;  // owns the metrics below
  prometheus::Counter& read_;
  prometheus::Counter& written_;
  prometheus::Histogram& read_seconds_;
  prometheus::Histogram& write_seconds_;
  prometheus::Gauge& depth_;
  prometheus::Counter& hits_;
  prometheus::Counter& misses_;
};

}  // namespace

ServerMetrics::ServerMetrics(std::shared_ptr<prometheus::Registry> r)
    : registry_(std::move(r)),
      latency_buckets_(LatencyBuckets()),
      bytes_received_(BuildCounter().Name("zerostate_rpc_bytes_received_total")
                          .Help("Payload bytes received, by method").Register(*registry_)),
      bytes_sent_(BuildCounter().Name("zerostate_rpc_bytes_sent_total")
                      .Help("Payload bytes sent, by method").Register(*registry_)),
      rpc_duration_(BuildHistogram().Name("zerostate_rpc_duration_seconds")
                        .Help("RPC latency on the server, by method").Register(*registry_)),
      rejected_(BuildCounter().Name("zerostate_rpc_rejected_total")
                    .Help("Calls answered with an error, by method and gRPC code")
                    .Register(*registry_)),
      step_duration_(BuildHistogram().Name("zerostate_step_duration_seconds")
                         .Help("Optimizer pass of one Step over the shard").Register(*registry_)),
      phase_buckets_(PhaseBuckets()),
      step_phase_(BuildHistogram().Name("zerostate_step_phase_seconds")
                      .Help("Time one GradStats or Step call spent in each phase of the step")
                      .Register(*registry_)),
      optimizer_params_(BuildCounter().Name("zerostate_optimizer_params_total")
                            .Help("Parameters stepped by the optimizer").Register(*registry_)),
      job_version_(BuildGauge().Name("zerostate_job_version")
                       .Help("Lowest block version of the job's shard").Register(*registry_)),
      job_steps_(BuildCounter().Name("zerostate_job_steps_total")
                     .Help("Steps applied").Register(*registry_)),
      job_skipped_(BuildCounter().Name("zerostate_job_steps_skipped_total")
                       .Help("Steps skipped on the coordinator's word").Register(*registry_)),
      speculative_blocks_(BuildCounter().Name("zerostate_speculative_blocks_total")
                              .Help("Blocks stepped speculatively, by what their Step made "
                                    "of it: confirmed (only committed) or redone (stepped "
                                    "again or restored)")
                              .Register(*registry_)),
      wire_bytes_(BuildCounter().Name("zerostate_wire_bytes_total")
                      .Help("Payload bytes of gradients pushed and weights gathered, by "
                            "direction (push, gather) and wire (plain, int8)")
                      .Register(*registry_)),
      wire_elems_(BuildCounter().Name("zerostate_wire_elements_total")
                      .Help("Parameters those payload bytes carried, by direction and wire")
                      .Register(*registry_)),
      direct_gather_elems_(BuildCounter().Name("zerostate_gather_direct_elements_total")
                               .Help("Gathered parameters whose copy the step wrote straight "
                                     "into a same-host client's buffer (not copied by the "
                                     "gather)")
                               .Register(*registry_)),
      job_state_bytes_(BuildGauge().Name("zerostate_job_state_bytes")
                           .Help("RAM the job holds on this server").Register(*registry_)),
      state_bytes_per_param_(BuildGauge().Name("zerostate_state_bytes_per_param")
                                 .Help("Bytes of optimizer state (fp32 master and moments) "
                                       "per parameter, by the job's moment format")
                                 .Register(*registry_)),
      tier_bytes_read_(BuildCounter().Name("zerostate_tier_bytes_read_total")
                           .Help("Bytes the NVMe tier read from disk").Register(*registry_)),
      tier_bytes_written_(BuildCounter().Name("zerostate_tier_bytes_written_total")
                              .Help("Bytes the NVMe tier wrote to disk").Register(*registry_)),
      tier_io_duration_(BuildHistogram().Name("zerostate_tier_io_duration_seconds")
                            .Help("Latency of one NVMe tier read or write, by op")
                            .Register(*registry_)),
      tier_queue_depth_(BuildGauge().Name("zerostate_tier_queue_depth")
                            .Help("Requests in flight in the NVMe tier's step pipeline")
                            .Register(*registry_)),
      tier_cache_hits_(BuildCounter().Name("zerostate_tier_cache_hits_total")
                           .Help("Block reads served by the NVMe tier's RAM cache")
                           .Register(*registry_)),
      tier_cache_misses_(BuildCounter().Name("zerostate_tier_cache_misses_total")
                             .Help("Block reads that went to disk").Register(*registry_)),
      ram_used_(BuildGauge().Name("zerostate_ram_used_bytes")
                    .Help("RAM of the budget held: all jobs, and backups' recycled sum buffers")
                    .Register(*registry_).Add({})),
      ram_budget_(BuildGauge().Name("zerostate_ram_budget_bytes").Help("The server's RAM budget")
                      .Register(*registry_).Add({})),
      jobs_(BuildGauge().Name("zerostate_jobs").Help("Jobs registered").Register(*registry_)
                .Add({})),
      staging_used_(BuildGauge().Name("zerostate_staging_used_bytes")
                        .Help("Gradient staging memory of early nodes' pieces in use")
                        .Register(*registry_).Add({})),
      staging_budget_(BuildGauge().Name("zerostate_staging_budget_bytes")
                          .Help("The server's gradient staging budget (--staging_budget_bytes)")
                          .Register(*registry_).Add({})),
      staging_waits_(BuildCounter().Name("zerostate_staging_waits_total")
                         .Help("Times a push waited for gradient staging memory")
                         .Register(*registry_).Add({})),
      data_connections_(BuildGauge().Name("zerostate_data_connections")
                            .Help("TCP data plane connections open")
                            .Register(*registry_).Add({})),
      data_connections_refused_(
          BuildCounter().Name("zerostate_data_connections_refused_total")
              .Help("TCP data plane connections refused at the cap (--max_data_connections)")
              .Register(*registry_).Add({})),
      gathers_in_progress_(BuildGauge().Name("zerostate_gathers_in_progress")
                               .Help("Gathers being served, waiting for their version or sending")
                               .Register(*registry_).Add({})),
      grpc_streams_(BuildGauge().Name("zerostate_grpc_streams")
                        .Help("gRPC chunk streams (InitWeights, PushGradients, Gather) open")
                        .Register(*registry_).Add({})),
      grpc_streams_refused_(
          BuildCounter().Name("zerostate_grpc_streams_refused_total")
              .Help("gRPC chunk streams refused at the cap (--max_grpc_streams)")
              .Register(*registry_).Add({})),
      rendezvous_keys_(BuildGauge().Name("zerostate_rendezvous_keys")
                           .Help("Rendezvous keys held, by whose token: one with a job here "
                                 "(holder=job) or none (holder=jobless)")
                           .Register(*registry_)),
      rendezvous_bytes_(BuildGauge().Name("zerostate_rendezvous_bytes")
                            .Help("Bytes of the rendezvous keys held (keys, values and a fixed "
                                  "overhead each), by whose token")
                            .Register(*registry_)),
      under_replicated_blocks_(
          BuildGauge().Name("zerostate_under_replicated_blocks")
              .Help("Blocks of shards served here as primary with fewer live copies than "
                    "JobSpec.replicas asks")
              .Register(*registry_).Add({})),
      catchup_bytes_(BuildCounter().Name("zerostate_catchup_bytes_total")
                         .Help("Shard state bytes sent to copies being caught up")
                         .Register(*registry_).Add({})),
      catchup_backlog_bytes_(
          BuildGauge().Name("zerostate_catchup_backlog_bytes")
              .Help("Bytes of decided steps held for copies being caught up, until each "
                    "copy acknowledges its step")
              .Register(*registry_).Add({})),
      replica_kept_sum_bytes_(
          BuildGauge().Name("zerostate_replica_kept_sum_bytes")
              .Help("Bytes of summed gradients kept here as a backup from primaries "
                    "(REPLICA_SUM frames) until their steps take them")
              .Register(*registry_).Add({})),
      replica_recycled_sum_bytes_(
          BuildGauge().Name("zerostate_replica_recycled_sum_bytes")
              .Help("Bytes of applied summed gradients a backup keeps idle to receive the next "
                    "step's sums into, in room of the RAM budget the jobs leave")
              .Register(*registry_).Add({})),
      disk_used_(BuildGauge().Name("zerostate_disk_used_bytes")
                     .Help("Bytes used on the filesystem of --nvme_dir").Register(*registry_)
                     .Add({})),
      disk_capacity_(BuildGauge().Name("zerostate_disk_capacity_bytes")
                         .Help("Size of the filesystem of --nvme_dir").Register(*registry_)
                         .Add({})) {}

void ServerMetrics::RecordRpc(const std::string& method, const absl::Status& status,
                              double seconds, uint64_t bytes_in, uint64_t bytes_out) {
  rpc_duration_.Add({{"method", method}}, latency_buckets_).Observe(seconds);
  if (bytes_in > 0) bytes_received_.Add({{"method", method}}).Increment(bytes_in);
  if (bytes_out > 0) bytes_sent_.Add({{"method", method}}).Increment(bytes_out);
  if (!status.ok()) {
    std::string reason = absl::StatusCodeToString(status.code());
    rejected_.Add({{"method", method}, {"reason", reason}}).Increment();
  }
}

void ServerMetrics::RecordStep(const std::string& job, double seconds, uint64_t params,
                               bool skipped, uint64_t version) {
  step_duration_.Add(JobLabels(job), latency_buckets_).Observe(seconds);
  optimizer_params_.Add(JobLabels(job)).Increment(params);
  (skipped ? job_skipped_ : job_steps_).Add(JobLabels(job)).Increment();
  job_version_.Add(JobLabels(job)).Set(version);
}

void ServerMetrics::RecordStepPhases(const std::string& job, const StepPhaseTimes& times) {
  times.ForEach([&](const char* phase, double seconds) {
    step_phase_.Add({{"job_id", job}, {"phase", phase}}, phase_buckets_).Observe(seconds);
  });
}

namespace {

prometheus::Labels WireLabels(const std::string& job, bool push, bool int8) {
  return {{"job_id", job}, {"direction", push ? "push" : "gather"}, {"wire", int8 ? "int8" : "plain"}};
}

}  // namespace

void ServerMetrics::RecordWire(const std::string& job, bool push, v1::DType dtype,
                               uint64_t bytes, uint64_t elems) {
  const prometheus::Labels labels = WireLabels(job, push, dtype == v1::DTYPE_INT8);
  wire_bytes_.Add(labels).Increment(static_cast<double>(bytes));
  wire_elems_.Add(labels).Increment(static_cast<double>(elems));
}

void ServerMetrics::RecordDirectGather(const std::string& job, uint64_t elems) {
  if (elems > 0) direct_gather_elems_.Add(JobLabels(job)).Increment(static_cast<double>(elems));
}

void ServerMetrics::RecordSpeculation(const std::string& job, uint64_t confirmed,
                                      uint64_t redone) {
  if (confirmed > 0) {
    speculative_blocks_.Add({{"job_id", job}, {"outcome", "confirmed"}}).Increment(confirmed);
  }
  if (redone > 0) {
    speculative_blocks_.Add({{"job_id", job}, {"outcome", "redone"}}).Increment(redone);
  }
}

void ServerMetrics::SetJob(const std::string& job, uint64_t state_bytes, uint64_t version,
                           const StateLayout& layout) {
  for (int f = 0; f < kMomentFormatCount; ++f) {
    const auto format = static_cast<MomentFormat>(f);
    if (format != layout.format) {
      state_bytes_per_param_.Remove(&state_bytes_per_param_.Add(FormatLabels(job, format)));
    }
  }
  state_bytes_per_param_.Add(FormatLabels(job, layout.format)).Set(layout.bytes_per_param());
  job_state_bytes_.Add(JobLabels(job)).Set(state_bytes);
  job_version_.Add(JobLabels(job)).Set(version);
  job_steps_.Add(JobLabels(job));
  job_skipped_.Add(JobLabels(job));
  optimizer_params_.Add(JobLabels(job));
}

void ServerMetrics::ForgetJob(const std::string& job) {
  job_state_bytes_.Remove(&job_state_bytes_.Add(JobLabels(job)));
  for (int f = 0; f < kMomentFormatCount; ++f) {
    auto& gauge = state_bytes_per_param_.Add(FormatLabels(job, static_cast<MomentFormat>(f)));
    state_bytes_per_param_.Remove(&gauge);
  }
  job_version_.Remove(&job_version_.Add(JobLabels(job)));
  direct_gather_elems_.Remove(&direct_gather_elems_.Add(JobLabels(job)));
  for (bool push : {true, false}) {
    for (bool int8 : {true, false}) {
      wire_bytes_.Remove(&wire_bytes_.Add(WireLabels(job, push, int8)));
      wire_elems_.Remove(&wire_elems_.Add(WireLabels(job, push, int8)));
    }
  }
}

void ServerMetrics::SetStaging(uint64_t used, uint64_t budget) {
  staging_used_.Set(static_cast<double>(used));
  staging_budget_.Set(static_cast<double>(budget));
}

void ServerMetrics::RecordStagingWait() { staging_waits_.Increment(); }

void ServerMetrics::SetDataConnections(int open) { data_connections_.Set(open); }

void ServerMetrics::RecordDataConnectionRefused() { data_connections_refused_.Increment(); }

void ServerMetrics::AddGathersInProgress(int delta) { gathers_in_progress_.Increment(delta); }

void ServerMetrics::SetGrpcStreams(int open) { grpc_streams_.Set(open); }

void ServerMetrics::RecordGrpcStreamRefused() { grpc_streams_refused_.Increment(); }

void ServerMetrics::SetRendezvous(uint64_t keys, uint64_t bytes, uint64_t jobless_keys,
                                  uint64_t jobless_bytes) {
  rendezvous_keys_.Add({{"holder", "job"}}).Set(static_cast<double>(keys - jobless_keys));
  rendezvous_keys_.Add({{"holder", "jobless"}}).Set(static_cast<double>(jobless_keys));
  rendezvous_bytes_.Add({{"holder", "job"}}).Set(static_cast<double>(bytes - jobless_bytes));
  rendezvous_bytes_.Add({{"holder", "jobless"}}).Set(static_cast<double>(jobless_bytes));
}

void ServerMetrics::SetReplicaKeptSumBytes(uint64_t bytes) {
  replica_kept_sum_bytes_.Set(static_cast<double>(bytes));
}

void ServerMetrics::SetUnderReplicatedBlocks(uint64_t blocks) {
  under_replicated_blocks_.Set(static_cast<double>(blocks));
}

void ServerMetrics::RecordCatchupBytes(uint64_t bytes) {
  catchup_bytes_.Increment(static_cast<double>(bytes));
}

void ServerMetrics::SetCatchupBacklogBytes(uint64_t bytes) {
  catchup_backlog_bytes_.Set(static_cast<double>(bytes));
}

void ServerMetrics::SetDisk(uint64_t used, uint64_t capacity) {
  disk_used_.Set(used);
  disk_capacity_.Set(capacity);
}

void ServerMetrics::SetRecycledSumBytes(uint64_t bytes) {
  absl::MutexLock lock(&ram_mu_);
  recycled_sum_bytes_ = bytes;
  replica_recycled_sum_bytes_.Set(static_cast<double>(bytes));
  ram_used_.Set(static_cast<double>(jobs_ram_ + recycled_sum_bytes_));
}

void ServerMetrics::SetRam(uint64_t used, uint64_t budget, size_t jobs) {
  absl::MutexLock lock(&ram_mu_);
  jobs_ram_ = used;
  ram_used_.Set(static_cast<double>(jobs_ram_ + recycled_sum_bytes_));
  ram_budget_.Set(budget);
  jobs_.Set(jobs);
}

std::shared_ptr<TierMetricsSink> ServerMetrics::TierSink(const std::string& job) {
  return std::make_shared<PrometheusTierSink>(
      registry_, tier_bytes_read_.Add(JobLabels(job)), tier_bytes_written_.Add(JobLabels(job)),
      tier_io_duration_.Add({{"op", "read"}}, IoBuckets()),
      tier_io_duration_.Add({{"op", "write"}}, IoBuckets()), tier_queue_depth_.Add(JobLabels(job)),
      tier_cache_hits_.Add(JobLabels(job)), tier_cache_misses_.Add(JobLabels(job)));
}

}  // namespace zerostate::server
