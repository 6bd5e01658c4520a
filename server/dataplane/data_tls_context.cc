#include "server/dataplane/data_tls_context.h"

#include <iostream>

#include "absl/time/clock.h"
#include "common/data_tls.h"

namespace zerostate::server {

bool DataTlsContext::Stamp::operator==(const Stamp& o) const {
  for (int i = 0; i < 3; ++i) {
    if (ino[i] != o.ino[i] || size[i] != o.size[i] || mtime[i].tv_sec != o.mtime[i].tv_sec ||
        mtime[i].tv_nsec != o.mtime[i].tv_nsec) {
      return false;
    }
  }
  return true;
}

DataTlsContext::Stamp DataTlsContext::Look() const {
  Stamp stamp;
  const std::string* files[3] = {&options_.cert_file, &options_.key_file, &options_.client_ca_file};
  for (int i = 0; i < 3; ++i) {
    struct stat st {};
    if (files[i]->empty() || stat(files[i]->c_str(), &st) != 0) continue;
    stamp.ino[i] = st.st_ino;
    stamp.size[i] = st.st_size;
    stamp.mtime[i] = st.st_mtim;
  }
  return stamp;
}

absl::StatusOr<std::shared_ptr<SSL_CTX>> DataTlsContext::Make() const {
  auto pem = ReadTlsFiles(options_);
  if (!pem.ok()) return pem.status();
  return ServerTlsContext(pem->cert, pem->key, pem->ca, kernel_);
}

absl::StatusOr<std::unique_ptr<DataTlsContext>> DataTlsContext::Load(const TlsOptions& options,
                                                                     bool kernel) {
  if (auto s = CheckTlsFlags(options); !s.ok()) return s;
  std::unique_ptr<DataTlsContext> tls(new DataTlsContext(options, kernel));
  Stamp stamp = tls->Look();
  auto ctx = tls->Make();
  if (!ctx.ok()) return ctx.status();
  absl::MutexLock lock(&tls->mu_);
  tls->current_ = *std::move(ctx);
  tls->stamp_ = stamp;
  tls->looked_ = absl::Now();
  return tls;
}

std::shared_ptr<SSL_CTX> DataTlsContext::Current() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  if (now - looked_ < absl::Seconds(1)) return current_;
  looked_ = now;
  Stamp stamp = Look();
  if (stamp == stamp_) return current_;
  // Loaded under mu_: a renewal is rare, and the connections that come
  // meanwhile should get the new certificate.
  auto ctx = Make();
  if (!ctx.ok()) {
    std::cerr << "zerostate-server: data plane TLS: the certificate files changed but do not "
                 "load; new connections keep the previous ones: "
              << ctx.status() << std::endl;
    return current_;
  }
  stamp_ = stamp;
  current_ = *std::move(ctx);
  ++reloads_;
  std::cerr << "zerostate-server: data plane TLS: certificate files reloaded" << std::endl;
  return current_;
}

}  // namespace zerostate::server
