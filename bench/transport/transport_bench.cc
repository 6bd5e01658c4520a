// transport_bench: push and gather throughput through the client library
// and real zerostate-server processes, against raw TCP between two
// processes of this machine, measured in the same run.
//
// It times (a) raw TCP over loopback (raw_tcp.h) with 1 connection and with
// as many connections as the client opens to S servers (S x --channels
// gRPC channels; S x --streams data plane connections), then (b) for S in
// --servers (default 1,2,4), each plane in --planes (grpc: push and gather
// over gRPC; tcp: over the servers' TCP data plane; shm: the same-host
// plane, payloads in shared memory) and wire dtypes fp32
// and bf16, a push of one step's gradient and a gather of the stepped
// weights of a --tensor_mib tensor (one node, data already in the wire
// dtype, as a GPU trainer holds it). A figure is the best of --reps. It
// prints GB/s of wire payload, the CPU seconds per GB of the client and of
// the servers, how busy the host's cores were (every repetition counted),
// and the ratio to raw TCP with the same number of connections (the target's
// limit: 1 MiB buffers reused, in cache). It also measures raw TCP from and
// into --tensor_mib buffers (raw_tcp_tensor: the memory traffic any
// transfer of a tensor of that size has), and prints each figure's ratio
// to that too ("tensor ratio"). --json prints one object per figure:
// {"figure":..., "value":..., "unit":..., "limit":..., "ratio":...,
//  "tensor_limit":..., "tensor_ratio":...} (the last two where measured).
// With both tcp and shm measured, "push.<dtype>.servers=S.shm_vs_tcp" (and
// gather) is the shm figure with the TCP plane's as its limit: its ratio is
// shm / TCP in the same run. The shm_shared plane is shm with the
// gradient and the gathered weights in shared buffers
// (Client::AllocateShared: the client copies nothing); with shm measured
// too, "...shm_shared_vs_shm" is its figure with shm's as the limit.
// --tls_dir=DIR also measures every figure with the servers under TLS
// (DIR/server.pem, DIR/server.key for 127.0.0.1, DIR/ca.pem its CA; with
// DIR/client.pem and DIR/client.key, mutual TLS: the servers require a
// client certificate; docs/operations.md, "Security"), in the same run as
// plaintext: "...tls" with the data plane's records in the kernel (kTLS)
// where it offers it, "...tls_user" with OpenSSL's userspace records on
// both ends (--data_ktls=false; left out where the kernel has no kTLS,
// since "...tls" is then userspace records already). Those figures carry "plain" (the same
// figure in plaintext) and "plain_ratio", and "records" (how the data
// plane's TLS records were done, from the first server's log).
// Other work on the machine lowers every figure.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/marshalling.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/transport/cpu_usage.h"
#include "bench/transport/raw_tcp.h"
#include "client/client.h"
#include "client/shared_buffer.h"
#include "common/data_tls.h"
#include "tests/testing/server_process.h"

ABSL_FLAG(int, tensor_mib, 256, "tensor size in MiB of fp32 (the wire carries less for bf16)");
ABSL_FLAG(std::string, servers, "1,2,4", "server counts to measure");
ABSL_FLAG(int, reps, 3, "timed repetitions per figure; the best counts");
ABSL_FLAG(int, channels, 2, "ClientOptions::channels_per_server");
ABSL_FLAG(int, streams, 4, "ClientOptions::streams_per_server");
ABSL_FLAG(int, userspace_tls_streams, zerostate::client::ClientOptions{}.userspace_tls_streams_per_server,
          "ClientOptions::userspace_tls_streams_per_server: under TLS without kTLS, one "
          "stream per core over all servers, at most this many per server (0: --streams)");
ABSL_FLAG(int, connections, 0,
          "TCP plane: connections in all, spread over the servers (--streams = connections / "
          "servers, at least 1); 0: --streams per server");
