// The zerostate client library: how trainers reach the state service.
//
// A Client holds channels to every state server. A JobClient is a handle to
// one job across all of them: it routes every element range to the servers
// that own it (common/shard_map.h), splits it into chunks of about 1 MiB,
// keeps several streams per server in flight under a cap on bytes in flight,
// converts between fp32 and the job's wire dtypes with vectorised code, and
// writes gathered weights straight into the caller's buffer.
//
// Every call has a deadline (ClientOptions::rpc_timeout). UNAVAILABLE and
// DEADLINE_EXCEEDED are retried with exponential backoff up to
// ClientOptions::max_attempts, UNAVAILABLE for at least
// ClientOptions::unavailable_wait; this is safe because pushes and steps
// are idempotent on the server. A server that stays down yields
// UNAVAILABLE naming its address.
//
// Thread safety: Client and JobClient are thread-safe; any number of calls
// may run at once. Buffers passed to an async call must stay valid until
// its Ticket is waited on.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/job_spec.h"
#include "common/shard_map.h"
#include "zerostate/v1/state_service.pb.h"

namespace prometheus {
class Registry;
}

namespace zerostate::client {

namespace v1 = ::zerostate::v1;

struct ClientOptions {
  // State server addresses ("host:port"), in shard order. Required.
  std::vector<std::string> servers;
  // gRPC channels opened to each server; streams are spread over them
  // (one TCP connection per channel).
  int channels_per_server = 2;
  // Concurrent push or gather streams per server for one call (see
  // userspace_tls_streams_per_server for TLS without kTLS, and
  // same_host_streams_per_server for servers on this host).
  int streams_per_server = 4;
  // Payload bytes per chunk message.
  size_t chunk_bytes = 1 << 20;
  // Cap on payload bytes in flight per JobClient (backpressure), shared by
  // gRPC and the data plane: a chunk's bytes count until the server has
  // them (gRPC freed the slice; the data plane's PUSH_ACK came).
  size_t max_bytes_in_flight = 256u << 20;
  // Deadline of each RPC attempt.
  std::chrono::milliseconds rpc_timeout{60000};
  // Attempts per RPC for UNAVAILABLE / DEADLINE_EXCEEDED (1 = no retry).
  int max_attempts = 5;
  // How long a server may stay unreachable: UNAVAILABLE (connection
  // refused or reset, no server) is retried past max_attempts, at least
  // every max_backoff, until this long after the call began; other codes
  // keep to max_attempts. 0: max_attempts bounds UNAVAILABLE too. A
  // trainer that must outlive a restarted server sets it to how long a
  // restart may take (zerostate-worker: --server_wait_seconds).
  std::chrono::milliseconds unavailable_wait{0};
  // For a job with backups (JobSpec.replicas > 0): how long a
  // shard's server may stay unreachable (UNAVAILABLE) before the client
  // moves the shard to the backup that takes it over (failover), instead
  // of unavailable_wait. The interrupted step's pushes are sent again to the
  // new primary, so a caller keeps a pushed buffer unchanged until the
  // step's new version is gathered.
  std::chrono::milliseconds failover_wait{2000};
  // Liveness of a server that keeps its connections open but no longer
  // answers (hung, stopped, wedged; its kernel still acknowledges every
  // byte): each gRPC channel pings its server after keepalive_time without
  // traffic and during long silent calls, and a ping not answered within
  // keepalive_timeout ends the connection, failing its calls UNAVAILABLE
  // at once (retried, then failover for a replicated job) instead of
  // after their rpc_timeout. The same moment cuts the data-plane
  // connections to that server (client/conn_cutter.h), and new ones are
  // refused until its channel answers again; a new connection to it gets
  // keepalive_time + keepalive_timeout (at least 2 s) to complete. 0: no
  // keepalive (a hung server is waited out). At least 1000 ms: servers
  // refuse pings more often than that.
  std::chrono::milliseconds keepalive_time{1000};
  std::chrono::milliseconds keepalive_timeout{2000};
  std::chrono::milliseconds initial_backoff{50};
  std::chrono::milliseconds max_backoff{2000};
  // Optional: where the library registers its metrics (bytes, latency, retries).
  std::shared_ptr<prometheus::Registry> metrics;
  // Threads of each of the client's two pools: one runs push and init
  // streams, the other gather streams (a gather waiting for a version never
  // holds up the pushes and the Step that bring it). Per-server fan-outs
  // (GradStats, Step, ...) run on a control pool of their own, 2 threads
  // per server but one, started with the client.
  // 0 = 2 * servers * streams_per_server (at least 4).
  int threads = 0;
  // Extra integer gRPC channel arguments, applied after the library's own
  // (for tuning and benchmarks), e.g. {"grpc.http2.lookahead_bytes", 1 << 24}.
  std::vector<std::pair<std::string, int>> channel_args;
  // Transport security, one of the two required: TLS, trusting the servers'
  // certificates signed by the CA in tls_ca_file (PEM), presenting
  // tls_cert_file / tls_key_file (PEM, both or neither) to servers that
  // require client certificates (mutual TLS); or plaintext = true for
  // servers started with --plaintext.
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  bool plaintext = false;
  // The job's credential (32 to 256 printable characters), sent with every
  // call in the metadata entry "zerostate-job-token"; never logged. A
  // Client carries one token, shared by every job it registers or attaches
  // to. Empty: the first RegisterJob or RestoreJob has the first server
  // generate one (256 random bits), registers it on the other servers and
  // uses it from then on (JobClient::token() returns it, for the nodes that
  // attach); AttachJob and Rendezvous need a token.
  std::string job_token;
  // Push and gather over the servers' TCP data plane (framed messages on
  // persistent TCP connections, several times gRPC's throughput per
  // connection; docs/architecture.md) when the server advertises one; else,
  // or when false, over gRPC. Under TLS the data plane speaks TLS 1.3 with
  // the same files as the channels (tls_ca_file, and tls_cert_file /
  // tls_key_file for mutual TLS). Weight init and every other call always
  // use gRPC.
  bool data_plane = true;
  // With data_plane, reach a server that shares this host through shared
  // memory (a memfd segment per connection; docs/architecture.md) instead
  // of loopback TCP, found automatically; false: TCP. Not tried when
  // data_servers is given.
  bool data_shm = true;
  // Under TLS, hand the data plane's TLS records to the kernel (kTLS) where
  // it offers it; false: OpenSSL encrypts in userspace (for comparison).
  bool data_ktls = true;
  // Under TLS with the data plane, where this host's kernel has no TLS
  // offload (or data_ktls is false), every record is sealed and opened on
  // the streams' threads: streams per server are one per core over all
  // servers (at least one), at most this (0: streams_per_server), so that
  // the cipher runs on every core and no two streams share one
  // (data_streams.h; docs/performance.md). Plaintext and kTLS keep
  // streams_per_server.
  int userspace_tls_streams_per_server = 8;
  // With the same-host plane (data_plane and data_shm, no data_servers),
  // when every server is on this host by its address (localhost, this
  // host's name, a loopback or interface address; no DNS lookup), each
  // stream's thread copies its payloads into and out of its segment:
  // streams_per_server is raised to this (0: not raised), to no more
  // streams over all servers than the host has cores (data_streams.h; on
  // the H200 host 8 streams beat 4 in 13 of 16 runs; docs/performance.md).
  int same_host_streams_per_server = 8;
  // Optional: the data plane address of each server, in shard order, in
  // place of "<host of servers[i]>:<the port the server advertises>" (for a
  // proxy or NAT in between, and tests).
  std::vector<std::string> data_servers;
  // Testing only: called when a call to `server` for `shard` of a
  // replicated job failed as if the server were gone, before the client
  // probes it (client/failover.cc); lets a test change the cluster at that
  // moment (a fenced server rejoining) without timing. Empty: nothing.
  std::function<void(int shard, int server)> before_failover_probe;
};

// The result of an asynchronous call. Wait() blocks until it is done and
// returns its status; it may be called more than once.
class Ticket {
 public:
  class State;
  Ticket() = default;  // an already-completed OK ticket
  explicit Ticket(std::shared_ptr<State> state) : state_(std::move(state)) {}
  [[nodiscard]] absl::Status Wait() const;
  bool Done() const;
  // Blocks until it is done or `timeout` passed, whichever comes first;
  // returns Done() (the status is Wait()'s).
  bool WaitFor(absl::Duration timeout) const;
  // A gather's ticket: the gather stops waiting for its version (a driver
  // whose Step failed, so that version will not come, or that no longer
  // wants it): its streams end at once, the ticket completing CANCELLED
  // with `why` (once the server's data written into the buffer so far is
  // done: the buffer is the caller's again when Wait returns). Other calls
  // (pushes: a step's gradients reach the servers whole or are pushed
  // again; the rest wait on nothing) and a completed ticket ignore it.
  // Thread-safe, from any thread, any number of times.
  void Cancel(absl::string_view why) const;

