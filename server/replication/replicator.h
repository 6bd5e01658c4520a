// The primary's side of replicated shards (docs/reliability.md,
// "Replicated shards"): what every shard served here as primary shares
// (peers' stubs, lost copies, the metrics); each shard's own way to its
// backups is a ShardReplicator (shard_replicator.h), which streams each
// block's summed gradient to the backups as the block completes and sends
// the step when it is decided (ReplicaService.ApplyStep, on their gRPC
// port, with the job's token and this server's TLS identity). The sums of
// a streamed step travel on the backups' TCP data planes (REPLICA_SUM
// frames, proto/zerostate/v1/data_plane.proto), on connections this
// object pools per backup (client/data_conn.h: the clients' connection
// and handshake code, under the same TLS identity); a backup's data port
// is learned from its first ApplyStep answer.
//
// A copy that cannot be reached (UNAVAILABLE), no longer holds the job
// (it restarted empty: UNAUTHENTICATED, as any call of a job a server does
// not hold, or NOT_FOUND) or needs a catch-up (FAILED_PRECONDITION: it is
// at another version, or was deposed) is lost: the step is acknowledged
// without it, and the shard counts as under-replicated until a catch-up
// brings a copy back.
//
// Every message this server sends as a shard's primary (ApplyStep, Seed,
// REPLICA_SUM) carries its term (v1::SenderTerm: its address and its
// claim's epoch, Primaries::Serving, or the last term it served the shard
// under once that lapsed); each backup remembers the newest term it
// accepted for the shard (accepted_terms.h) and refuses an older one.
//
// Fencing: a copy that answers ABORTED serves the shard as primary now (it
// claimed it after this server's claim lapsed, or was let go, without this
// server noticing yet), or accepted a newer primary's term (with k >= 2,
// the new primary's other backups). Then this server is no longer the
// primary: the step is not acknowledged (UNAVAILABLE "not primary" naming
// the shard and every copy that refused, with its reason), this server is
// fenced for the shard (Primaries::Fence, as a lapsed lease fences it)
// and its copy deposed (JobStep::MarkDeposed, until the new primary
// catches it up), so the clients move to the new primary and run the
// step there. Any other answer fails the primary's Step (its retry sends
// again).
//
// Catch-up, in the background (catch_up.h): at each later step the
// primary checks whether a lost copy's server accepts a connection again
// (a new channel, up to Options::reconnect_timeout); when it does, the
// primary reads its own shard's state before its optimizer pass moves it
// (every block at the step's version), and a thread of the catch-up's own
// sends it (ReplicaService.Seed, which registers the job there if the
// server restarted empty), then the steps decided meanwhile, in order,
// from a backlog bounded by Options::catchup_backlog_bytes. The steps go
// on and are acknowledged without the copy, which counts as lost until a
// step decided once its backlog is short (or no longer shrinks) reaches it
// as a live copy's, after the backlog, and is acknowledged. A failed catch-up, or one whose backlog would exceed
// its bound, is dropped (the copy still lost; a later step starts
// another) and never fails a Step, unless the copy answered ABORTED
// (fencing, above), which the next step's answer reports.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/data_conn.h"
#include "grpcpp/security/credentials.h"
#include "server/core/job.h"
#include "server/core/metrics.h"
#include "server/core/primaries.h"
#include "server/membership/membership.h"
#include "server/replication/accepted_terms.h"
#include "server/replication/kept_sums.h"
#include "server/core/tls_files.h"
#include "zerostate/v1/replica.grpc.pb.h"

namespace zerostate::server {

// Credentials for calls to peer servers: none under --plaintext, else TLS
// trusting `peer_ca_file` (the server's --peer_tls_ca; empty: its
// --tls_client_ca; neither: the system's roots) and presenting the
// server's own certificate and key. Errors: INVALID_ARGUMENT naming the
// flag whose file cannot be read.
[[nodiscard]] absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> PeerCredentialsFor(
    const TlsOptions& tls, const std::string& peer_ca_file);

// The same identity and trust for connections to peers' data planes: null
// under --plaintext, else an OpenSSL client context (records handed to the
// kernel when `kernel`). Errors: those of PeerCredentialsFor.
[[nodiscard]] absl::StatusOr<std::shared_ptr<SSL_CTX>> PeerDataTlsFor(
    const TlsOptions& tls, const std::string& peer_ca_file, bool kernel);

// Lets one thread cancel the gRPC call another makes (a catch-up dropped
// while its Seed or a backlog step travels). Thread-safe.
class CallCanceller {
 public:
  // `ctx` is the call in progress until End; cancelled at once when
  // Cancel came first.
  void Begin(grpc::ClientContext& ctx);
  void End();
  // Cancels the call in progress and every later one.
  void Cancel();