ABSL_FLAG(int, chunk_kib, 1024, "ClientOptions::chunk_bytes in KiB");
ABSL_FLAG(int, window_mib, 0, "grpc.http2.lookahead_bytes in MiB (0: the library's default)");
ABSL_FLAG(std::vector<std::string>, channel_args, {},
          "extra integer channel arguments NAME=VALUE, comma-separated, applied last");
ABSL_FLAG(int, server_threads, 2, "zerostate-server --threads");
ABSL_FLAG(std::string, planes, "grpc,tcp,shm",
          "data paths to measure: grpc, tcp (the TCP data plane), shm (the same-host plane), "
          "shm_shared (the same-host plane from and into shared buffers)");
ABSL_FLAG(bool, json, false, "print one JSON object per figure");
ABSL_FLAG(std::string, server_binary, ZEROSTATE_SERVER_PATH, "the zerostate-server to start");
ABSL_FLAG(std::string, tls_dir, "",
          "also measure under TLS with DIR/{ca,server}.pem and DIR/server.key (mutual TLS with "
          "DIR/client.{pem,key} when present), against plaintext in the same run");

namespace zerostate::bench {
namespace {

namespace v1 = ::zerostate::v1;

// A figure: the best repetition's rate, and what every repetition moved
// and spent in all.
struct Figure {
  double bytes_per_s = 0;
  double bytes = 0;
  double seconds = 0;
  double client_cpu_s = 0;
  double server_cpu_s = 0;
  double busy_core_s = 0;  // the host's busy fraction times seconds
  bool raw = false;        // raw TCP: client_cpu_s is sender and receiver

