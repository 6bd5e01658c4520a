// Membership of a replicated cluster of state servers: who is alive, who
// serves each (job, shard) as primary, and under which fencing epoch.
// The replication path (primaries, backups, failover) codes
// against this interface; EtcdMembership (server/membership/etcd_membership.h)
// implements it over etcd leases and revisions. No home-made consensus: the
// engine behind it decides.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace zerostate::server {

// Who serves (job, shard) as primary, under which fencing epoch.
struct PrimaryTerm {
  std::string primary;  // the holder's advertised address (Membership::self())
  // The etcd revision at which the holder claimed the shard: a new claim
  // (after the holder's lease is gone) always has a larger epoch, so a
  // message stamped with an older epoch comes from a deposed primary.
  int64_t epoch = 0;
};

// Thread safety: every method may be called from any thread at once.
// Errors: UNAVAILABLE when the engine (etcd) cannot be reached in time,
// naming the endpoint and key; INVALID_ARGUMENT for a bad job or shard.
class Membership {
 public:
  virtual ~Membership() = default;

  // This server's advertised address: what Primary() and Members() name
  // it by. zerostate-server advertises its gRPC port, the address clients
  // list (--advertise_address, default --listen). Constant after
  // construction.
  virtual const std::string& self() const = 0;

  // The live primary of (job, shard). NOT_FOUND when none holds it (never
  // claimed, or its holder's lease expired).
  [[nodiscard]] virtual absl::StatusOr<PrimaryTerm> Primary(const std::string& job, int shard) = 0;

  // Become primary of (job, shard) if no live primary holds it; else return
  // the holder's term (compare `primary` with self() to know which). A
  // server that already holds the shard gets its own term back, unchanged.
  // FAILED_PRECONDITION when this server's lease is not valid (it must not
  // claim what it could not keep).
  [[nodiscard]] virtual absl::StatusOr<PrimaryTerm> Claim(const std::string& job, int shard) = 0;

  // False once this server's lease may have expired: it must stop answering
  // as primary (fencing). It errs on the side of stopping: false as soon as
  // a keepalive has not been confirmed within the lease's TTL minus a
  // margin, so it turns false before the engine can give the shard to
  // another server. Never blocks.
  virtual bool LeaseValid() const = 0;

  // Whether `term` is this server's own claim of (job, shard), still in
  // force: what a primary checks before it acts as one. An implementation
  // whose claims can die with a lease (EtcdMembership) also checks that
  // the claim was made under the lease it holds now; this default only
  // checks the name and LeaseValid(). Never blocks.
  virtual bool Holds(const std::string& job, int shard, const PrimaryTerm& term) const {
    (void)job;
    (void)shard;
    return term.primary == self() && LeaseValid();
  }

  // Gives up this server's claim of (job, shard) (its job was deleted, or
  // it hands the shard off): the claim is removed if, and only if, it is
  // this server's; other members then hear of it through OnPrimaryLost.
  // OK when this server does not hold it. Implementations without a shared
  // engine have nothing to release beyond their own record; this default
  // says so.
  [[nodiscard]] virtual absl::Status Release(const std::string& job, int shard) {
    (void)job;
    (void)shard;
    return absl::UnimplementedError("this membership cannot release a claim");
  }

  // Copies that missed acknowledged steps. The primary of (job, shard)
  // records that the shard's copy on server `copy` (its advertised
  // address) is `behind` (lost as a backup: a step was acknowledged
  // without it) before it acknowledges such a step, and clears it once the
  // copy is caught up. The record outlives the primary, so that at
  // failover a copy in sync takes the shard before one that is behind but
  // alive (Primaries::Serve). Only the holder of `term` writes it:
  // FAILED_PRECONDITION when `term` is not the shard's claim any more.
  // This default records nothing (UNIMPLEMENTED): every copy counts as in
  // sync, as where no engine shares the record.
  [[nodiscard]] virtual absl::Status SetBehind(const std::string& job, int shard,
                                               const PrimaryTerm& term, const std::string& copy,
                                               bool behind) {
    (void)job;
    (void)shard;
    (void)term;
    (void)copy;
    (void)behind;
    return absl::UnimplementedError("this membership records no copy behind");
  }
  // The copies of (job, shard) recorded behind (SetBehind), sorted; this
  // default: none.
  [[nodiscard]] virtual absl::StatusOr<std::vector<std::string>> Behind(const std::string& job,
                                                                        int shard) {
    (void)job;
    (void)shard;
    return std::vector<std::string>{};
  }

  // The address to dial to reach the server named `name` (an address a
  // job's servers list, as self() names this one): its process's own
  // gRPC address where it published one (a replacement that took over the
  // name from another address, zerostate-server --replace), else `name`
  // itself (no live process of that name published one, or this
  // membership keeps no addresses: this default). Errors: UNAVAILABLE
  // (the engine).
  [[nodiscard]] virtual absl::StatusOr<std::string> Resolve(const std::string& name) {
    return name;
  }

  // The live servers' advertised addresses (this one included while its
  // lease holds), sorted.
  [[nodiscard]] virtual absl::StatusOr<std::vector<std::string>> Members() = 0;

  // Registers the callback called (from a membership thread, never under a
  // lock of the caller's) when the primary of a (job, shard) of this
  // cluster is gone: its claim vanished (the holder's lease expired or was
  // revoked). It is called for every such shard but this server's own; the
  // callee ignores the shards it does not back. It should claim or hand off
  // quickly, and may call back into this object. Replaces an earlier
  // callback; an empty function stops the calls.
  virtual void OnPrimaryLost(std::function<void(const std::string& job, int shard)> cb) = 0;
};

}  // namespace zerostate::server
