// stream_bench: the data plane's byte stream alone (common/data_stream.h,
// frames of common/frame_io.h), plaintext against TLS 1.3 in the same run,
// over loopback TCP inside one process: no server, no client library, no
// folding; what the record layer costs per connection.
//
// For each count in --connections, that many connections each carry
// --mib MiB in frames of --frame_kib KiB (one thread sends, another
// receives, per connection), plaintext then under mutual TLS with
// OpenSSL's userspace records (certificates made by the openssl tool at
// start). A figure is the best of --reps. It prints GB/s of payload over
// all connections and the CPU seconds per GB of the sending and of the
// receiving threads (kernel time in their context included; on loopback the
// sender's includes most of the receive path), and for TLS the ratio to
// plaintext with as many connections. --json prints one object per figure:
//   {"figure":"stream.tls.connections=N","value":GB/s,"unit":"GB/s",
//    "send_cpu_s_per_gb":...,"recv_cpu_s_per_gb":...,
//    "plain":...,"plain_ratio":...,"records":"TLSv1.3 ..."}
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/data_stream.h"
#include "common/data_tls.h"
#include "common/frame_io.h"
#include "tests/testing/server_process.h"
#include "tests/testing/test_certificates.h"

ABSL_FLAG(std::string, connections, "1,4", "connection counts to measure");
ABSL_FLAG(int, mib, 512, "MiB of payload per connection and repetition");
ABSL_FLAG(int, frame_kib, 1024, "payload per frame in KiB (the client's chunk)");
ABSL_FLAG(int, reps, 3, "timed repetitions per figure; the best counts");
ABSL_FLAG(bool, json, false, "print one JSON object per figure");

