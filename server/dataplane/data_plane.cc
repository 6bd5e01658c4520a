#include "server/dataplane/data_plane.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/data_tls.h"
#include "common/frame_io.h"
#include "common/shm_segment.h"
#include "server/dataplane/shm_session.h"

namespace zerostate::server {
namespace {

// A listening socket on `listen` (IPv4, IPv6 as "[addr]:port", or a
// name); *port gets the bound port.
absl::StatusOr<int> Listen(const std::string& listen, int* port) {
  size_t colon = listen.rfind(':');
  int want = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &want) ||
      want < 0 || want > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("data_listen: '", listen, "' is not host:port"));
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int gai = getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(want).c_str(), &hints,
                        &res);
  if (gai != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data_listen: cannot resolve '", host, "': ", gai_strerror(gai)));
  }
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  bool bound = fd >= 0 && bind(fd, res->ai_addr, res->ai_addrlen) == 0 && ::listen(fd, 128) == 0;
  std::string why = bound ? "" : std::strerror(errno);
  freeaddrinfo(res);
  if (!bound) {
    if (fd >= 0) close(fd);
    return absl::UnavailableError(
        absl::StrCat("data_listen: cannot listen on ", listen, ": ", why));
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *port = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return fd;
}

}  // namespace

absl::Status DataPlane::CheckMaxConnections(int max_connections) {
  if (max_connections >= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "max_data_connections: ", max_connections,
      " must be at least 1 (each data plane connection costs the server two threads; to serve "
      "push and gather over gRPC only, use --data_listen=off)"));
}

absl::StatusOr<std::unique_ptr<DataPlane>> DataPlane::Start(const std::string& listen,
                                                            const DataSessionContext& ctx,
                                                            int max_connections,
                                                            DataTlsContext* tls, bool shm) {
  if (absl::Status s = CheckMaxConnections(max_connections); !s.ok()) return s;
  int port = 0;
  absl::StatusOr<int> fd = Listen(listen, &port);
  if (!fd.ok()) return fd.status();
  int shm_fd = -1;
  if (shm) {
    absl::StatusOr<int> unix_fd = ListenShm(port);
    if (unix_fd.ok()) {
      shm_fd = *unix_fd;
    } else {
      std::cerr << "zerostate-server: same-host data plane off: " << unix_fd.status().message()
                << std::endl;
    }
  }
  int wake_fd = eventfd(0, EFD_CLOEXEC);
  if (wake_fd < 0) {
    absl::Status s =
        absl::UnavailableError(absl::StrCat("data plane: eventfd: ", std::strerror(errno)));
    close(*fd);
    if (shm_fd >= 0) close(shm_fd);
    return s;
  }
  std::unique_ptr<DataPlane> plane(
      new DataPlane(*fd, shm_fd, wake_fd, port, ctx, max_connections, tls));
  plane->acceptor_ = std::thread([p = plane.get()] { p->AcceptLoop(p->listen_fd_, false); });
  if (shm_fd >= 0) {
    plane->shm_acceptor_ = std::thread([p = plane.get()] { p->AcceptLoop(p->shm_fd_, true); });
  }
  return plane;
}

DataPlane::DataPlane(int listen_fd, int shm_fd, int wake_fd, int port,
                     const DataSessionContext& ctx, int max_connections, DataTlsContext* tls)
    : listen_fd_(listen_fd),
      shm_fd_(shm_fd),
      wake_fd_(wake_fd),
      port_(port),
      ctx_(ctx),
      max_connections_(max_connections),
      tls_(tls) {
  ctx_.metrics->SetDataConnections(0);
}

