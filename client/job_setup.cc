// JobClient::Impl::Register and Attach: bring a job up on every server (or
// find it there), check that each server's shard matches the client's shard
// map, and record each server's incarnation.
#include <algorithm>
#include <atomic>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/job_client_impl.h"

namespace zerostate::client {
namespace {

// FAILED_PRECONDITION when server `shard` holds a different part of the
// job than common/shard_map.h gives for this server list.
absl::Status CheckShard(Client::Impl& client, const Layout& layout, int shard,
                        const v1::JobInfo& info) {
  Range want = ShardBlocks(layout.num_blocks(), client.num_servers(), shard);
  if (info.total_elems() == layout.total_elems && info.block_elems() == layout.block_elems &&
      info.first_block() == want.begin && info.shard_blocks() == want.size()) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "server ", client.server(shard).address(), " holds blocks [", info.first_block(), ", ",
      info.first_block() + info.shard_blocks(), ") of ", info.num_blocks(), " (",
      info.total_elems(), " elements); the client expects blocks [", want.begin, ", ", want.end,
      ") of ", layout.num_blocks(), " (", layout.total_elems,
      " elements): is the server list the same, in the same order?"));
}

}  // namespace

absl::StatusOr<uint64_t> AgreedVersion(Client::Impl& client, const Layout& layout,
                                       const std::string& job_id,
                                       const std::vector<uint64_t>& versions) {
  uint64_t lowest = std::numeric_limits<uint64_t>::max(), highest = 0;
  std::vector<std::string> each;
  for (int shard = 0; shard < client.num_servers(); ++shard) {
    if (ShardBlocks(layout.num_blocks(), client.num_servers(), shard).empty()) continue;
    lowest = std::min(lowest, versions[shard]);
    highest = std::max(highest, versions[shard]);
    each.push_back(absl::StrCat("server ", client.server(shard).address(), " at version ",
                                versions[shard]));
  }
  if (each.empty() || highest - lowest <= 1) return lowest;
  return absl::FailedPreconditionError(absl::StrCat(
      "job ", job_id, ": its shards disagree (", absl::StrJoin(each, ", "),
      "): a server lost its shard and the job was registered again there; nothing can train "
      "on it: restore one checkpoint of the job on every server (RestoreJob, version ", highest,
      " or the newest before it), or delete the job (DeleteJob) and start again"));
}

namespace {

absl::StatusOr<v1::JobStatusResponse> JobStatus(Client::Impl& client, int shard,
                                                const std::string& job_id) {
  v1::JobStatusRequest req;
  req.set_job_id(job_id);
  v1::JobStatusResponse resp;
  absl::Status s =
      client.Unary(Method::kJobStatus, shard, &v1::StateService::Stub::JobStatus, req, &resp);
  if (!s.ok()) return s;
  return resp;
}

std::unique_ptr<JobClient> MakeJobClient(std::shared_ptr<Client::Impl> client, v1::JobSpec spec,
                                         std::vector<uint64_t> incarnations,
                                         const std::vector<uint32_t>& data_ports) {
  return std::make_unique<JobClient>(std::make_unique<JobClient::Impl>(
      std::move(client), std::move(spec), std::move(incarnations), data_ports));
}

// FAILED_PRECONDITION naming the server and the field when `spec` asks
// for the int8 wire and the server's answer to RegisterJob does not list
// it: a server that predates the compressed wire ignores the fields
// (proto3 skips fields it does not know) and would refuse every int8 chunk.
absl::Status CheckWire(Client::Impl& client, int shard, const v1::JobSpec& spec,
                       const v1::RegisterJobResponse& resp) {
  if (spec.gradient_wire() != v1::WIRE_INT8 && spec.weight_wire() != v1::WIRE_INT8) {
    return absl::OkStatus();
  }
  for (int f : resp.wire_formats()) {
    if (f == v1::WIRE_INT8) return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "server ", client.server(shard).address(), " predates the int8 wire (JobSpec.",
      spec.gradient_wire() == v1::WIRE_INT8 ? "gradient_wire" : "weight_wire",
      " WIRE_INT8): upgrade it, or register the job with WIRE_PLAIN; the job was not kept"));
}

// Deletes the job on the servers where `created` says this call made it.
void Unregister(Client::Impl& client, const std::string& job_id,
                const std::vector<char>& created) {
  (void)client.ForEachServer([&](int shard) {
    if (!created[shard]) return absl::OkStatus();
    v1::DeleteJobRequest req;
    req.set_job_id(job_id);
    v1::DeleteJobResponse resp;
    return client.Unary(Method::kDeleteJob, shard, &v1::StateService::Stub::DeleteJob, req,
                        &resp);
  });
}

