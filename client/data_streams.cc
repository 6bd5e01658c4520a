#include "client/data_streams.h"

#include <algorithm>

namespace zerostate::client {

int DataStreamsPerServer(const ClientOptions& o, bool userspace_tls, int cores) {
  if (!userspace_tls) return o.streams_per_server;
  const int servers = std::max(1, static_cast<int>(o.servers.size()));
  const int raised = std::min(o.userspace_tls_streams_per_server, std::max(1, cores / servers));
  return std::max(o.streams_per_server, raised);
}

}  // namespace zerostate::client
