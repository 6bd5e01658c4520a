// Shared setup of the client's integration tests: real zerostate-server
// processes on 127.0.0.1 and client options tuned to exercise many chunks
// and streams on small tensors.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "tests/testing/server_process.h"
#include "tests/testing/test_certificates.h"

namespace zerostate::testing {

inline ServerProcessOptions TestServerOptions() {
  ServerProcessOptions o;
  o.binary = ZEROSTATE_SERVER_PATH;
  o.args = {"--metrics_listen=", "--threads=1", "--ram_budget_bytes=200000000",
            "--grace_seconds=2"};
  return o;
}

// The job token every test client shares, so that clients of one test can
// attach to each other's jobs.
inline constexpr char kTestJobToken[] = "test-token-0123456789abcdef0123456789abcdef";

// Small chunks and several streams, so a small tensor crosses many chunk,
// block and shard boundaries; fast retries.
inline client::ClientOptions TestClientOptions(const std::vector<std::string>& servers) {
  client::ClientOptions o;
  o.servers = servers;
  o.channels_per_server = 2;
  o.streams_per_server = 3;
  o.chunk_bytes = 1024;
  o.max_bytes_in_flight = 64 << 10;
  o.rpc_timeout = std::chrono::milliseconds(20000);
  o.max_attempts = 3;
  o.initial_backoff = std::chrono::milliseconds(5);
  o.max_backoff = std::chrono::milliseconds(50);
  o.threads = 8;
  o.plaintext = true;  // loopback, servers started with --plaintext
  o.job_token = kTestJobToken;
  return o;
}

// This test process's certificates (tests/testing/test_certificates.h),
// made at first use.
inline const TestCertificates& SharedCertificates() {
  static const TestCertificates* certs = new TestCertificates(
      absl::StrCat(::testing::TempDir(), "zerostate_test_certs.", getpid()));
  return *certs;
}

// Mutual TLS on both ports of a server: the shared certificates' server
// certificate, clients must present one the CA signed.
inline void UseMutualTls(ServerProcessOptions& o) {
  const TestCertificates& certs = SharedCertificates();
  o.plaintext = false;
  o.args.push_back("--tls_cert=" + certs.Path("server.pem"));
  o.args.push_back("--tls_key=" + certs.Path("server.key"));
  o.args.push_back("--tls_client_ca=" + certs.Path("ca.pem"));
}

// A client of such servers presenting certificate `name` ("client",
// "stranger", "expired"; "" for none).
inline void UseMutualTls(client::ClientOptions& o, const std::string& name = "client") {
  const TestCertificates& certs = SharedCertificates();
  o.plaintext = false;
  o.tls_ca_file = certs.Path("ca.pem");
  o.tls_cert_file = name.empty() ? "" : certs.Path(name + ".pem");
  o.tls_key_file = name.empty() ? "" : certs.Path(name + ".key");
}

// A job of three odd-sized tensors with 512-element blocks.
inline v1::JobSpec TestSpec(const std::string& id, uint32_t nodes, v1::DType grad,
                            v1::DType weight) {
  v1::JobSpec spec;
  spec.set_job_id(id);
  const std::vector<std::vector<int64_t>> shapes = {{37, 61}, {1000}, {3, 5, 7}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    auto* t = spec.add_tensors();
    t->set_name("t" + std::to_string(i));
    for (int64_t d : shapes[i]) t->add_shape(d);
  }
  spec.mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  spec.mutable_optimizer()->set_weight_decay(0.01f);
  spec.set_num_nodes(nodes);
  spec.set_grad_dtype(grad);
  spec.set_weight_dtype(weight);
  spec.set_block_elems(512);
  spec.set_seed(1234);
  return spec;
}

// Compares bit patterns; prints the first mismatches.
inline void ExpectBitIdentical(const float* got, const float* want, size_t n,
                               const std::string& what) {
  int shown = 0;
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(&got[i], &want[i], 4) == 0) continue;
    if (shown++ < 5) ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " != " << want[i];
    ++bad;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << n << " elements differ";
}

}  // namespace zerostate::testing
