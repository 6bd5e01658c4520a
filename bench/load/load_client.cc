// load_client: one trainer process of load_bench. It plays worker
// `local_rank` of node `node` of an already registered job: each step it
// pushes its node's gradient for its 1/local_ranks slice of the layout,
// the job's first worker (node 0, local rank 0) applies the step, and it
// gathers the new weights of its slice. Gradients are TestGradient
// (tests/client/reference_model.h), so load_bench can compute the weights
// every step must produce.
//
// Protocol (report.h): reads the job's token from the first line of stdin
// (not argv: a secret), prints "ready" once connected, starts on "go" from
// stdin, prints its ClientReport when done. Exit status 1 on any error,
// named on stderr.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/load/report.h"
#include "client/client.h"
#include "common/convert.h"
#include "tests/client/reference_model.h"

ABSL_FLAG(std::vector<std::string>, servers, {}, "state servers host:port, in shard order");
ABSL_FLAG(std::string, job, "", "job id (registered by load_bench)");
ABSL_FLAG(int, node, 0, "this process's node");
ABSL_FLAG(int, local_rank, 0, "this process's rank within its node");
ABSL_FLAG(int, local_ranks, 1, "processes per node; each pushes and gathers 1/local_ranks");
ABSL_FLAG(int, steps, 10, "steps to run");
ABSL_FLAG(double, lr, 1e-3, "learning rate of every step");
ABSL_FLAG(int, streams, 2, "ClientOptions::streams_per_server");
ABSL_FLAG(bool, data_plane, true, "ClientOptions::data_plane: push and gather over TCP, not gRPC");

namespace zerostate::bench {
namespace {

namespace v1 = ::zerostate::v1;
using Clock = std::chrono::steady_clock;

int64_t MicrosSince(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
}

absl::Status Run() {
  client::ClientOptions options;
  options.plaintext = true;  // load_bench's servers run with --plaintext on loopback
  if (!std::getline(std::cin, options.job_token)) {
    return absl::CancelledError("load_bench sent no job token");
  }
  options.servers = absl::GetFlag(FLAGS_servers);
  options.channels_per_server = 1;  // one connection per server per process
  options.streams_per_server = absl::GetFlag(FLAGS_streams);
  options.same_host_streams_per_server = 0;  // --streams, whatever the host's cores
  options.data_plane = absl::GetFlag(FLAGS_data_plane);
  absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Connect(options);
  if (!c.ok()) return c.status();
  absl::StatusOr<std::unique_ptr<client::JobClient>> job = (*c)->AttachJob(absl::GetFlag(FLAGS_job));
  if (!job.ok()) return job.status();
  // Version() reaches every server, so the connections are up before "go".
  if (absl::StatusOr<uint64_t> v = (*job)->Version(); !v.ok()) return v.status();

  const uint32_t node = absl::GetFlag(FLAGS_node);
  const int rank = absl::GetFlag(FLAGS_local_rank), ranks = absl::GetFlag(FLAGS_local_ranks);
  const Layout& layout = (*job)->layout();
  const Range slice{layout.used_elems * rank / ranks, layout.used_elems * (rank + 1) / ranks};
  const v1::DType grad_dtype = (*job)->spec().grad_dtype();
  const v1::DType weight_dtype = (*job)->spec().weight_dtype();
  const bool steps_job = node == 0 && rank == 0;
  std::vector<float> grad(slice.size());
  std::vector<char> wire(slice.size() * DTypeSize(grad_dtype));
  std::vector<char> weights(slice.size() * DTypeSize(weight_dtype));

  std::cout << kReady << std::endl;
  std::string go;
  if (!std::getline(std::cin, go) || go != kGo) {
    return absl::CancelledError("load_bench did not say go");
  }
  ClientReport report;
  const int steps = absl::GetFlag(FLAGS_steps);
  const float lr = static_cast<float>(absl::GetFlag(FLAGS_lr));
  for (int s = 0; s < steps; ++s) {
    for (uint64_t i = 0; i < slice.size(); ++i) {
      grad[i] = testing::TestGradient(layout, node, s, slice.begin + i);
    }
    EncodeFloats(grad.data(), grad.size(), grad_dtype, wire.data());
    Clock::time_point t0 = Clock::now();
    if (absl::Status st = (*job)->Push(s, node, slice, wire.data(), grad_dtype); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("push of step ", s, ": ", st.message()));
    }
    report.push_us.push_back(MicrosSince(t0));
    report.pushed_bytes += wire.size();
    if (steps_job) {
      t0 = Clock::now();
      if (absl::Status st = (*job)->Step(s, lr, 1.0f, false); !st.ok()) {
        return absl::Status(st.code(), absl::StrCat("step ", s, ": ", st.message()));
      }
      report.step_us.push_back(MicrosSince(t0));
    }
    t0 = Clock::now();
    if (absl::Status st = (*job)->Gather(s + 1, slice, weights.data(), weight_dtype); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("gather of version ", s + 1, ": ", st.message()));
    }
    report.gather_us.push_back(MicrosSince(t0));
    report.gathered_bytes += weights.size();
  }
  std::cout << report.Format() << std::flush;
  return absl::OkStatus();
}

}  // namespace
}  // namespace zerostate::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::Status s = zerostate::bench::Run();
  if (!s.ok()) {
    std::fprintf(stderr, "load_client %s node %d rank %d: %s\n", absl::GetFlag(FLAGS_job).c_str(),
                 absl::GetFlag(FLAGS_node), absl::GetFlag(FLAGS_local_rank), s.ToString().c_str());
    return 1;
  }
  return 0;
}