namespace zerostate::bench {
namespace {

double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// One connection's two ends (sockets owned, streams on them).
struct Connection {
  int fds[2] = {-1, -1};
  std::unique_ptr<DataStream> sender;
  std::unique_ptr<DataStream> receiver;
  ~Connection() {
    sender.reset();
    receiver.reset();
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
  }
};

// TLS contexts of both ends, or none (plaintext).
struct Contexts {
  std::shared_ptr<SSL_CTX> server;
  std::shared_ptr<SSL_CTX> client;
};

absl::StatusOr<std::unique_ptr<Connection>> Connect(const Contexts& tls) {
  auto c = std::make_unique<Connection>();
  if (absl::Status s = testing::ConnectOnLoopback(&c->fds[0], &c->fds[1]); !s.ok()) return s;
  TuneDataSocket(c->fds[0]);
  TuneDataSocket(c->fds[1]);
  if (tls.client == nullptr) {
    c->sender = std::make_unique<DataStream>(c->fds[0]);
    c->receiver = std::make_unique<DataStream>(c->fds[1]);
    return c;
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  absl::StatusOr<std::unique_ptr<DataStream>> accepted;
  std::thread server([&] { accepted = TlsAccept(tls.server.get(), c->fds[1], deadline); });
  absl::StatusOr<std::unique_ptr<DataStream>> connected =
      TlsConnect(tls.client.get(), c->fds[0], "127.0.0.1", deadline);
  server.join();
  if (!connected.ok()) return connected.status();
  if (!accepted.ok()) return accepted.status();
  c->sender = *std::move(connected);
  c->receiver = *std::move(accepted);
  return c;
}

struct Figure {
  double bytes_per_s = 0;
  double send_cpu_s = 0;  // of the best repetition
  double recv_cpu_s = 0;
  double bytes = 0;
  std::string records;
};

// One repetition over `conns`: every connection carries `bytes` of payload.
absl::Status Measure(std::vector<std::unique_ptr<Connection>>& conns, size_t bytes,
                     Figure* best) {
  const size_t frame = static_cast<size_t>(absl::GetFlag(FLAGS_frame_kib)) << 10;
  std::vector<uint8_t> source(frame, 0x5a);
  std::vector<std::thread> threads;
  std::vector<double> send_cpu(conns.size()), recv_cpu(conns.size());
  std::vector<absl::Status> errors(2 * conns.size());
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < conns.size(); ++i) {
    threads.emplace_back([&, i] {
      const double cpu = ThreadCpuSeconds();
      v1::DataFrameMeta meta;
      meta.mutable_chunk()->set_job_id("stream_bench");
      for (size_t sent = 0; sent < bytes && errors[2 * i].ok(); sent += frame) {
        errors[2 * i] = SendFrame(*conns[i]->sender, FrameType::kPush, meta, source.data(),
                                  std::min(frame, bytes - sent));
      }
      send_cpu[i] = ThreadCpuSeconds() - cpu;
    });
    threads.emplace_back([&, i] {
      const double cpu = ThreadCpuSeconds();
      FrameBuffer into;
      for (size_t got = 0; got < bytes && errors[2 * i + 1].ok();) {
        auto f = RecvFrameStart(*conns[i]->receiver);
        if (!f.ok() || !f->has_value()) {
          errors[2 * i + 1] = f.ok() ? absl::DataLossError("closed early") : f.status();
          break;
        }
        const size_t n = (*f)->header.payload_len;
        errors[2 * i + 1] = RecvExact(*conns[i]->receiver, into.Reserve(n), n);
        got += n;
      }
      recv_cpu[i] = ThreadCpuSeconds() - cpu;
    });
  }
  for (std::thread& t : threads) t.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const absl::Status& s : errors) {
    if (!s.ok()) return s;
  }
  const double all = static_cast<double>(bytes) * static_cast<double>(conns.size());
  if (all / seconds > best->bytes_per_s) {
    best->bytes_per_s = all / seconds;
    best->bytes = all;
    best->send_cpu_s = 0;
    best->recv_cpu_s = 0;
    for (size_t i = 0; i < conns.size(); ++i) {
      best->send_cpu_s += send_cpu[i];
      best->recv_cpu_s += recv_cpu[i];
    }
  }
  return absl::OkStatus();
}

void Print(const std::string& name, const Figure& f, double plain) {
  const double gb = f.bytes / 1e9;
  if (absl::GetFlag(FLAGS_json)) {
    std::printf(
        "{\"figure\":\"%s\",\"value\":%.6g,\"unit\":\"GB/s\",\"send_cpu_s_per_gb\":%.4f,"
        "\"recv_cpu_s_per_gb\":%.4f",
        name.c_str(), f.bytes_per_s / 1e9, f.send_cpu_s / gb, f.recv_cpu_s / gb);
    if (plain > 0) {
      std::printf(",\"plain\":%.6g,\"plain_ratio\":%.4f,\"records\":\"%s\"", plain / 1e9,
                  f.bytes_per_s / plain, f.records.c_str());
    }
    std::printf("}\n");
  } else {
    std::printf("%-28s %7.3f GB/s  CPU s/GB send %.3f recv %.3f", name.c_str(),
                f.bytes_per_s / 1e9, f.send_cpu_s / gb, f.recv_cpu_s / gb);
    if (plain > 0) std::printf("  vs plaintext %.3f  (%s)", f.bytes_per_s / plain, f.records.c_str());
    std::printf("\n");
  }
  std::fflush(stdout);
}

int Main() {
  std::vector<int> counts;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_connections), ',')) {
    int n;
    if (absl::SimpleAtoi(s, &n) && n > 0) counts.push_back(n);
  }
  testing::TestCertificates certs(absl::StrCat("/tmp/stream_bench.", getpid()));
  if (!certs.ok()) return std::fprintf(stderr, "openssl failed:\n%s", certs.Log().c_str()), 1;
  auto server = ServerTlsContext(ReadFile(certs.Path("server.pem")),
                                 ReadFile(certs.Path("server.key")), ReadFile(certs.Path("ca.pem")),
                                 /*kernel=*/false);
  auto client = ClientTlsContext(ReadFile(certs.Path("ca.pem")), ReadFile(certs.Path("client.pem")),
                                 ReadFile(certs.Path("client.key")), /*kernel=*/false);
  if (!server.ok() || !client.ok()) {
    return std::fprintf(stderr, "%s\n", (server.ok() ? client.status() : server.status()).ToString().c_str()), 1;
  }
  const size_t bytes = static_cast<size_t>(absl::GetFlag(FLAGS_mib)) << 20;
  int failed = 0;
  for (int n : counts) {
    double plain = 0;
    for (const Contexts& tls : {Contexts{}, Contexts{*server, *client}}) {
      const std::string name = absl::StrCat("stream.", tls.client ? "tls" : "plain",
                                            ".connections=", n);
      std::vector<std::unique_ptr<Connection>> conns;
      absl::Status s;
      for (int i = 0; i < n && s.ok(); ++i) {
        auto c = Connect(tls);
        if (c.ok()) conns.push_back(*std::move(c));
        s = c.status();
      }
      Figure best;
      for (int r = 0; r < absl::GetFlag(FLAGS_reps) && s.ok(); ++r) s = Measure(conns, bytes, &best);
      if (!s.ok()) {
        std::fprintf(stderr, "%s: %s\n", name.c_str(), s.ToString().c_str());
        failed = 1;
        continue;
      }
      best.records = conns[0]->receiver->Describe();
      Print(name, best, tls.client ? plain : 0);
      if (!tls.client) plain = best.bytes_per_s;
    }
  }
  std::filesystem::remove_all(certs.dir());
  return failed;
}

}  // namespace
}  // namespace zerostate::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return zerostate::bench::Main();
}