  double PerGb(double cpu_s) const { return cpu_s / (bytes / 1e9); }
  double HostBusy() const { return busy_core_s / seconds; }
};

double CpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Times `op` moving `bytes` with the servers `servers`; adds it to `f`.
template <class Op>
absl::Status TimeOp(uint64_t bytes, const std::vector<pid_t>& servers, Figure* f, Op op) {
  const CpuSample host0 = SampleCpu(servers);
  const double cpu0 = CpuSeconds();
  auto t0 = std::chrono::steady_clock::now();
  absl::Status s = op();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = CpuSeconds() - cpu0;
  const CpuSample host1 = SampleCpu(servers);
  if (!s.ok()) return s;
  f->bytes_per_s = std::max(f->bytes_per_s, bytes / secs);
  f->bytes += bytes;
  f->seconds += secs;
  f->client_cpu_s += cpu;
  f->server_cpu_s += ProcessSeconds(host0, host1);
  f->busy_core_s += BusyFraction(host0, host1) * secs;
  return s;
}

// A TLS figure's plaintext counterpart (plain_bytes_per_s > 0) and how
// its data plane records were done.
struct Versus {
  double plain_bytes_per_s = 0;
  std::string records;
};

// Prints a figure against `limit`, against `tensor_limit` unless it is 0,
// and against plaintext where `versus` has it.
void Print(const std::string& figure, const Figure& f, double limit, double tensor_limit = 0,
           const Versus& versus = {}) {
  const double plain = versus.plain_bytes_per_s;
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("{\"figure\":\"%s\",\"value\":%.6g,\"unit\":\"GB/s\",\"limit\":%.6g,\"ratio\":%.4f",
                figure.c_str(), f.bytes_per_s / 1e9, limit / 1e9, f.bytes_per_s / limit);
    if (plain > 0) {
      std::printf(",\"plain\":%.6g,\"plain_ratio\":%.4f,\"records\":\"%s\"", plain / 1e9,
                  f.bytes_per_s / plain, versus.records.c_str());
    }
    if (tensor_limit > 0) {
      std::printf(",\"tensor_limit\":%.6g,\"tensor_ratio\":%.4f", tensor_limit / 1e9,
                  f.bytes_per_s / tensor_limit);
    }
    if (f.raw) {
      std::printf(",\"cpu_s_per_gb\":%.4f,\"host_busy\":%.3f", f.PerGb(f.client_cpu_s), f.HostBusy());
    } else if (f.bytes > 0) {
      std::printf(",\"client_cpu_s_per_gb\":%.4f,\"server_cpu_s_per_gb\":%.4f,\"host_busy\":%.3f",
                  f.PerGb(f.client_cpu_s), f.PerGb(f.server_cpu_s), f.HostBusy());
    }
    std::printf("}\n");
  } else {
    std::printf("%-28s %7.3f GB/s  limit %7.3f GB/s  ratio %.3f", figure.c_str(),
                f.bytes_per_s / 1e9, limit / 1e9, f.bytes_per_s / limit);
    if (tensor_limit > 0) std::printf("  tensor ratio %.3f", f.bytes_per_s / tensor_limit);
    if (plain > 0) std::printf("  vs plaintext %.3f", f.bytes_per_s / plain);
    if (f.raw) {
      std::printf("  CPU s/GB %.2f (both ends)  host busy %.0f%%", f.PerGb(f.client_cpu_s),
                  100 * f.HostBusy());
    } else if (f.bytes > 0) {
      std::printf("  CPU s/GB client %.2f servers %.2f  host busy %.0f%%", f.PerGb(f.client_cpu_s),
                  f.PerGb(f.server_cpu_s), 100 * f.HostBusy());
    }
    if (plain > 0) std::printf("  [%s]", versus.records.c_str());
    std::printf("\n");
  }
  std::fflush(stdout);
}

// Adds a raw TCP repetition that moved `bytes` to `f` (its CPU as the
// client's: sender and receiver together).
void AddRaw(uint64_t bytes, const RawTcpResult& r, Figure* f) {
  const double secs = bytes / r.bytes_per_s;
  f->bytes_per_s = std::max(f->bytes_per_s, r.bytes_per_s);
  f->bytes += bytes;
  f->seconds += secs;
  f->client_cpu_s += r.cpu_s;
  f->busy_core_s += r.busy_fraction * secs;
  f->raw = true;
}

// Raw TCP throughput by connection count: reusing cached buffers (the
// limit) and from and into tensor-sized ones.
struct RawTcp {
  std::map<int, double> cached;
  std::map<int, double> tensor;
};

v1::JobSpec BenchSpec(const std::string& id, uint64_t elems, v1::DType dtype) {
  v1::JobSpec spec;
  spec.set_job_id(id);
  auto* t = spec.add_tensors();
  t->set_name("w");
  t->add_shape(static_cast<int64_t>(elems));
  spec.mutable_optimizer()->set_kind(v1::OPTIMIZER_SGD_MOMENTUM);
  spec.set_num_nodes(1);
  spec.set_grad_dtype(dtype);
  spec.set_weight_dtype(dtype);
  return spec;
}

// Whether `plane` is one of the data plane's (else gRPC), and the same-host one.
bool OnDataPlane(const std::string& plane) { return plane != "grpc"; }
bool SameHost(const std::string& plane) { return plane == "shm" || plane == "shm_shared"; }

// Data plane connections per server with `servers` servers.
int StreamsPerServer(int servers) {
  const int all = absl::GetFlag(FLAGS_connections);
  return all > 0 ? std::max(1, all / servers) : absl::GetFlag(FLAGS_streams);
}

// Connections the client opens to each of `servers` servers on `plane`.
int ConnectionsPerServer(const std::string& plane, int servers) {
  return OnDataPlane(plane) ? StreamsPerServer(servers) : absl::GetFlag(FLAGS_channels);
}

std::vector<std::string> Planes() {
  return absl::StrSplit(absl::GetFlag(FLAGS_planes), ',', absl::SkipEmpty());
}

// How client and servers talk: plaintext, or TLS with the data plane's
// records in the kernel where it can (ktls) or in OpenSSL.
struct Security {
  std::string suffix;  // of the figures' names: "", ".tls", ".tls_user"
  bool tls = false;
  bool ktls = true;
};

// Where this kernel offers no kTLS, ".tls" already is userspace records:
// ".tls_user" would measure the same again, so it is left out.
std::vector<Security> Securities() {
  if (absl::GetFlag(FLAGS_tls_dir).empty()) return {Security{}};
  if (!KernelTlsAvailable()) {
    std::fprintf(stderr, "no kTLS in this kernel: the .tls figures are userspace records\n");
    return {Security{}, Security{".tls", true, true}};
  }
  return {Security{}, Security{".tls", true, true}, Security{".tls_user", true, false}};
}

// Mutual TLS: the directory holds a client certificate.
bool MutualTls() {
  return std::filesystem::exists(absl::GetFlag(FLAGS_tls_dir) + "/client.pem");
}

client::ClientOptions BenchClientOptions(const std::vector<std::string>& servers,
                                         const std::string& plane, const Security& security) {
  client::ClientOptions o;
  o.servers = servers;
  o.data_plane = OnDataPlane(plane);
  o.data_shm = SameHost(plane);
  const std::string tls = absl::GetFlag(FLAGS_tls_dir);
  o.plaintext = !security.tls;
  o.data_ktls = security.ktls;
  if (security.tls) {
    o.tls_ca_file = tls + "/ca.pem";
    if (MutualTls()) {
      o.tls_cert_file = tls + "/client.pem";
      o.tls_key_file = tls + "/client.key";
    }
  }
  o.channels_per_server = absl::GetFlag(FLAGS_channels);
  o.streams_per_server = StreamsPerServer(static_cast<int>(servers.size()));
  o.userspace_tls_streams_per_server = absl::GetFlag(FLAGS_userspace_tls_streams);
  o.same_host_streams_per_server = 0;  // the planes compared at --streams each
  o.chunk_bytes = size_t{1024} * absl::GetFlag(FLAGS_chunk_kib);
  o.max_bytes_in_flight = std::max<size_t>(o.max_bytes_in_flight, 4 * o.chunk_bytes);
  if (absl::GetFlag(FLAGS_window_mib) > 0) {
    o.channel_args.push_back({"grpc.http2.lookahead_bytes", absl::GetFlag(FLAGS_window_mib) << 20});
  }
  for (const std::string& arg : absl::GetFlag(FLAGS_channel_args)) {
    std::pair<std::string, std::string> kv = absl::StrSplit(arg, absl::MaxSplits('=', 1));
    int value = 0;
    if (absl::SimpleAtoi(kv.second, &value)) o.channel_args.push_back({kv.first, value});
  }
  return o;
}

// `bytes` of zeroed memory for a payload: a shared buffer of `c` on the
// shm_shared plane, else ordinary memory.
class Payload {
 public:
  static absl::StatusOr<Payload> Make(client::Client& c, const std::string& plane, size_t bytes) {
    Payload p;
    if (plane != "shm_shared") {
      p.own_.assign(bytes, 0);
      return p;
    }
    absl::StatusOr<std::shared_ptr<client::SharedBuffer>> shared = c.AllocateShared(bytes);
    if (!shared.ok()) return shared.status();
    p.shared_ = *std::move(shared);
    return p;
  }
  char* data() { return shared_ ? reinterpret_cast<char*>(shared_->data()) : own_.data(); }