void DataPlane::AcceptLoop(int listen_fd, bool shm) {
  while (true) {
    pollfd fds[2] = {{listen_fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0 && errno != EINTR) continue;
    if (fds[1].revents != 0) return;  // Shutdown
    if (fds[0].revents == 0) continue;
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      absl::MutexLock lock(&mu_);
      if (shut_down_) return;
      continue;  // EMFILE and the like: keep serving the open connections
    }
    bool refuse = false;
    {
      absl::MutexLock lock(&mu_);
      ReapLocked();
      if (shut_down_) {
        close(fd);
        return;
      }
      refuse = open_ >= max_connections_;
      if (!refuse) {
        ++open_;
        PublishOpenLocked();
        conns_.push_back(Conn{fd, std::thread(), false});
        Conn* conn = &conns_.back();
        conn->thread = std::thread([this, conn, shm] {
          Serve(conn->fd, shm);
          shutdown(conn->fd, SHUT_RDWR);  // the peer sees the end now; closed when reaped
          absl::MutexLock lock(&mu_);
          conn->done = true;
          --open_;
          PublishOpenLocked();
        });
      }
    }
    if (refuse) Refuse(fd, shm);  // no lock held: others' sessions may end meanwhile
  }
}

void DataPlane::Serve(int fd, bool shm) {
  if (shm) {
    ServeShmConnection(ctx_, fd, kHandshakeTimeout);
    return;
  }
  TuneDataSocket(fd);
  if (tls_ == nullptr) {
    DataStream stream(fd);
    ServeDataConnection(ctx_, stream);
    return;
  }
  // A client whose certificate the CA did not sign (or none, under mutual
  // TLS), or one that does not speak TLS, ends here: nothing of it is read
  // as a frame.
  auto stream = TlsAccept(tls_->Current().get(), fd, absl::Now() + kHandshakeTimeout);
  if (!stream.ok()) return;
  {
    absl::MutexLock lock(&mu_);
    if (!std::exchange(described_, true)) {
      std::cerr << "zerostate-server: data plane TLS: first connection: " << (*stream)->Describe()
                << std::endl;
    }
  }
  ServeDataConnection(ctx_, **stream);
}

// On the acceptor thread, spawning nothing: that is the point of the cap.
// The frame is small and the socket new, so the send does not wait. The
// client's first frames may have arrived already: they are read without
// waiting and dropped, since closing with unread bytes sends a reset, which
// can destroy the answer before the client reads it. The client reads the
// answer as RESOURCE_EXHAUSTED and sends that attempt over gRPC instead
// (client/transfer.cc), which has no such cap.
void DataPlane::Refuse(int fd, bool shm) {
  ctx_.metrics->RecordDataConnectionRefused();
  if (tls_ != nullptr && !shm) {  // a plaintext frame would only break its handshake
    close(fd);
    return;
  }
  if (!shm) TuneDataSocket(fd);
  DataStream stream(fd);
  stream.SetDeadline(absl::Now() + absl::Milliseconds(100));
  v1::DataFrameMeta meta;
  meta.set_incarnation(ctx_.incarnation);
  meta.set_code(static_cast<int>(absl::StatusCode::kResourceExhausted));
  meta.set_message(absl::StrCat("data plane: this server already serves ", max_connections_,
                                " connections, its cap (--max_data_connections); this one is "
                                "closed: use gRPC, or connect again later"));
  (void)SendFrame(stream, FrameType::kError, meta);
  shutdown(fd, SHUT_WR);
  char sink[16 << 10];
  for (int i = 0; i < 64 && recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; ++i) {
  }
  close(fd);
}

void DataPlane::PublishOpenLocked() { ctx_.metrics->SetDataConnections(open_); }

void DataPlane::ReapLocked() {
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (!it->done) {
      ++it;
      continue;
    }
    it->thread.join();  // it has set done: it only returns now
    close(it->fd);
    it = conns_.erase(it);
  }
}

void DataPlane::Shutdown() {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  shut_down_ = true;
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  shutdown(listen_fd_, SHUT_RDWR);
  for (Conn& c : conns_) shutdown(c.fd, SHUT_RDWR);
}

DataPlane::~DataPlane() {
  Shutdown();
  acceptor_.join();
  if (shm_acceptor_.joinable()) shm_acceptor_.join();
  close(listen_fd_);
  if (shm_fd_ >= 0) close(shm_fd_);
  close(wake_fd_);
  std::list<Conn> conns;
  {
    absl::MutexLock lock(&mu_);
    conns.swap(conns_);
  }
  for (Conn& c : conns) {
    c.thread.join();
    close(c.fd);
  }
}

}  // namespace zerostate::server
