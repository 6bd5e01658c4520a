// The job a worker trains: its JobSpec, built from the config and the
// model, and how every rank gets a handle to it on the state servers.
// Thread safety: pure function / safe to call from each rank's thread.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "worker/engine.h"
#include "worker/mlp.h"

namespace zerostate::worker {

// The spec of `train`'s job for `model` over `num_nodes` nodes: the model's
// tensors, the optimizer, wire dtypes, block size and init seed.
v1::JobSpec BuildJobSpec(const v1::TrainConfig& train, const Mlp& model, uint32_t num_nodes);

struct OpenedJob {
  std::unique_ptr<client::JobClient> job;
  uint64_t start_version = 0;  // the version every rank starts from
};

// Global rank 0 registers the job (or attaches to an identical one); every
// other rank waits for it at a rendezvous and attaches. All ranks get the
// same start version. Collective over all topo.world() ranks: rank 0 comes
// to the rendezvous even when it cannot register, and every other rank
// then fails with its reason. `scope` namespaces the rendezvous
// (RendezvousScope); `meet` makes it (e.g. a PeerWatch control client,
// which bounds the wait for a rank 0 that never comes; else `client`).
// Errors: rank 0: the client's (e.g. ALREADY_EXISTS for a different spec,
// FAILED_PRECONDITION for shards at different versions); the other ranks:
// ABORTED naming rank 0 and its error, the rendezvous' own errors
// (DEADLINE_EXCEEDED naming rank 0 when it did not come), the client's.
[[nodiscard]] absl::StatusOr<OpenedJob> OpenJob(client::Client* client, const v1::JobSpec& spec,
                                                const Topology& topo, const std::string& scope,
                                                client::Client* meet = nullptr);

}  // namespace zerostate::worker