 private:
  absl::Mutex mu_;
  grpc::ClientContext* call_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

class Replicator {
 public:
  struct Options {
    std::shared_ptr<grpc::ChannelCredentials> credentials;
    absl::Duration timeout = absl::Seconds(60);  // one ApplyStep or Seed call
    // How long a lost copy's server may take to accept a connection before
    // this step gives up catching it up (refused connections fail at once).
    absl::Duration reconnect_timeout = absl::Seconds(1);
    // zerostate_under_replicated_blocks, _catchup_bytes_total, _catchup_backlog_bytes
    ServerMetrics* metrics = nullptr;
    // Data plane connections a streamed step's sums travel on to each
    // backup, each with a thread of its own.
    int lanes = 4;
    // Fenced for a shard whose backup answers that it is the primary now
    // (Primaries::Fence); null: none (tests of the replicator alone).
    Primaries* primaries = nullptr;
    // TLS of the lanes' connections (PeerDataTlsFor); null: plaintext.
    std::shared_ptr<SSL_CTX> data_tls;
    // The sums this server keeps as a backup (REPLICA_SUM frames), emptied
    // of a deleted job's by Forget; null: none.
    KeptSums* kept_sums = nullptr;
    // The primaries' terms this server accepted as a backup, emptied of a
    // deleted job's by Forget; null: none.
    AcceptedTerms* accepted_terms = nullptr;
    // Bytes of decided steps (requests and sums) one catch-up may hold for
    // its copy while the copy's seed and earlier steps travel
    // (--catchup_backlog_bytes); a step that would exceed it drops the
    // catch-up. At least one step's: a smaller bound never completes one.
    uint64_t catchup_backlog_bytes = uint64_t{4} << 30;
    // Where a peer named in a job's servers is dialled (Membership::Resolve:
    // a replacement's new address); null: at its name.
    Membership* names = nullptr;
  };
  explicit Replicator(Options options) : options_(std::move(options)) {}

  // The StepReplicator of `job`, a copy of shard job.shard_index() that
  // this server (job.servers()[self]) serves as primary; its calls carry
  // `token`. Null when the job has no backups. `job` must outlive it (its
  // JobStep keeps it: JobStep::ReplicatorOrMake), and so must this object.
  std::unique_ptr<StepReplicator> For(Job& job, uint32_t self, std::string token);

  // Blocks of shards served here as primary that have lost a copy.
  uint64_t under_replicated_blocks() const;

  // Forgets the job's lost copies, the sums its primaries sent ahead here
  // and their terms (deleted).
  void Forget(const std::string& job);

  // Stub of peer `address` (a server's name, as a job lists it), made at
  // first use on a channel to where it is dialled (Dial).
  std::shared_ptr<v1::ReplicaService::Stub> Peer(const std::string& address);
  int lanes() const { return options_.lanes; }

  // A connection to the data plane of peer `address` (gRPC address) for a
  // step's sums: an idle one, or a new one. Errors: NOT_FOUND while the
  // peer's data port is unknown (no ApplyStep answered yet since it was
  // reached, or it has no data plane); those of DataConnPool::Acquire.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<client::DataConn>> Lane(const std::string& address);
  // Gives back a lane at a frame boundary, for the next step.
  void Release(const std::string& address, std::unique_ptr<client::DataConn> conn);
  uint64_t catchup_backlog_bytes() const { return options_.catchup_backlog_bytes; }