 private:
  std::vector<char> own_;
  std::shared_ptr<client::SharedBuffer> shared_;
};

// Push and gather figures for one job on a running cluster.
absl::Status MeasureJob(client::Client& c, const std::vector<pid_t>& servers,
                        const std::string& plane, v1::DType dtype, Figure* push, Figure* gather) {
  const uint64_t elems = (static_cast<uint64_t>(absl::GetFlag(FLAGS_tensor_mib)) << 20) / 4;
  auto job = c.RegisterJob(
      BenchSpec(std::string("bench-") + DTypeName(dtype) + "-" + plane, elems, dtype));
  if (!job.ok()) return job.status();
  const Range all{0, (*job)->layout().used_elems};
  const uint64_t bytes = all.size() * DTypeSize(dtype);
  // Zero gradients: the weights stay put.
  absl::StatusOr<Payload> grad = Payload::Make(c, plane, bytes);
  absl::StatusOr<Payload> out = grad.ok() ? Payload::Make(c, plane, bytes) : grad;
  if (!out.ok()) return out.status();
  // shm_shared: each connection has the server map a buffer the first
  // time it uses it, once for its life; an untimed round first measures
  // the steady state a trainer sees.
  const int warmup = plane == "shm_shared" ? 1 : 0;
  Figure untimed;
  for (int r = 0; r < warmup + absl::GetFlag(FLAGS_reps); ++r) {
    Figure* p = r < warmup ? &untimed : push;
    Figure* g = r < warmup ? &untimed : gather;
    absl::Status s =
        TimeOp(bytes, servers, p, [&] { return (*job)->Push(r, 0, all, grad->data(), dtype); });
    if (s.ok()) s = (*job)->Step(r, 0.0f, 1.0f, false);
    if (s.ok()) {
      s = TimeOp(bytes, servers, g, [&] { return (*job)->Gather(r + 1, all, out->data(), dtype); });
    }
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// How the first server's data plane did its TLS records ("" if unknown):
// from its log line "data plane TLS: first connection: ...".
std::string RecordsFromLog(const std::string& log) {
  std::ifstream in(log);
  const std::string marker = "first connection: ";
  for (std::string line; std::getline(in, line);) {
    size_t at = line.find(marker);
    if (at != std::string::npos) return line.substr(at + marker.size());
  }
  return "";
}

// Plaintext rates by figure name without the security suffix.
using PlainRates = std::map<std::string, double>;

absl::Status MeasureServers(int servers, const RawTcp& tcp, const Security& security,
                            PlainRates* plain) {
  testing::ServerProcessOptions so;
  so.binary = absl::GetFlag(FLAGS_server_binary);
  so.args = {"--metrics_listen=", "--threads=" + std::to_string(absl::GetFlag(FLAGS_server_threads))};
  const std::string log = absl::StrCat("/tmp/transport_bench.", getpid(), ".servers.log");
  if (security.tls) {
    const std::string tls = absl::GetFlag(FLAGS_tls_dir);
    so.plaintext = false;
    so.args.push_back("--tls_cert=" + tls + "/server.pem");
    so.args.push_back("--tls_key=" + tls + "/server.key");
    if (MutualTls()) so.args.push_back("--tls_client_ca=" + tls + "/ca.pem");
    so.args.push_back(absl::StrCat("--data_ktls=", security.ktls ? "true" : "false"));
    std::remove(log.c_str());
    so.stderr_path = log;
  }
  auto cluster = testing::ServerCluster::Start(servers, so);
  if (!cluster.ok()) return cluster.status();
  std::vector<pid_t> pids;
  for (int i = 0; i < servers; ++i) pids.push_back((*cluster)->server(i).pid());
  // By plane: "push.fp32" -> its GB/s.
  std::map<std::string, std::map<std::string, double>> rates;
  for (const std::string& plane : Planes()) {
    auto c = client::Client::Connect(BenchClientOptions((*cluster)->addresses(), plane, security));
    if (!c.ok()) return c.status();
    const int connections = servers * ConnectionsPerServer(plane, servers);
    const double limit = tcp.cached.at(connections);
    const double tensor_limit = tcp.tensor.at(connections);
    for (v1::DType dtype : {v1::DTYPE_FP32, v1::DTYPE_BF16}) {
      Figure push, gather;
      if (absl::Status s = MeasureJob(**c, pids, plane, dtype, &push, &gather); !s.ok()) return s;
      const std::string suffix = std::string(".") + DTypeName(dtype) +
                                 ".servers=" + std::to_string(servers) + "." + plane;
      for (auto [name, figure] : {std::pair{"push" + suffix, &push}, {"gather" + suffix, &gather}}) {
        Versus versus;
        if (security.tls) {
          versus.plain_bytes_per_s = (*plain)[name];
          versus.records = plane == "tcp"    ? RecordsFromLog(log)
                           : SameHost(plane) ? "none: shared memory on this host"
                                             : "gRPC";
        } else {
          (*plain)[name] = figure->bytes_per_s;
        }
        Print(name + security.suffix, *figure, limit, tensor_limit, versus);
      }
      const std::string d = std::string(".") + DTypeName(dtype);
      rates[plane]["push" + d] = push.bytes_per_s;
      rates[plane]["gather" + d] = gather.bytes_per_s;
      // The same-host figures against the plane they improve on.
      const std::string base = plane == "shm" ? "tcp" : plane == "shm_shared" ? "shm" : "";
      if (!base.empty() && rates[base].count("push" + d) != 0) {
        const std::string vs = d + ".servers=" + std::to_string(servers) + "." + plane + "_vs_" +
                               base + security.suffix;
        Print("push" + vs, push, rates[base]["push" + d]);
        Print("gather" + vs, gather, rates[base]["gather" + d]);
      }
    }
  }
  return (*cluster)->StopAll();
}

int Main() {
  std::vector<int> server_counts;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_servers), ',')) {
    int n;
    if (absl::SimpleAtoi(s, &n) && n > 0) server_counts.push_back(n);
  }
  // Raw TCP first: it forks, so it runs before any thread exists.
  RawTcp tcp;
  std::map<int, Figure> cached, tensor_figures;
  std::vector<int> conns = {1};
  for (int s : server_counts) {
    for (const std::string& plane : Planes()) conns.push_back(s * ConnectionsPerServer(plane, s));
  }
  const uint64_t tensor_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_tensor_mib)) << 20;
  const uint64_t tcp_bytes = std::max<uint64_t>(2 * tensor_bytes, 64 << 20);
  for (int n : conns) {
    if (tcp.cached.count(n)) continue;
    for (int r = 0; r < absl::GetFlag(FLAGS_reps); ++r) {
      absl::StatusOr<RawTcpResult> rate = MeasureRawTcp(n, tcp_bytes);
      absl::StatusOr<RawTcpResult> tensor = rate.ok() ? MeasureRawTcp(n, tensor_bytes, true) : rate;
      if (!tensor.ok()) return std::fprintf(stderr, "%s\n", tensor.status().ToString().c_str()), 1;
      AddRaw(tcp_bytes, *rate, &cached[n]);
      AddRaw(tensor_bytes, *tensor, &tensor_figures[n]);
    }
    tcp.cached[n] = cached[n].bytes_per_s;
    tcp.tensor[n] = tensor_figures[n].bytes_per_s;
    const double limit = tcp.cached[n];
    Print("raw_tcp.connections=" + std::to_string(n), cached[n], limit);
    Print("raw_tcp_tensor.connections=" + std::to_string(n), tensor_figures[n], limit);
  }
  // A transport that fails (say kTLS on a new kernel) is named, and the
  // others are still measured: one device run keeps every figure it can.
  PlainRates plain;
  int failed = 0;
  for (int s : server_counts) {
    for (const Security& security : Securities()) {
      if (absl::Status st = MeasureServers(s, tcp, security, &plain); !st.ok()) {
        std::fprintf(stderr, "servers=%d%s: %s\n", s, security.suffix.c_str(),
                     st.ToString().c_str());
        failed = 1;
      }
    }
  }
  return failed;
}

}  // namespace
}  // namespace zerostate::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return zerostate::bench::Main();
}
