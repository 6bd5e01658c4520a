#include "client/data_streams.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

namespace zerostate::client {
namespace {

// The host part of "host:port" or "[v6]:port" (the whole string when it
// has no port).
std::string HostOf(const std::string& address) {
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    return close == std::string::npos ? address : address.substr(1, close - 1);
  }
  const size_t colon = address.rfind(':');
  // More than one colon and no brackets: a bare IPv6 address.
  if (colon == std::string::npos || address.find(':') != colon) return address;
  return address.substr(0, colon);
}

// Whether the numeric address `host` is a loopback one or that of one of
// this host's interfaces; false when it is not numeric.
bool IsLocalAddress(const std::string& host) {
  in_addr v4{};
  in6_addr v6{};
  const bool is_v4 = inet_pton(AF_INET, host.c_str(), &v4) == 1;
  const bool is_v6 = !is_v4 && inet_pton(AF_INET6, host.c_str(), &v6) == 1;
  if (!is_v4 && !is_v6) return false;
  if (is_v4 && (ntohl(v4.s_addr) >> 24) == 127) return true;
  if (is_v6 && IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (const ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    if (is_v4 && i->ifa_addr->sa_family == AF_INET) {
      found = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == v4.s_addr;
    } else if (is_v6 && i->ifa_addr->sa_family == AF_INET6) {
      found = std::memcmp(&reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr, &v6,
                          sizeof(v6)) == 0;
    }
  }
  freeifaddrs(list);
  return found;
}

}  // namespace

int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

bool OnThisHost(const std::string& address) {
  const std::string host = HostOf(address);
  if (host == "localhost") return true;
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0 && host == name) return true;
  return IsLocalAddress(host);
}

bool AllServersOnThisHost(const ClientOptions& o) {
  if (!o.data_plane || !o.data_shm || !o.data_servers.empty() || o.servers.empty()) return false;
  return std::all_of(o.servers.begin(), o.servers.end(), OnThisHost);
}

int DataStreamsPerServer(const ClientOptions& o, bool userspace_tls, bool same_host, int cores) {
  const int servers = std::max(1, static_cast<int>(o.servers.size()));
  const int per_core = std::max(1, cores / servers);
  if (same_host) {
    return std::max(o.streams_per_server, std::min(o.same_host_streams_per_server, per_core));
  }
  if (userspace_tls && o.userspace_tls_streams_per_server > 0) {
    return std::min(o.userspace_tls_streams_per_server, per_core);
  }
  return o.streams_per_server;
}

}  // namespace zerostate::client
