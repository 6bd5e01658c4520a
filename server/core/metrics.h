// The server's Prometheus metrics (names in docs/metrics.md), registered
// in a registry that main() exposes on the metrics port. Labels carry
// method names, status codes and job ids, never secrets. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/core/optimizer/state_layout.h"
#include "server/core/step_phases.h"
#include "server/core/tier/tier_metrics.h"
#include "zerostate/v1/state_service.pb.h"

namespace zerostate::server {

class ServerMetrics {
 public:
  explicit ServerMetrics(std::shared_ptr<prometheus::Registry> registry);

  // One finished RPC: its latency, payload bytes each way, and its answer.
  void RecordRpc(const std::string& method, const absl::Status& status, double seconds,
                 uint64_t bytes_in, uint64_t bytes_out);

  // Wire traffic of `job` (docs/wire.md): `bytes` of payload that carried
  // `elems` parameters, pushed (`push`) or gathered, in `dtype` (DTYPE_INT8:
  // the compressed wire; else plain). Per parameter: the ratio of the
  // zerostate_wire_bytes_total and zerostate_wire_elements_total series.
  void RecordWire(const std::string& job, bool push, v1::DType dtype, uint64_t bytes,
                  uint64_t elems);

  // Of a gather's elements, `elems` a step wrote into the client's memory
  // itself (server/core/block.h, Block::direct): no copy by the gather.
  void RecordDirectGather(const std::string& job, uint64_t elems);

  // One Step RPC that ran the optimizer (or skipped) on `job`'s shard.
  void RecordStep(const std::string& job, double seconds, uint64_t params, bool skipped,
                  uint64_t version);

  // The phases one GradStats or Step call on `job`'s shard spent (those it measured).
  void RecordStepPhases(const std::string& job, const StepPhaseTimes& times);

  // What one Step made of the speculation (server/core/job_step.h): blocks
  // it only committed, and blocks it stepped again or restored.
  void RecordSpeculation(const std::string& job, uint64_t confirmed, uint64_t redone);

  // A job registered or restored: the RAM it holds, its version, and the
  // bytes of optimizer state (master and moments) per parameter of its
  // layout, labelled with the moment format.
  void SetJob(const std::string& job, uint64_t state_bytes, uint64_t version,
              const StateLayout& layout);
  void ForgetJob(const std::string& job);
  // The RAM budget: `used` by the jobs' copies (zerostate_ram_used_bytes
  // adds the recycled sum buffers), the budget, the jobs.
  void SetRam(uint64_t used, uint64_t budget, size_t jobs);
  // Applied sums a backup keeps idle for reuse (KeptSums), in the budget.
  void SetRecycledSumBytes(uint64_t bytes);
  // Gradient staging memory (server/core/staging_budget.h): bytes in use and
  // --staging_budget_bytes; and one push that began waiting for it.
  void SetStaging(uint64_t used, uint64_t budget);
  void RecordStagingWait();
  // The TCP data plane: connections open, and one refused at the cap
  // (--max_data_connections).
  void SetDataConnections(int open);
  void RecordDataConnectionRefused();
  // Gathers being served on either edge, a wait for their version
  // included: +1 as one begins, -1 as it ends (zerostate_gathers_in_progress).
  void AddGathersInProgress(int delta);
  // The gRPC chunk streams: open, and one refused at the cap
  // (--max_grpc_streams).
  void SetGrpcStreams(int open);
  void RecordGrpcStreamRefused();
  // Rendezvous keys held and their bytes (server/core/rendezvous.h), all
  // tokens and those of tokens with no job here.
  void SetRendezvous(uint64_t keys, uint64_t bytes, uint64_t jobless_keys, uint64_t jobless_bytes);
  // Replicated shards: blocks of the shards this server serves
  // as primary that have fewer live copies than JobSpec.replicas asks; and
  // shard state bytes sent to copies being caught up.
  void SetUnderReplicatedBlocks(uint64_t blocks);
  void RecordCatchupBytes(uint64_t bytes);
  // Bytes of decided steps held for copies being caught up, until each
  // copy acknowledges its step (server/replication/catch_up.h).
  void SetCatchupBacklogBytes(uint64_t bytes);
  // Bytes of summed gradients this server keeps as a backup from its
  // primaries (REPLICA_SUM frames) until their steps take them (KeptSums).
  void SetReplicaKeptSumBytes(uint64_t bytes);
  // The filesystem of --nvme_dir (checkpoints usually live elsewhere).
  void SetDisk(uint64_t used, uint64_t capacity);

