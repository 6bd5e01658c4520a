// DataStreamsPerServer: the client's streams per server under userspace
// TLS records, plaintext and kTLS, and with every server on this host;
// OnThisHost: which addresses name this host without a lookup.
#include "client/data_streams.h"

#include <sched.h>
#include <unistd.h>

#include <thread>

#include <gtest/gtest.h>

namespace zerostate::client {
namespace {

ClientOptions Options(int servers) {
  ClientOptions o;
  o.servers.assign(servers, "127.0.0.1:1");
  return o;  // streams_per_server 4, userspace_tls_ and same_host_streams_per_server 8
}

TEST(DataStreamsTest, PlaintextAndKernelTlsOnOtherHostsKeepStreamsPerServer) {
  EXPECT_EQ(DataStreamsPerServer(Options(1), /*userspace_tls=*/false, /*same_host=*/false, 16), 4);
  EXPECT_EQ(DataStreamsPerServer(Options(4), false, false, 64), 4);
}

TEST(DataStreamsTest, UserspaceTlsRunsOneStreamPerCoreOverAllServers) {
  EXPECT_EQ(DataStreamsPerServer(Options(1), true, false, 16), 8);  // at most 8 per server
  EXPECT_EQ(DataStreamsPerServer(Options(2), true, false, 16), 8);
  EXPECT_EQ(DataStreamsPerServer(Options(3), true, false, 16), 5);
  EXPECT_EQ(DataStreamsPerServer(Options(4), true, false, 16), 4);
  EXPECT_EQ(DataStreamsPerServer(Options(16), true, false, 16), 1);  // below streams_per_server
  EXPECT_EQ(DataStreamsPerServer(Options(32), true, false, 16), 1);  // at least one per server
  EXPECT_EQ(DataStreamsPerServer(Options(1), true, false, 2), 2);   // CI's two cores
  EXPECT_EQ(DataStreamsPerServer(Options(4), true, false, 2), 1);
  ClientOptions off = Options(1);
  off.userspace_tls_streams_per_server = 0;  // not sized: streams_per_server, as in plaintext
  EXPECT_EQ(DataStreamsPerServer(off, true, false, 16), 4);
  EXPECT_EQ(DataStreamsPerServer(off, true, false, 2), 4);
  ClientOptions twelve = Options(1);
  twelve.userspace_tls_streams_per_server = 12;
  EXPECT_EQ(DataStreamsPerServer(twelve, true, false, 16), 12);
  EXPECT_EQ(DataStreamsPerServer(twelve, true, false, 8), 8);  // still no more than the cores
}

TEST(DataStreamsTest, ServersOnThisHostRaiseUpToOneStreamPerCoreOverAllServers) {
  EXPECT_EQ(DataStreamsPerServer(Options(1), false, true, 16), 8);
  EXPECT_EQ(DataStreamsPerServer(Options(3), false, true, 16), 5);
  EXPECT_EQ(DataStreamsPerServer(Options(1), false, true, 2), 4);  // CI's two cores: as before
  ClientOptions off = Options(1);
  off.same_host_streams_per_server = 0;  // not raised
  EXPECT_EQ(DataStreamsPerServer(off, false, true, 16), 4);
  // The same-host plane carries the payloads, not TLS records: its sizing.
  EXPECT_EQ(DataStreamsPerServer(off, true, true, 16), 4);
  EXPECT_EQ(DataStreamsPerServer(Options(1), true, true, 2), 4);
  ClientOptions six = Options(1);
  six.same_host_streams_per_server = 6;
  six.userspace_tls_streams_per_server = 7;
  EXPECT_EQ(DataStreamsPerServer(six, true, true, 16), 6);
}

TEST(DataStreamsTest, OnThisHostKnowsLoopbackLocalhostAndItsOwnNameWithoutALookup) {
  EXPECT_TRUE(OnThisHost("127.0.0.1:7000"));
  EXPECT_TRUE(OnThisHost("127.3.4.5:1"));
  EXPECT_TRUE(OnThisHost("localhost:7000"));
  EXPECT_TRUE(OnThisHost("[::1]:7000"));
  char name[256] = {};
  ASSERT_EQ(gethostname(name, sizeof(name) - 1), 0);
  EXPECT_TRUE(OnThisHost(std::string(name) + ":7000"));
  EXPECT_FALSE(OnThisHost("192.0.2.1:7000"));  // TEST-NET-1: no interface has it
  EXPECT_FALSE(OnThisHost("[2001:db8::1]:7000"));  // the documentation prefix
  EXPECT_FALSE(OnThisHost("state-0.example.invalid:7000"));  // a name that needs DNS
}

TEST(DataStreamsTest, AllServersOnThisHostNeedsEveryServerLocalAndTheSameHostPlane) {
  ClientOptions o = Options(2);
  EXPECT_TRUE(AllServersOnThisHost(o));
  o.servers[1] = "192.0.2.1:7000";  // one remote server: no raise for the job
  EXPECT_FALSE(AllServersOnThisHost(o));
  ClientOptions tcp = Options(2);
  tcp.data_shm = false;
  EXPECT_FALSE(AllServersOnThisHost(tcp));
  ClientOptions grpc = Options(2);
  grpc.data_plane = false;
  EXPECT_FALSE(AllServersOnThisHost(grpc));
  ClientOptions proxied = Options(2);
  proxied.data_servers = {"127.0.0.1:9", "127.0.0.1:10"};
  EXPECT_FALSE(AllServersOnThisHost(proxied));
}

// Under taskset (or a cpuset) the client sizes its streams by the cores it
// may use, not by the host's.
TEST(DataStreamsTest, UsableCoresFollowsTheAffinity) {
  cpu_set_t all;
  ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
  EXPECT_EQ(UsableCores(), CPU_COUNT(&all));
  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  int in_thread = 0;
  // Affinity is per thread: the test's own stays as it was.
  std::thread pinned([&] {
    if (sched_setaffinity(0, sizeof(one), &one) == 0) in_thread = UsableCores();
  });
  pinned.join();
  EXPECT_EQ(in_thread, 1);
  EXPECT_EQ(UsableCores(), CPU_COUNT(&all));
}

}  // namespace
}  // namespace zerostate::client
