// Certificates for TLS tests, made by the openssl tool at test time in a
// directory of this process's own (ctest runs tests as processes, several
// at once): a CA; a server certificate for 127.0.0.1 and localhost and a
// second one (for reloads), both signed by the CA, and a third one
// another CA signed (a reload a client can tell apart); a client certificate
// the CA signed, one another CA signed, and one the CA signed that has
// expired. EC P-256 keys: quick to make. Header-only: tests and benchmarks
// share it.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace zerostate::testing {

class TestCertificates {
 public:
  // Makes them in `dir` (emptied first). ok() says whether openssl did.
  explicit TestCertificates(std::string dir) : dir_(std::move(dir)) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::ofstream(Path("server.ext")) << "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
    ok_ = SelfSigned("ca") && SelfSigned("other_ca") && Sign("server", "ca", 2, "server.ext") &&
          Sign("server2", "ca", 2, "server.ext") &&
          Sign("server_other", "other_ca", 2, "server.ext") && Sign("client", "ca", 2, "") &&
          Sign("stranger", "other_ca", 2, "") && Sign("expired", "ca", -1, "");
  }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  const std::string& dir() const { return dir_; }
  bool ok() const { return ok_; }
  // The text of file `name` here (a PEM file); "" when missing.
  std::string Read(const std::string& name) const {
    std::ifstream in(Path(name));
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  // What openssl printed, for a failure's message.
  std::string Log() const { return Read("openssl.log"); }

 private:
  static constexpr char kNewKey[] = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";

  bool SelfSigned(const std::string& name) {
    return Run(absl::StrCat("openssl req -x509 ", kNewKey, " -days 2 -subj /CN=zs-test-", name,
                            " -keyout ", name, ".key -out ", name, ".pem"));
  }
  // `name`.pem/.key signed by `ca`, valid for `days` (negative: expired).
  bool Sign(const std::string& name, const std::string& ca, int days, const std::string& ext) {
    return Run(absl::StrCat("openssl req ", kNewKey, " -subj /CN=zs-test-", name, " -keyout ", name,
                            ".key -out ", name, ".csr")) &&
           Run(absl::StrCat("openssl x509 -req -in ", name, ".csr -CA ", ca, ".pem -CAkey ", ca,
                            ".key -CAcreateserial -days ", days, " -out ", name, ".pem",
                            ext.empty() ? "" : " -extfile " + ext));
  }
  bool Run(const std::string& command) const {
    std::string line = absl::StrCat("cd '", dir_, "' && ", command, " >>openssl.log 2>&1");
    return std::system(line.c_str()) == 0;
  }

  std::string dir_;
  bool ok_ = false;
};

}  // namespace zerostate::testing
