#include "server/rpc/job_proto.h"

namespace zerostate::server {

v1::JobInfo JobInfoOf(const Job& job, const ShardProgress& progress) {
  const Layout& layout = job.layout();
  v1::JobInfo info;
  info.set_job_id(job.spec().job_id());
  info.set_total_elems(layout.total_elems);
  info.set_block_elems(layout.block_elems);
  info.set_num_blocks(layout.num_blocks());
  info.set_first_block(job.blocks().begin);
  info.set_shard_blocks(job.blocks().size());
  info.set_version(progress.min_version);
  for (const TensorSlot& t : layout.tensors) {
    auto* p = info.add_tensors();
    p->set_name(t.name);
    p->set_offset(t.offset);
    p->set_numel(t.numel);
  }
  info.set_state_bytes(job.state_bytes());
  return info;
}

v1::JobInfo JobInfoOf(const Job& job) { return JobInfoOf(job, job.shard().Progress()); }

void FillJobStatus(const Job& job, v1::JobStatusResponse* out) {
  const ShardProgress progress = job.shard().Progress();
  *out->mutable_info() = JobInfoOf(job, progress);
  *out->mutable_spec() = job.spec();
  out->set_min_version(progress.min_version);
  out->set_max_version(progress.max_version);
  out->set_blocks_waiting(progress.blocks_waiting);
  out->set_blocks_speculated(progress.blocks_speculated);
}

}  // namespace zerostate::server