 private:
  std::shared_ptr<State> state_;
};

// Summed gradient statistics of one step over every server.
struct GradStatsResult {
  double sum_squares = 0;
  uint64_t nonfinite_count = 0;
};

// Payload bytes on the wire since the JobClient was made, and the
// parameters they carried, by direction (JobClient::wire_stats). With the
// int8 wire (JobSpec.gradient_wire / weight_wire) about 1.016 bytes per
// parameter; plain: the dtype's size.
struct WireStats {
  uint64_t push_bytes = 0;
  uint64_t push_elems = 0;
  uint64_t gather_bytes = 0;
  uint64_t gather_elems = 0;
};

// Why a job cannot go on after a failed step (JobClient::EndIfLost).
struct JobLoss {
  enum class Cause {
    kNone,          // every server holds the job
    kShardLost,     // a server restarted (or the job was deleted there)
    kServerSilent,  // a server did not answer within the wait
  };
  Cause cause = Cause::kNone;
  std::string account;  // names the server; "" for kNone
};

class JobClient;
class SharedBuffer;  // client/shared_buffer.h

class Client {
 public:
  // Opens channels to every server (lazily connected). Errors:
  // INVALID_ARGUMENT for empty server list or bad options.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Client>> Connect(ClientOptions options);
  ~Client();

