// zerostate: the operator's command line.
//
//   zerostate ckpt list <root>              checkpoints under a root, complete or not
//   zerostate ckpt verify <dir>             read every block, check every checksum
//   zerostate ckpt inspect <dir>            job, version, optimizer, shards, tensors
//   zerostate ckpt export <dir> <out.safetensors>
//                                           fp32 master weights for PyTorch / Hugging Face
//
// Exit status: 0 on success, 1 when the checkpoint is bad (the message says
// why), 2 on a usage error.
#include <iostream>
#include <string>
#include <vector>

#include "server/checkpoint/ckpt_tool.h"

namespace {

int Usage() {
  std::cerr << "usage: zerostate ckpt list <root>\n"
               "       zerostate ckpt verify <dir>\n"
               "       zerostate ckpt inspect <dir>\n"
               "       zerostate ckpt export <dir> <out.safetensors>\n";
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

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() < 3 || args[0] != "ckpt") return Usage();
  const std::string& cmd = args[1];
  if (cmd == "list") return List(args[2]);
  if (cmd == "verify") {
    int rc = Report(zerostate::server::VerifyCheckpoint(args[2]));
    if (rc == 0) std::cout << args[2] << ": every checksum matches\n";
    return rc;
  }
  if (cmd == "inspect") return Report(zerostate::server::InspectCheckpoint(args[2], std::cout));
  if (cmd == "export" && args.size() == 4) {
    int rc = Report(zerostate::server::ExportSafetensors(args[2], args[3]));
    if (rc == 0) std::cout << "wrote " << args[3] << "\n";
    return rc;
  }
  return Usage();
}
