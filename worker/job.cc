#include "worker/job.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

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
  return spec;
}

absl::StatusOr<OpenedJob> OpenJob(client::Client* client, const v1::JobSpec& spec,
                                  const Topology& topo, const std::string& scope) {
  OpenedJob opened;
  std::string version;
  if (topo.rank() == 0) {
    auto job = client->RegisterJob(spec);
    if (!job.ok()) return job.status();
    auto v = (*job)->Version();
    if (!v.ok()) return v.status();
    opened.job = *std::move(job);
    version = absl::StrCat(*v);
  }
  // Rank 0 answers with the start version once the job exists everywhere.
  auto values = client->Rendezvous(scope, "registered", topo.rank(), topo.world(), version);
  if (!values.ok()) return values.status();
  if (values->empty() || !absl::SimpleAtoi((*values)[0], &opened.start_version)) {
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