  // The sink for `job`'s NVMe tier (the zerostate_tier_* metrics). It keeps
  // the registry alive, so it may outlive this object.
  std::shared_ptr<TierMetricsSink> TierSink(const std::string& job);

  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  const prometheus::Histogram::BucketBoundaries latency_buckets_;
  prometheus::Family<prometheus::Counter>& bytes_received_;
  prometheus::Family<prometheus::Counter>& bytes_sent_;
  prometheus::Family<prometheus::Histogram>& rpc_duration_;
  prometheus::Family<prometheus::Counter>& rejected_;
  prometheus::Family<prometheus::Histogram>& step_duration_;
  const prometheus::Histogram::BucketBoundaries phase_buckets_;
  prometheus::Family<prometheus::Histogram>& step_phase_;
  prometheus::Family<prometheus::Counter>& optimizer_params_;
  prometheus::Family<prometheus::Gauge>& job_version_;
  prometheus::Family<prometheus::Counter>& job_steps_;
  prometheus::Family<prometheus::Counter>& job_skipped_;
  prometheus::Family<prometheus::Counter>& speculative_blocks_;
  prometheus::Family<prometheus::Counter>& wire_bytes_;
  prometheus::Family<prometheus::Counter>& wire_elems_;
  prometheus::Family<prometheus::Counter>& direct_gather_elems_;
  prometheus::Family<prometheus::Gauge>& job_state_bytes_;
  prometheus::Family<prometheus::Gauge>& state_bytes_per_param_;
  prometheus::Family<prometheus::Counter>& tier_bytes_read_;
  prometheus::Family<prometheus::Counter>& tier_bytes_written_;
  prometheus::Family<prometheus::Histogram>& tier_io_duration_;
  prometheus::Family<prometheus::Gauge>& tier_queue_depth_;
  prometheus::Family<prometheus::Counter>& tier_cache_hits_;
  prometheus::Family<prometheus::Counter>& tier_cache_misses_;
  prometheus::Gauge& ram_used_;
  prometheus::Gauge& ram_budget_;
  prometheus::Gauge& jobs_;
  prometheus::Gauge& staging_used_;
  prometheus::Gauge& staging_budget_;
  prometheus::Counter& staging_waits_;
  prometheus::Gauge& data_connections_;
  prometheus::Counter& data_connections_refused_;
  prometheus::Gauge& gathers_in_progress_;
  prometheus::Gauge& grpc_streams_;
  prometheus::Counter& grpc_streams_refused_;
  prometheus::Family<prometheus::Gauge>& rendezvous_keys_;
  prometheus::Family<prometheus::Gauge>& rendezvous_bytes_;
  prometheus::Gauge& under_replicated_blocks_;
  prometheus::Counter& catchup_bytes_;
  prometheus::Gauge& catchup_backlog_bytes_;
  prometheus::Gauge& replica_kept_sum_bytes_;
  prometheus::Gauge& replica_recycled_sum_bytes_;
  // What zerostate_ram_used_bytes adds up.
  absl::Mutex ram_mu_;
  uint64_t jobs_ram_ ABSL_GUARDED_BY(ram_mu_) = 0;
  uint64_t recycled_sum_bytes_ ABSL_GUARDED_BY(ram_mu_) = 0;
  prometheus::Gauge& disk_used_;
  prometheus::Gauge& disk_capacity_;
};

}  // namespace zerostate::server