  // Registers the job on every server (its shard of the layout), or attaches
  // to it if it exists with the same spec. The spec is validated here first:
  // a bad spec is refused before anything is sent.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<JobClient>> RegisterJob(const v1::JobSpec& spec);

  // Attaches to a job registered by someone else (reads its spec from the
  // first server) with ClientOptions::job_token. Errors: INVALID_ARGUMENT
  // (job_id), UNAUTHENTICATED (no token, or one no job on a server has),
  // PERMISSION_DENIED (the token of another job), whether or not the job
  // exists (a server never says NOT_FOUND for a job); FAILED_PRECONDITION
  // (the shards are more than one version apart, as Version).
  [[nodiscard]] absl::StatusOr<std::unique_ptr<JobClient>> AttachJob(const std::string& job_id);

  // Loads the checkpoint in `path` (JobClient::Checkpoint's answer, on a
  // filesystem every server reaches) onto this client's servers, whatever
  // number of servers wrote it, and attaches to the job. `num_nodes` 0
  // keeps the checkpoint's node count. Each server verifies every block it
  // loads; on any error no server has swapped the checkpoint in unless it
  // loaded it whole. A job of the same id on a server is replaced if it has
  // this client's token and the checkpoint's layout. Errors: NOT_FOUND,
  // DATA_LOSS, FAILED_PRECONDITION, UNAUTHENTICATED / PERMISSION_DENIED
  // (see the Restore RPC), INVALID_ARGUMENT (empty path).
  [[nodiscard]] absl::StatusOr<std::unique_ptr<JobClient>> RestoreJob(const std::string& path,
                                                                      uint32_t num_nodes = 0);

  // A keyed all-gather of small values among `world` ranks through the
  // first server (NCCL unique ids, barriers). Blocks until all ranks called.
  [[nodiscard]] absl::StatusOr<std::vector<std::string>> Rendezvous(const std::string& ns,
                                                                    const std::string& key,
                                                                    uint32_t rank, uint32_t world,
                                                                    const std::string& value);

