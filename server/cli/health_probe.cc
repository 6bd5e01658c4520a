#include "server/cli/health_probe.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/credentials.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/read_file.h"

namespace zerostate::server {
namespace {

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials(const HealthProbeOptions& o) {
  if (o.plaintext != o.ca_file.empty()) {
    return absl::InvalidArgumentError(
        "choose --tls_ca (with --tls_cert/--tls_key for mutual TLS) "
        "or --plaintext, as the server's clients do");
  }
  if (o.plaintext) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  for (auto [flag, path, into] : {std::tuple{"--tls_ca", &o.ca_file, &ssl.pem_root_certs},
                                  {"--tls_cert", &o.cert_file, &ssl.pem_cert_chain},
                                  {"--tls_key", &o.key_file, &ssl.pem_private_key}}) {
    if (path->empty()) continue;
    auto text = ReadWholeFile(*path);
    if (!text.ok())
      return absl::InvalidArgumentError(absl::StrCat(flag, ": ", text.status().message()));
    *into = *std::move(text);
  }
  return grpc::SslCredentials(ssl);
}

// grpc.health.v1.HealthCheckRequest{service}: field 1, a string.
std::string EncodeRequest(const std::string& service) {
  if (service.empty()) return "";
  std::string out = "\x0a";
  for (size_t n = service.size();; n >>= 7) {  // varint length
    out += static_cast<char>((n & 0x7f) | (n >= 0x80 ? 0x80 : 0));
    if (n < 0x80) break;
  }
  return out + service;
}

}  // namespace

absl::Status CheckHealth(const HealthProbeOptions& o) {
  auto credentials = Credentials(o);
  if (!credentials.ok()) return credentials.status();
  grpc::ChannelArguments args;
  if (!o.server_name.empty()) args.SetSslTargetNameOverride(o.server_name);
  auto channel = grpc::CreateCustomChannel(o.address, *credentials, args);
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + o.timeout));
  const std::string request_bytes = EncodeRequest(o.service);
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  const std::string where = absl::StrCat("health check of ", o.address,
                                         o.service.empty() ? "" : " service " + o.service, ": ");
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        absl::StrCat(where, status.error_message()));
  }
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (response.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices)
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  // HealthCheckResponse{status}: field 1, a varint; SERVING = 1 (absent: 0, UNKNOWN).
  const int serving = bytes.size() == 2 && bytes[0] == '\x08' ? bytes[1] : 0;
  if (serving == 1) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(where, serving == 2 ? "NOT_SERVING" : "status ",
                                             serving == 2 ? "" : std::to_string(serving)));
}

}  // namespace zerostate::server
