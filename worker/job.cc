#include "worker/job.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace zerostate::worker {

v1::JobSpec BuildJobSpec(const v1::TrainConfig& train, const Mlp& model, uint32_t num_nodes) {
  v1::JobSpec spec;
  spec.set_job_id(train.job_id());
  for (auto& t : model.Tensors()) *spec.add_tensors() = std::move(t);
  *spec.mutable_optimizer() = train.optimizer();
  spec.set_num_nodes(num_nodes);
  spec.set_grad_dtype(train.grad_dtype());
  spec.set_weight_dtype(train.weight_dtype());
  spec.set_block_elems(train.block_elems());
  spec.set_seed(train.seed());
  spec.set_speculative_step(train.speculative_step());
  spec.set_replicas(train.replicas());
  spec.set_moment_format(train.moment_format());
  spec.set_gradient_wire(train.gradient_wire());
  spec.set_weight_wire(train.weight_wire());
  return spec;
}

absl::StatusOr<OpenedJob> OpenJob(client::Client* client, const v1::JobSpec& spec,
                                  const Topology& topo, const std::string& scope,
                                  client::Client* meet) {
  constexpr char kFailed[] = "failed: ";
  OpenedJob opened;
  std::string version;
  absl::Status registered;
  if (topo.rank() == 0) {
    auto job = client->RegisterJob(spec);
    auto v = job.ok() ? (*job)->Version() : job.status();
    if (v.ok()) {
      opened.job = *std::move(job);
      version = absl::StrCat(*v);
    } else {
      // The other ranks wait for the answer: tell them why there is none.
      registered = v.status();
      version = absl::StrCat(kFailed, registered.ToString());
    }
  }
  // Rank 0 answers with the start version once the job exists everywhere.
  auto values = (meet != nullptr ? meet : client)
                    ->Rendezvous(scope, "registered", topo.rank(), topo.world(), version);
  if (!registered.ok()) return registered;
  if (!values.ok()) {
    return absl::Status(values.status().code(),
                        absl::StrCat("waiting for rank 0 (node 0, local rank 0) to register job ",
                                     spec.job_id(), ": ", values.status().message()));
  }
  const std::string answer = values->empty() ? "" : (*values)[0];
  if (absl::StartsWith(answer, kFailed)) {
    return absl::AbortedError(absl::StrCat("rank 0 (node 0, local rank 0) could not register job ",
                                           spec.job_id(), ": ",
                                           absl::StripPrefix(answer, kFailed)));
  }
  if (!absl::SimpleAtoi(answer, &opened.start_version)) {
    return absl::InternalError("rendezvous 'registered': rank 0 sent no start version");
  }
  if (topo.rank() != 0) {
    auto job = client->AttachJob(spec.job_id());
    if (!job.ok()) return job.status();
    opened.job = *std::move(job);
  }
  return opened;
}

}  // namespace zerostate::worker
