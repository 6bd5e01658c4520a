// DataStreamsPerServer: the client's streams per server under userspace
// TLS records, plaintext and kTLS.
#include "client/data_streams.h"

#include <gtest/gtest.h>

namespace zerostate::client {
namespace {

ClientOptions Options(int servers) {
  ClientOptions o;
  o.servers.assign(servers, "127.0.0.1:1");
  return o;  // streams_per_server 4, userspace_tls_streams_per_server 8
}

TEST(DataStreamsTest, PlaintextAndKernelTlsKeepStreamsPerServer) {
  EXPECT_EQ(DataStreamsPerServer(Options(1), /*userspace_tls=*/false, 16), 4);
  EXPECT_EQ(DataStreamsPerServer(Options(4), /*userspace_tls=*/false, 64), 4);
}

TEST(DataStreamsTest, UserspaceTlsRaisesUpToOneStreamPerCoreOverAllServers) {
  EXPECT_EQ(DataStreamsPerServer(Options(1), true, 16), 8);
  EXPECT_EQ(DataStreamsPerServer(Options(2), true, 16), 8);
  EXPECT_EQ(DataStreamsPerServer(Options(3), true, 16), 5);
  EXPECT_EQ(DataStreamsPerServer(Options(4), true, 16), 4);
  EXPECT_EQ(DataStreamsPerServer(Options(16), true, 16), 4);  // never below streams_per_server
  EXPECT_EQ(DataStreamsPerServer(Options(1), true, 2), 4);
  ClientOptions off = Options(1);
  off.userspace_tls_streams_per_server = 0;  // not raised
  EXPECT_EQ(DataStreamsPerServer(off, true, 16), 4);
  ClientOptions more = Options(1);
  more.streams_per_server = 12;
  EXPECT_EQ(DataStreamsPerServer(more, true, 16), 12);
}

}  // namespace
}  // namespace zerostate::client