  // A shared buffer of at least `bytes` (rounded up to whole pages):
  // page-aligned, zeroed memory (a sealed memfd, allocated whole now and
  // charged to this process) that a state server on this host reads and
  // writes in place. A push (PushAsync / Push) whose
  // `data`, or a gather (GatherAsync / Gather) whose `out`, lies entirely
  // inside one shared buffer, in the wire's dtype (a push in the job's
  // grad_dtype; a gather in the dtype gathered), moves through the
  // same-host data plane without the client copying a byte: the server
  // folds from it and writes gathered pieces into it. Elsewhere (TCP, TLS,
  // gRPC, an fp32 push to a bf16 wire) it is ordinary memory. A GPU
  // trainer may cudaHostRegister(data(), size()) it and copy into and out
  // of it directly. Lifetime: the memory stays mapped until the returned
  // pointer, this Client and every JobClient of it (whose connections hold
  // it) are gone, whichever is last; an async call's buffer stays the
  // caller's to keep unchanged until its Ticket is waited on, as for any
  // buffer. Thread-safe. Errors: INVALID_ARGUMENT (0 bytes), UNAVAILABLE
  // (the kernel refused the memfd or its mapping; with the reason).
  [[nodiscard]] absl::StatusOr<std::shared_ptr<SharedBuffer>> AllocateShared(size_t bytes);

  const ClientOptions& options() const;

  class Impl;

 private:
  explicit Client(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;  // shared with this client's JobClients
};

class JobClient {
 public:
  ~JobClient();

  const v1::JobSpec& spec() const;  // normalized
  const Layout& layout() const;
  // The job's token (ClientOptions::job_token, or the one the server
  // generated): hand it to the nodes that attach. A secret: never log it.
  std::string token() const;

  // The flat element range of tensor `name`. Errors: NOT_FOUND naming it.
  [[nodiscard]] absl::StatusOr<Range> TensorRange(const std::string& name) const;

  // Pushes node `node`'s gradient for flat elements `elems` of step `step`.
  // `data` holds elems.size() elements of `dtype`: either the job's
  // grad_dtype (sent as is) or FP32 (converted to grad_dtype).
  // Errors before sending: INVALID_ARGUMENT (range outside the layout, dtype
  // neither FP32 nor grad_dtype, node out of range).
  // A step runs once every node has pushed every tensor's elements
  // (layout().tensors); the alignment padding between tensors may be pushed
  // or left out, and is ignored. Pushes may come in any number of pieces, in
  // any order, and be repeated.
  [[nodiscard]] Ticket PushAsync(uint64_t step, uint32_t node, Range elems, const void* data,
                                 v1::DType dtype);
  [[nodiscard]] absl::Status Push(uint64_t step, uint32_t node, Range elems, const void* data,
                                  v1::DType dtype);

  // Gradient statistics of `step`, summed over servers in shard order.
  [[nodiscard]] absl::StatusOr<GradStatsResult> GradStats(uint64_t step);

  // What this handle's pushes and gathers moved on the wire so far.
  WireStats wire_stats() const;

  // Whether this handle's pushes from shared buffers (Client::AllocateShared)
  // promise the servers that the buffer stays unchanged until the step the
  // push is for is applied (DataFrameMeta.held): a server on this host may
  // then read the gradient there at that step rather than copy it as it
  // lands. Off by default: turn it on only where nothing writes a pushed
  // buffer before its step is applied (zerostate.torch: synchronous and
  // speculative steps, not a delayed update). Thread-safe.
  void SetPushesHeld(bool held);

  // Applies step `step` on every server (in parallel). `trainer_state`
  // (at most kMaxTrainerStateBytes, opaque) is kept by every server as the
  // state of version step + 1 before any block is stepped, for
  // TrainerState. Errors before sending: INVALID_ARGUMENT (trainer_state
  // too large).
  static constexpr size_t kMaxTrainerStateBytes = 1024;
  [[nodiscard]] absl::Status Step(uint64_t step, float lr, float grad_scale, bool skip,
                                  const std::string& trainer_state = "");

