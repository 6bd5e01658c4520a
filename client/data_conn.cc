#include "client/data_conn.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/shm_conn.h"
#include "common/data_tls.h"

namespace zerostate::client {
namespace {

// The host of "host:port" ("[v6]:port" too).
std::string HostOf(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

// Connects `fd` to `addr`, waiting until `deadline`.
absl::Status ConnectBy(int fd, const addrinfo& addr, absl::Time deadline) {
  if (connect(fd, addr.ai_addr, addr.ai_addrlen) == 0) return absl::OkStatus();
  if (errno != EINPROGRESS) return absl::UnavailableError(std::strerror(errno));
  pollfd p{fd, POLLOUT, 0};
  int ms =
      static_cast<int>(std::max<int64_t>(1, absl::ToInt64Milliseconds(deadline - absl::Now())));
  int r = poll(&p, 1, ms);
  if (r == 0) return absl::DeadlineExceededError("connect: deadline exceeded");
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (r < 0 || err != 0) return absl::UnavailableError(std::strerror(r < 0 ? errno : err));
  return absl::OkStatus();
}

}  // namespace

DataConn::~DataConn() {
  stream_.reset();  // before its socket
  if (cutter_ != nullptr) cutter_->Untrack(fd_);
  close(fd_);
}

void DataConn::Watch(std::shared_ptr<ConnCutter> cutter) {
  if (cutter_ != nullptr || cutter == nullptr) return;
  cutter_ = std::move(cutter);
  cutter_->Track(fd_);
}

const SharedBuffer* DataConn::Mapped(uint32_t id) const {
  for (const std::shared_ptr<const SharedBuffer>& b : mapped_) {
    if (b->id() == id) return b.get();
  }
  return nullptr;
}

bool DataConn::Refused(uint32_t id) const {
  return std::find(refused_.begin(), refused_.end(), id) != refused_.end();
}

void DataConn::AddShared(std::shared_ptr<const SharedBuffer> buffer, bool mapped) {
  if (mapped) {
    mapped_.push_back(std::move(buffer));
  } else {
    refused_.push_back(buffer->id());
  }
}

DataConnPool::DataConnPool(std::string address, size_t max_idle, std::shared_ptr<SSL_CTX> tls,
                           SameHostPlane same_host, std::shared_ptr<ConnCutter> cutter)
    : address_(std::move(address)),
      max_idle_(max_idle),
      tls_(std::move(tls)),
      same_host_(same_host),
      cutter_(std::move(cutter)) {}

absl::StatusOr<std::unique_ptr<DataConn>> DataConnPool::Open(int fd, absl::Time deadline) {
  TuneDataSocket(fd);
  if (tls_ == nullptr) return std::make_unique<DataConn>(fd, std::make_unique<DataStream>(fd));
  auto stream = TlsConnect(tls_.get(), fd, HostOf(address_), deadline);
  if (!stream.ok()) {
    close(fd);
    return absl::Status(stream.status().code(),
                        absl::StrCat("data plane ", address_, ": ", stream.status().message()));
  }
  return std::make_unique<DataConn>(fd, *std::move(stream));
}

absl::StatusOr<std::unique_ptr<DataConn>> DataConnPool::Acquire(absl::Time deadline) {
  if (cutter_ == nullptr) return Take(deadline);
  if (absl::Status cut = cutter_->Check(); !cut.ok()) {
    return absl::UnavailableError(absl::StrCat("data plane ", address_, ": ", cut.message()));
  }
  absl::StatusOr<std::unique_ptr<DataConn>> conn = Take(deadline);
  if (conn.ok()) (*conn)->Watch(cutter_);
  return conn;
}

absl::StatusOr<std::unique_ptr<DataConn>> DataConnPool::Take(absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    if (!idle_.empty()) {
      std::unique_ptr<DataConn> conn = std::move(idle_.back());
      idle_.pop_back();
      return conn;
    }
  }
  if (tries_same_host()) {
    absl::StatusOr<std::unique_ptr<DataConn>> conn = ConnectSameHost(
        same_host_.port, same_host_.incarnation, same_host_.segment_bytes, deadline);
    absl::MutexLock lock(&mu_);
    if (conn.ok()) {
      same_host_attached_ = true;
      return conn;
    }
    // Another server there, or ours gone: not TCP to a port it left.
    if (absl::IsFailedPrecondition(conn.status()) || same_host_attached_) return conn.status();
    same_host_failed_ = true;  // no same-host plane there, or refused: TCP from now on
  }
  size_t colon = address_.rfind(':');
  std::string host = HostOf(address_);
  std::string port = colon == std::string::npos ? "" : address_.substr(colon + 1);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int gai = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); gai != 0) {
    return absl::UnavailableError(
        absl::StrCat("data plane ", address_, ": cannot resolve: ", gai_strerror(gai)));
  }
  absl::Status s = absl::UnavailableError("no address");
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    s = ConnectBy(fd, *a, deadline);
    if (s.ok()) {
      freeaddrinfo(res);
      return Open(fd, deadline);
    }
    close(fd);
  }
  freeaddrinfo(res);
  return absl::Status(s.code(), absl::StrCat("data plane ", address_, ": connect: ", s.message()));
}

void DataConnPool::Release(std::unique_ptr<DataConn> conn) {
  absl::MutexLock lock(&mu_);
  if (idle_.size() < max_idle_) idle_.push_back(std::move(conn));
}

void DataConnPool::DropIdle() {
  std::vector<std::unique_ptr<DataConn>> dropped;
  {
    absl::MutexLock lock(&mu_);
    dropped.swap(idle_);
  }
  // Closed here, outside the lock.
}

std::string DataAddress(const std::string& grpc_address, int port) {
  std::string a = grpc_address;
  for (const char* prefix : {"dns:///", "dns:", "ipv4:", "ipv6:"}) {
    if (absl::StartsWith(a, prefix)) {
      a = a.substr(std::strlen(prefix));
      break;
    }
  }
  return absl::StrCat(a.substr(0, a.rfind(':')), ":", port);
}

}  // namespace zerostate::client
