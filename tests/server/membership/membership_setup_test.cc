// The server's name and dialled address from its flags (--listen,
// --advertise_address, --replace, --etcd_endpoints), without a process or
// an etcd: what a replacement is called and where it is found, and each
// bad combination refused naming the flag.
#include "server/membership/membership_setup.h"

#include <gtest/gtest.h>

#include <string>

namespace zerostate::server {
namespace {

MembershipConfig Config(const std::string& advertise, const std::string& replace) {
  MembershipConfig c;
  c.etcd_endpoints = "127.0.0.1:2379";
  c.advertise_address = advertise;
  c.replace = replace;
  return c;
}

TEST(MembershipSetupTest, AServerIsNamedAndDialledAtItsAdvertisedAddress) {
  auto a = MemberAddressesFor(Config("", ""), "10.0.0.1:7070");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->self, "10.0.0.1:7070");
  EXPECT_EQ(a->dial, "10.0.0.1:7070");
  auto b = MemberAddressesFor(Config("host-b:7070", ""), "0.0.0.0:7070");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->self, "host-b:7070");
  EXPECT_EQ(b->dial, "host-b:7070");
}

TEST(MembershipSetupTest, AReplacementIsNamedByTheServerItReplacesAndDialledAtItsOwnAddress) {
  auto r = MemberAddressesFor(Config("", "10.0.0.1:7070"), "10.0.0.9:7171");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->self, "10.0.0.1:7070");
  EXPECT_EQ(r->dial, "10.0.0.9:7171");
  auto advertised = MemberAddressesFor(Config("host-c:7171", "host-a:7070"), "0.0.0.0:7171");
  ASSERT_TRUE(advertised.ok()) << advertised.status();
  EXPECT_EQ(advertised->self, "host-a:7070");
  EXPECT_EQ(advertised->dial, "host-c:7171");
}

TEST(MembershipSetupTest, BadFlagsAreRefusedNamingThem) {
  auto refused = [](const MembershipConfig& c, const std::string& listen,
                    const std::string& names) {
    auto got = MemberAddressesFor(c, listen);
    ASSERT_FALSE(got.ok()) << names;
    EXPECT_TRUE(absl::IsInvalidArgument(got.status())) << got.status();
    EXPECT_NE(got.status().message().find(names), std::string::npos) << got.status();
  };
  MembershipConfig no_etcd = Config("", "10.0.0.1:7070");
  no_etcd.etcd_endpoints.clear();
  refused(no_etcd, "10.0.0.9:7171", "replace: '10.0.0.1:7070' needs --etcd_endpoints");
  refused(Config("", "host-a"), "10.0.0.9:7171", "replace: 'host-a' is not the HOST:PORT");
  refused(Config("", "host-a:0"), "10.0.0.9:7171", "replace: 'host-a:0'");
  refused(Config("", ":7070"), "10.0.0.9:7171", "replace: ':7070'");
  refused(Config("", "a/b:7070"), "10.0.0.9:7171", "replace: 'a/b:7070'");
  refused(Config("", "10.0.0.1:7070"), "10.0.0.9:0", "advertise_address: none given");
  refused(Config("", "10.0.0.9:7171"), "10.0.0.9:7171",
          "replace: '10.0.0.9:7171' is this server's own address");
  refused(Config("host-c:7171", "host-c:7171"), "0.0.0.0:7171",
          "replace: 'host-c:7171' is this server's own address");
  // Without --replace or etcd nothing is refused: no membership at all.
  MembershipConfig plain;
  auto none = StartMembership(plain, "127.0.0.1:0", nullptr);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, nullptr);
  auto started = StartMembership(no_etcd, "10.0.0.9:7171", nullptr);
  ASSERT_FALSE(started.ok());
  EXPECT_NE(started.status().message().find("needs --etcd_endpoints"), std::string::npos)
      << started.status();
}

}  // namespace
}  // namespace zerostate::server