// Runs fn(shard) on every server. Without a token yet, shard 0 runs first
// alone: it generates the job's token, which fn adopts, so the other
// servers get the same token.
absl::Status ForEachServerWithToken(Client::Impl& client,
                                    absl::FunctionRef<absl::Status(int shard)> fn) {
  if (!client.job_token().Get().empty()) return client.ForEachServer(fn);
  if (absl::Status s = fn(0); !s.ok()) return s;
  return client.ForEachServer([&](int shard) { return shard == 0 ? absl::OkStatus() : fn(shard); });
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobClient>> JobClient::Impl::Register(
    std::shared_ptr<Client::Impl> client, const v1::JobSpec& spec) {
  if (auto s = CheckReplicas(spec, client->num_servers()); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("spec: ", s.message()));
  }
  const Layout layout = LayoutOf(spec);
  std::vector<uint64_t> incarnations(client->num_servers());
  std::vector<uint32_t> data_ports(client->num_servers());
  std::vector<uint64_t> versions(client->num_servers());
  std::vector<char> created(client->num_servers(), 0);
  std::atomic<bool> old_server{false};
  absl::Status s = ForEachServerWithToken(*client, [&](int shard) {
    v1::RegisterJobRequest req;
    *req.mutable_spec() = spec;
    for (const std::string& addr : client->options().servers) req.add_servers(addr);
    req.set_shard_index(shard);
    v1::RegisterJobResponse resp;
    absl::Status st = client->Unary(Method::kRegisterJob, shard,
                                    &v1::StateService::Stub::RegisterJob, req, &resp);
    if (!st.ok()) return st;
    if (!resp.token().empty()) client->job_token().Adopt(resp.token());
    created[shard] = resp.created();
    if (absl::Status wire = CheckWire(*client, shard, spec, resp); !wire.ok()) {
      old_server = true;
      return wire;
    }
    incarnations[shard] = resp.incarnation();
    data_ports[shard] = resp.data_port();
    versions[shard] = resp.info().version();
    return CheckShard(*client, layout, shard, resp.info());
  });
  if (old_server) Unregister(*client, spec.job_id(), created);  // it changed nothing, then
  if (!s.ok()) return s;
  if (auto v = AgreedVersion(*client, layout, spec.job_id(), versions); !v.ok()) return v.status();
  return MakeJobClient(std::move(client), spec, std::move(incarnations), data_ports);
}

absl::StatusOr<std::unique_ptr<JobClient>> JobClient::Impl::Restore(
    std::shared_ptr<Client::Impl> client, const std::string& path, uint32_t num_nodes) {
  std::vector<std::string> job_ids(client->num_servers());
  absl::Status s = ForEachServerWithToken(*client, [&](int shard) {
    v1::RestoreRequest req;
    req.set_path(path);
    for (const std::string& addr : client->options().servers) req.add_servers(addr);
    req.set_shard_index(shard);
    req.set_num_nodes(num_nodes);
    v1::RestoreResponse resp;
    absl::Status st =
        client->Unary(Method::kRestore, shard, &v1::StateService::Stub::Restore, req, &resp);
    if (st.ok() && !resp.token().empty()) client->job_token().Adopt(resp.token());
    job_ids[shard] = resp.info().job_id();
    return st;
  });
  if (!s.ok()) return s;
  return Attach(std::move(client), job_ids[0]);
}

absl::StatusOr<std::unique_ptr<JobClient>> JobClient::Impl::Attach(
    std::shared_ptr<Client::Impl> client, const std::string& job_id) {
  absl::StatusOr<v1::JobStatusResponse> first = JobStatus(*client, 0, job_id);
  if (!first.ok()) return first.status();
  absl::StatusOr<v1::JobSpec> spec = NormalizeJobSpec(first->spec());
  if (!spec.ok()) {
    return absl::InternalError(absl::StrCat("server ", client->server(0).address(),
                                            " returned a bad spec: ", spec.status().message()));
  }
  const Layout layout = LayoutOf(*spec);
  std::vector<uint64_t> incarnations(client->num_servers());
  std::vector<uint32_t> data_ports(client->num_servers());
  std::vector<uint64_t> versions(client->num_servers());
  absl::Status s = client->ForEachServer([&](int shard) {
    absl::StatusOr<v1::JobStatusResponse> st =
        shard == 0 ? first : JobStatus(*client, shard, job_id);
    if (!st.ok()) return st.status();
    incarnations[shard] = st->incarnation();
    data_ports[shard] = st->data_port();
    versions[shard] = st->min_version();
    return CheckShard(*client, layout, shard, st->info());
  });
  if (!s.ok()) return s;
  if (auto v = AgreedVersion(*client, layout, job_id, versions); !v.ok()) return v.status();
  return MakeJobClient(std::move(client), *std::move(spec), std::move(incarnations), data_ports);
}

}  // namespace zerostate::client
