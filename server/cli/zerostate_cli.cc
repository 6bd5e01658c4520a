// zerostate: the operator's command line.
//
//   zerostate ckpt list <root>              checkpoints under a root, complete or not
//   zerostate ckpt verify <dir>             read every block, check every checksum
//   zerostate ckpt inspect <dir>            job, version, optimizer, shards, tensors
//   zerostate ckpt export <dir> <out.safetensors> [--moments]
//                                           fp32 master weights for PyTorch / Hugging Face
//                                           (--moments: and the optimizer moments, fp32)
//   zerostate health <host:port> (--tls_ca=F [--tls_cert=F --tls_key=F] | --plaintext)
//                    [--tls_server_name=N] [--service=S] [--timeout_seconds=T]
//                                           a gRPC health check over the clients' transport
//                                           (server/cli/health_probe.h; Kubernetes exec probes)
//
// Exit status: 0 on success (health: SERVING), 1 when the checkpoint is bad
// or the server not serving (the message says why), 2 on a usage error.
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "server/core/checkpoint/ckpt_tool.h"
#include "server/cli/health_probe.h"

namespace {

int Usage() {
  std::cerr
      << "usage: zerostate ckpt list <root>\n"
         "       zerostate ckpt verify <dir>\n"
         "       zerostate ckpt inspect <dir>\n"
         "       zerostate ckpt export <dir> <out.safetensors> [--moments]\n"
         "       zerostate health <host:port> (--tls_ca=F [--tls_cert=F --tls_key=F] | "
         "--plaintext)\n"
         "                        [--tls_server_name=N] [--service=S] [--timeout_seconds=T]\n";
  return 2;
}

int Report(const absl::Status& s) {
  if (s.ok()) return 0;
  std::cerr << "zerostate: " << s << std::endl;
  return 1;
}

int List(const std::string& root) {
  auto entries = zerostate::server::ListCheckpoints(root);
  if (!entries.ok()) return Report(entries.status());
  for (const auto& e : *entries) {
    std::cout << e.job_id << "\tv" << e.version << "\t" << (e.complete ? "complete" : "INCOMPLETE")
              << "\t" << e.dir << (e.problem.empty() ? "" : "\t" + e.problem) << "\n";
  }
  return 0;
}

// `zerostate health <address> --flag=value...`.
int Health(const std::vector<std::string>& args) {
  zerostate::server::HealthProbeOptions o;
  o.address = args[1];
  for (size_t i = 2; i < args.size(); ++i) {
    const std::string& a = args[i];
    const size_t eq = a.find('=');
    const std::string flag = a.substr(0, eq),
                      value = eq == std::string::npos ? "" : a.substr(eq + 1);
    double seconds = 0;
    if (a == "--plaintext") {
      o.plaintext = true;
    } else if (flag == "--tls_ca") {
      o.ca_file = value;
    } else if (flag == "--tls_cert") {
      o.cert_file = value;
    } else if (flag == "--tls_key") {
      o.key_file = value;
    } else if (flag == "--tls_server_name") {
      o.server_name = value;
    } else if (flag == "--service") {
      o.service = value;
    } else if (flag == "--timeout_seconds" && absl::SimpleAtod(value, &seconds) && seconds > 0) {
      o.timeout = absl::Seconds(seconds);
    } else {
      std::cerr << "zerostate health: unknown or bad argument '" << a << "'\n";
      return Usage();
    }
  }
  absl::Status s = zerostate::server::CheckHealth(o);
  if (absl::IsInvalidArgument(s)) {
    std::cerr << "zerostate health: " << s.message() << "\n";
    return Usage();
  }
  int rc = Report(s);
  if (rc == 0) std::cout << o.address << ": SERVING\n";
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() >= 2 && args[0] == "health") return Health(args);
  if (args.size() < 3 || args[0] != "ckpt") return Usage();
  const std::string& cmd = args[1];
  if (cmd == "list") return List(args[2]);
  if (cmd == "verify") {
    int rc = Report(zerostate::server::VerifyCheckpoint(args[2]));
    if (rc == 0) std::cout << args[2] << ": every checksum matches\n";
    return rc;
  }
  if (cmd == "inspect") return Report(zerostate::server::InspectCheckpoint(args[2], std::cout));
  const bool moments = args.size() == 5 && args[4] == "--moments";
  if (cmd == "export" && (args.size() == 4 || moments)) {
    int rc = Report(zerostate::server::ExportSafetensors(args[2], args[3], moments));
    if (rc == 0) std::cout << "wrote " << args[3] << "\n";
    return rc;
  }
  return Usage();
}