 private:
  friend class ShardReplicator;
  friend class CatchUp;
  // One backup's ApplyStep of `payload`: whole (transfer 0), or only its
  // request, the sums having gone ahead under `transfer` (SendSum).
  // `cancel` (may be null) can cancel the call.
  [[nodiscard]] absl::Status Send(const std::string& address, const std::string& token,
                                  uint32_t shard, const std::string& job_id,
                                  const StepReplicator::Payload& payload, uint64_t transfer = 0,
                                  CallCanceller* cancel = nullptr);
  // One block's sum on a lane: a REPLICA_SUM frame, then its answer.
  // Errors: the backup's (REPLICA_SUM_ACK's code and message), those of
  // the connection (the lane is then not to be released).
  [[nodiscard]] absl::Status SendSum(client::DataConn& lane, const std::string& token,
                                     const v1::ReplicaSum& sum, std::string_view bytes) const;
  // SendSum in two halves, so that one lane's sum travels to several
  // backups at once: the frame, then (after the frames to the others) its
  // answer. Errors as SendSum's.
  [[nodiscard]] absl::Status SendSumFrame(client::DataConn& lane, const std::string& token,
                                          const v1::ReplicaSum& sum, std::string_view bytes) const;
  [[nodiscard]] absl::Status RecvSumAck(client::DataConn& lane) const;
  // A call's deadline (Options::timeout) and job token.
  void PrepareCall(grpc::ClientContext& ctx, const std::string& token) const;
  // Whether `address` accepts a connection now, on a new channel to where
  // it is dialled now (Dial: a replacement's new address is found here),
  // within reconnect_timeout; if so Peer(address) uses that channel from
  // now on.
  bool Reconnect(const std::string& address);
  // Where peer `name` is dialled: Options::names' Resolve, `name` itself
  // without one or when it cannot answer (etcd out: a later Reconnect
  // asks again). Calls etcd: never under mu_.
  std::string Dial(const std::string& name) const ABSL_LOCKS_EXCLUDED(mu_);
  // One lost copy's Seed: `first` (job, shard, registration, version;
  // stamped here with the term), then `blocks`; `cancel` (may be null)
  // can cancel it.
  [[nodiscard]] absl::Status Seed(const std::string& address, const std::string& token,
                                  v1::SeedPart first,
                                  const std::vector<v1::ShardBlock>& blocks,
                                  CallCanceller* cancel = nullptr);
  // Stamps `out` with this server's term of (job, shard): the one it
  // serves the shard under now (Primaries::Serving), else the last one it
  // did (a deposed or lapsed primary's messages still in flight carry it,
  // and backups that heard of a newer primary refuse them); left unset
  // when it never served the shard (no Options::primaries: tests of the
  // replicator alone).
  void StampTerm(const std::string& job, uint32_t shard, v1::SenderTerm* out)
      ABSL_LOCKS_EXCLUDED(mu_);
  using CopyKey = std::tuple<std::string, uint32_t, uint32_t>;  // job, shard, server
  bool IsLost(const CopyKey& key) const;
  void MarkLost(const CopyKey& key, uint64_t blocks);
  // The copy (on `address`) caught up with `bytes` of state: live again,
  // and in sync in the membership (best effort: a record left behind only
  // lets another copy in sync claim the shard first).
  void Revive(const CopyKey& key, const std::string& address, uint64_t bytes);
  // Records lost copy `key` (on `address`) behind in the membership
  // (Primaries::SetBehind), once: before a step is acknowledged without it,
  // so that at failover a copy in sync takes the shard first. Errors:
  // SetBehind's (then the step must not be acknowledged; the next one
  // tries again).
  [[nodiscard]] absl::Status RecordBehind(const CopyKey& key, const std::string& address)
      ABSL_LOCKS_EXCLUDED(mu_);
  // (job, shard) has a newer primary (a backup answered ABORTED): no longer
  // served here (Primaries::Fence), so its lost copies are forgotten.
  void Depose(const std::string& job, uint32_t shard);
  // The catch-ups' backlogs grew (or shrank, negative) by `bytes`.
  void AddBacklogBytes(int64_t bytes);
  void PublishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<v1::ReplicaService::Stub>> peers_
      ABSL_GUARDED_BY(mu_);
  // Peer name -> the address its stub dials (Dial), whose host its data
  // plane is on; a peer not in it is dialled at its name.
  absl::flat_hash_map<std::string, std::string> dialled_ ABSL_GUARDED_BY(mu_);
  // Peer gRPC address -> its data plane's connections (once its port is known).
  absl::flat_hash_map<std::string, std::shared_ptr<client::DataConnPool>> lanes_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<CopyKey> lost_ ABSL_GUARDED_BY(mu_);
  // Lost copies recorded behind in the membership (RecordBehind).
  absl::flat_hash_set<CopyKey> recorded_behind_ ABSL_GUARDED_BY(mu_);
  // (job, shard) -> its blocks, for shards that lost a copy.
  absl::flat_hash_map<std::pair<std::string, uint32_t>, uint64_t> under_ ABSL_GUARDED_BY(mu_);
  uint64_t backlog_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // every catch-up's backlog
  // (job, shard) -> the last term this server served it under (StampTerm).
  absl::flat_hash_map<std::pair<std::string, uint32_t>, PrimaryTerm> terms_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zerostate::server
