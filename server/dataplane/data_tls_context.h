// The TCP data plane's OpenSSL context, made from the server's TLS files
// (server/core/tls_files.h). Thread-safe.
#pragma once

#include <sys/stat.h>

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/core/tls_files.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace zerostate::server {

// The data plane's TLS context, made from the files of TlsOptions, and made
// again when one of them changes (a certificate renewed in place, or a
// Kubernetes secret's files swapped): new connections then use the new
// certificate, live ones keep theirs. The files are looked at when a
// connection comes, at most once a second. A change that does not load
// (a half-written file, a key that does not match yet) keeps the last
// good context, says why on stderr, and is tried again at the next look.
class DataTlsContext {
 public:
  // Loads the files (INVALID_ARGUMENT naming the flag, as
  // ServerCredentialsFor). `kernel`: hand records to kTLS where it can.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<DataTlsContext>> Load(
      const TlsOptions& options, bool kernel);

  // The context for a new connection.
  std::shared_ptr<SSL_CTX> Current();
  // How many times the files were loaded again since Load.
  int reloads() const {
    absl::MutexLock lock(&mu_);
    return reloads_;
  }

 private:
  // What identifies a version of the three files: inode, size, mtime.
  struct Stamp {
    ino_t ino[3] = {};
    off_t size[3] = {};
    timespec mtime[3] = {};
    bool operator==(const Stamp& o) const;
  };
  DataTlsContext(const TlsOptions& options, bool kernel) : options_(options), kernel_(kernel) {}
  Stamp Look() const;
  [[nodiscard]] absl::StatusOr<std::shared_ptr<SSL_CTX>> Make() const;

  const TlsOptions options_;
  const bool kernel_;
  mutable absl::Mutex mu_;
  std::shared_ptr<SSL_CTX> current_ ABSL_GUARDED_BY(mu_);
  Stamp stamp_ ABSL_GUARDED_BY(mu_);
  absl::Time looked_ ABSL_GUARDED_BY(mu_);
  int reloads_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace zerostate::server
