// `zerostate health`: a gRPC health check (grpc.health.v1.Health/Check)
// of a state server, over the same transport as its clients (TLS, mutual
// TLS, or plaintext), for Kubernetes exec probes: the kubelet's own gRPC
// probe speaks no TLS, and a TCP probe says only that the port is open.
// Thread-safe: a pure function.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace zerostate::server {

struct HealthProbeOptions {
  std::string address;    // host:port of the gRPC port
  std::string service;    // the service to ask about; "": the server as a whole
  std::string ca_file;    // PEM CA that signed the server's certificate
  std::string cert_file;  // PEM client certificate (mutual TLS), with key_file
  std::string key_file;
  std::string server_name;  // the name to check the certificate for ("": address's host)
  bool plaintext = false;
  absl::Duration timeout = absl::Seconds(5);
};

// OK when the server answers SERVING. Errors: INVALID_ARGUMENT (options: no
// transport chosen, a file that cannot be read), UNAVAILABLE naming the
// address (cannot connect, a TLS handshake refused, NOT_SERVING: e.g.
// draining), DEADLINE_EXCEEDED, NOT_FOUND (a service the server does not
// know).
[[nodiscard]] absl::Status CheckHealth(const HealthProbeOptions& options);

}  // namespace zerostate::server
