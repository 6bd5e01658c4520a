// One stream of a push (or weight init) or a gather: the data plane. A
// stream moves one StreamPlan's range to or from one server in chunks,
// straight from and into the caller's buffer, and is retried whole after
// UNAVAILABLE or DEADLINE_EXCEEDED (the server acknowledges pieces it
// already has, and serves the same data again). An attempt whose data
// plane connection the server refused at its cap (--max_data_connections)
// goes over gRPC instead. Thread-safe: streams of one call run at once on
// the client's pool.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/byte_budget.h"
#include "client/client_impl.h"
#include "client/data_conn.h"
#include "client/int8_push.h"
#include "client/plan.h"
#include "client/routes.h"
#include "client/ticket_state.h"

namespace zerostate::client {

// What every stream of a job shares; outlives every call.
struct JobContext {
  Client::Impl* client = nullptr;
  std::string job_id;
  uint32_t block_elems = 0;
  // Per server, seen at register/attach (a failover may take a caught-up
  // server's new one; client/routes.h).
  std::shared_ptr<ServerIncarnations> incarnations;
  ByteBudget* budget = nullptr;        // cap on pushed bytes in flight
  // Per server: its TCP data plane (client/data_conn.h), or null where
  // push and gather go over gRPC (a failover may take a caught-up
  // server's new one; client/routes.h).
  std::shared_ptr<DataPlanes> data;
  // Which server serves each shard now (a failover moves a replicated
  // job's shard to a backup; client/routes.h). Null: shard i on server i.
  std::shared_ptr<ShardRoutes> routes;
  // How long UNAVAILABLE is retried (a replicated job fails over sooner
  // than it waits for a server to come back); unset: the client's
  // unavailable_wait.
  std::optional<absl::Duration> unavailable_wait;
  // Payload bytes and elements pushed and gathered (JobClient::wire_stats);
  // may be null.
  WireTally* tally = nullptr;
  // Whether pushes from shared buffers are held (JobClient::SetPushesHeld);
  // may be null (never).
  const std::atomic<bool>* pushes_held = nullptr;
};

// The server that serves `shard` now (JobContext::routes).
inline int ServerOf(const JobContext& job, int shard) {
  return job.routes == nullptr ? shard : job.routes->ServerOf(shard);
}

// The data planes of a job's servers (one per options.servers) from the
// ports they advertised (0 or missing: none), under TLS unless
// options.plaintext: null for every shard unless options.data_plane. Each
// tries the server's same-host plane first (client/shm_conn.h; the
// server's incarnation from `incarnations` identifies it) when
// options.data_shm and no options.data_servers are given. Server i's
// data plane is on the host of `addresses[i]` (where its gRPC port is
// dialled now, ServerConn::address), its connections under `cutters[i]`
// (client/conn_cutter.h) where given.
std::vector<std::shared_ptr<DataConnPool>> DataPools(
    const ClientOptions& options, const std::vector<std::string>& addresses,
    const std::vector<uint32_t>& ports, const std::vector<uint64_t>& incarnations,
    const std::vector<std::shared_ptr<ConnCutter>>& cutters = {});
// The data plane of server `server`, dialled at `address`, at `port` (0:
// none, null), its process `incarnation`, under `cutter` unless null, as
// DataPools makes each.
std::shared_ptr<DataConnPool> DataPool(const ClientOptions& options, int server,
                                       const std::string& address, uint32_t port,
                                       uint64_t incarnation,
                                       std::shared_ptr<ConnCutter> cutter = nullptr);

// ABORTED naming the server when `incarnation` differs from the one seen
// when the job was registered or attached: the server restarted and lost
// the job's state, so nothing it says now can be trusted for this job.
[[nodiscard]] absl::Status CheckIncarnation(const JobContext& job, int shard, uint64_t incarnation);

struct PushCall {
  Method method = Method::kPushGradients;  // or kInitWeights
  uint64_t step = 0;
  uint32_t node = 0;
  Range elems;                // the whole call's range
  const void* data = nullptr;  // elems.size() elements of `src`
  v1::DType src = v1::DTYPE_FP32;
  v1::DType wire = v1::DTYPE_FP32;  // the plain wire
  // The compressed wire (client/int8_push.h): sent instead of `wire` but
  // on the same-host plane. Null: plain.
  std::shared_ptr<Int8Push> int8;
};

// Sends plan.elems of `call` to server plan.shard. Each payload slice
// holds a part of `ticket` and of the byte budget until gRPC releases it,
// so the caller's buffer stays referenced only while the ticket is pending.
[[nodiscard]] absl::Status RunPushStream(const JobContext& job, const PushCall& call,
                                         const StreamPlan& plan,
                                         const std::shared_ptr<Ticket::State>& ticket);

struct GatherCall {
  uint64_t min_version = 0;
  Range elems;          // the whole call's range
  void* out = nullptr;  // elems.size() elements of `out_dtype`
  v1::DType wire = v1::DTYPE_FP32;  // the plain wire
  v1::DType out_dtype = v1::DTYPE_FP32;
  // Ask for DTYPE_INT8 instead of `wire`, but on the same-host plane.
  bool int8 = false;
};

// Reads plan.elems of `call` from server plan.shard into the caller's
// buffer; `cancel` (the call's ticket's) ends a wait for the version at
// once, interrupting the attempt in progress. Errors: DATA_LOSS naming the
// server when a chunk lies outside the asked range, has the wrong dtype,
// length, scales (int8) or version, or data is missing; CANCELLED with
// the cancel's reason.
[[nodiscard]] absl::Status RunGatherStream(const JobContext& job, const GatherCall& call,
                                           const StreamPlan& plan, CallCancel& cancel);

}  // namespace zerostate::client