  // Sends step `step`'s parameters ahead of its gradients to every server
  // (a job registered with speculative_step; StepRequest.ahead): lr and the
  // grad_scale its Step will carry if no clipping applies and the gradients
  // are finite. Each server then steps every block as soon as its gradients
  // are in, and the Step commits (or redoes) them: bit-identical to a plain
  // step, the optimizer pass overlapping the pushes. Does not wait for the
  // gradients. Errors: the servers' (FAILED_PRECONDITION for a job without
  // speculative_step).
  [[nodiscard]] absl::Status StepAhead(uint64_t step, float lr, float grad_scale);

  // The trainer_state the Step that made `version` carried, from the first
  // server (in shard order) that keeps it; a server keeps the newest 4.
  // Errors: NOT_FOUND (no server keeps one for `version`), INVALID_ARGUMENT
  // (version 0: no step made it), the servers' errors.
  [[nodiscard]] absl::StatusOr<std::string> TrainerState(uint64_t version);

  // Gathers flat elements `elems` at version >= min_version into `out`,
  // which holds elems.size() elements of `dtype`: FP32 (the wire carries the
  // job's weight_dtype, decoded here; or FP32 masters when weight_dtype is
  // FP32) or the job's weight_dtype (copied as is).
  // Errors before sending: INVALID_ARGUMENT (range, dtype).
  [[nodiscard]] Ticket GatherAsync(uint64_t min_version, Range elems, void* out, v1::DType dtype);
  [[nodiscard]] absl::Status Gather(uint64_t min_version, Range elems, void* out, v1::DType dtype);

  // Gathers the fp32 master weights (not the low-precision copy).
  [[nodiscard]] absl::Status GatherMaster(uint64_t min_version, Range elems, float* out);

  // Streams initial fp32 weights (jobs registered with streamed_init).
  [[nodiscard]] absl::Status InitWeights(Range elems, const float* data);

  // The lowest version over all servers' shards. Errors: ABORTED naming a
  // server that restarted or no longer holds the job; FAILED_PRECONDITION
  // naming each server's version when the shards are more than one step
  // apart (a lost shard registered again), saying what to do. RegisterJob
  // and AttachJob refuse such a job the same way.
  [[nodiscard]] absl::StatusOr<uint64_t> Version();

  // Makes every server write its shard at `version` under `root` (an
  // absolute path every server reaches), while training goes on; returns
  // the checkpoint's directory, <root>/<job_id>/v<version>. The checkpoint
  // is complete when this returns OK. Errors: INVALID_ARGUMENT (root),
  // FAILED_PRECONDITION (a version already stepped past),
  // DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED (disk full), INTERNAL (I/O).
  [[nodiscard]] absl::StatusOr<std::string> Checkpoint(uint64_t version, const std::string& root);

  // Deletes the job on every server; calls waiting on it there end (with
  // UNAUTHENTICATED once retried: the token no longer holds a job there);
  // checkpoints stay. Every server is asked even if one fails. Errors: the
  // first failing server's (a restarted server that lost the job:
  // UNAUTHENTICATED).
  [[nodiscard]] absl::Status Delete();

  // Whether every server still holds the job: asks each (Version),
  // waiting up to `wait` for servers that do not answer. kNone when all
  // hold it; kShardLost when one restarted or no longer holds it;
  // kServerSilent when one did not answer within `wait` (UNAVAILABLE or
  // DEADLINE_EXCEEDED); the account names the server. Changes nothing.
  // Errors: any other answer.
  [[nodiscard]] absl::StatusOr<JobLoss> Loss(absl::Duration wait);

  // After a failed step: Loss, and when the job cannot go on (a shard lost
  // or a server silent) deletes it on every server that answers, so that a
  // call waiting on it there (a gather of a version that will never come)
  // ends at once instead of waiting out its rpc_timeouts. Errors: Loss's
  // (the job is left as it is), or the deletion's from a server that
  // answers. zerostate-worker's rollback and, through zs_job_end_if_lost,
  // zerostate.torch's failed step both end a job this way.
  [[nodiscard]] absl::StatusOr<JobLoss> EndIfLost(absl::Duration wait);

  class Impl;
  explicit JobClient(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace zerostate::client
