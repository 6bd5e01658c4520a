// The data plane's own TLS 1.3 records (common/tls_records.h) against
// OpenSSL's, on one real handshake over a socket pair: records and key
// updates that TlsRecordKey seals are read by OpenSSL's SSL_read, and those
// OpenSSL sends after SSL_key_update are opened by TlsRecordReader, so the
// key schedule (RFC 8446 7.2) is the standard's, not only our own two ends
// agreeing. A KeyUpdate that requests one back is refused by name.
#include "common/tls_records.h"

#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <string>
#include <vector>

#include "common/data_tls.h"
#include "gtest/gtest.h"
#include "tests/testing/pattern.h"
#include "tests/testing/test_certificates.h"
#include "tests/testing/tls_contexts.h"

namespace zerostate {
namespace {

using testing::Pattern;

const testing::TestCertificates& Certificates() {
  static const testing::TestCertificates* certs = new testing::TestCertificates(
      absl::StrCat(::testing::TempDir(), "zerostate_tls_records_test.", getpid()));
  return *certs;
}

// A finished TLS 1.3 handshake between two OpenSSL ends of a socket pair
// (blocking), with the traffic secrets each end's keylog reported.
class TlsRecordsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const testing::TestCertificates& certs = Certificates();
    ASSERT_TRUE(certs.ok()) << certs.Log();
    auto contexts = testing::MutualTlsContexts(certs, /*kernel=*/false);
    ASSERT_TRUE(contexts.ok()) << contexts.status();
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds_), 0);
    server_ = SSL_new(contexts->server.get());
    client_ = SSL_new(contexts->client.get());
    ASSERT_TRUE(server_ != nullptr && client_ != nullptr);
    SSL_set_fd(server_, fds_[0]);
    SSL_set_fd(client_, fds_[1]);
    SSL_set_app_data(server_, &server_secrets_);
    SSL_set_app_data(client_, &client_secrets_);
    auto accepted = std::async(std::launch::async, [&] { return SSL_accept(server_); });
    ASSERT_EQ(SSL_connect(client_), 1);
    ASSERT_EQ(accepted.get(), 1);
    SSL_set_app_data(server_, nullptr);
    SSL_set_app_data(client_, nullptr);
  }

  void TearDown() override {
    SSL_free(server_);
    SSL_free(client_);
    close(fds_[0]);
    close(fds_[1]);
  }

  // What the client's TlsRecordReader opens of the server's records until
  // `n` bytes came, or its error.
  absl::StatusOr<std::string> ReadAtClient(TlsRecordReader& reader, size_t n) {
    std::string got(n, '\0');
    size_t at = 0;
    while (at < n) {
      absl::StatusOr<size_t> r = reader.Read(got.data() + at, n - at, n - at);
      if (!r.ok()) return r.status();
      at += *r;
      if (*r > 0) continue;
      bool closed = false;
      absl::StatusOr<bool> came = reader.Receive(fds_[1], &closed);
      if (!came.ok()) return came.status();
      if (!*came) {
        pollfd p{fds_[1], POLLIN, 0};
        poll(&p, 1, 10000);
      }
    }
    return got;
  }

  int fds_[2] = {-1, -1};
  SSL* server_ = nullptr;
  SSL* client_ = nullptr;
  TlsTrafficSecrets server_secrets_;
  TlsTrafficSecrets client_secrets_;
};

// 5 full records and a short one under a key of 2 records: 2 key updates
// between them, and OpenSSL reads every byte.
TEST_F(TlsRecordsTest, OurRecordsAndKeyUpdatesAreReadByOpenSsl) {
  auto key = TlsRecordKey::Make(client_, client_secrets_, /*send=*/true, /*records_per_key=*/2);
  ASSERT_TRUE(key.ok()) << key.status();
  const std::string data = Pattern(5 * kTlsRecordPlaintext + 100, 1);
  std::string sealed;
  iovec iov{const_cast<char*>(data.data()), data.size()};
  int at = 0;
  for (size_t left = data.size(); left > 0;) {
    if ((*key)->Due()) {
      std::string update(kTlsKeyUpdateRecord, '\0');
      ASSERT_TRUE((*key)->SealKeyUpdate(update.data()).ok());
      sealed += update;
    }
    const size_t n = std::min(left, kTlsRecordPlaintext);
    std::string record(n + kTlsRecordOverhead, '\0');
    ASSERT_TRUE((*key)->Seal(&iov, &at, n, record.data()).ok());
    sealed += record;
    left -= n;
  }
  EXPECT_EQ((*key)->updates(), 2u);
  auto written = std::async(std::launch::async, [&] {
    return write(fds_[1], sealed.data(), sealed.size()) == static_cast<ssize_t>(sealed.size());
  });
  std::string got(data.size(), '\0');
  for (size_t read = 0; read < got.size();) {
    int r = SSL_read(server_, got.data() + read, static_cast<int>(got.size() - read));
    ASSERT_GT(r, 0) << "SSL_read: " << TakeOpenSslErrors();
    read += static_cast<size_t>(r);
  }
  EXPECT_TRUE(written.get());
  EXPECT_TRUE(got == data);
}

// OpenSSL's own key updates (update_not_requested) between its writes are
// opened, and the records after each are opened under the next secret.
TEST_F(TlsRecordsTest, OpenSslsKeyUpdatesAreOpenedAndTheRecordsAfterThem) {
  auto key = TlsRecordKey::Make(client_, client_secrets_, /*send=*/false);
  ASSERT_TRUE(key.ok()) << key.status();
  TlsRecordReader reader(*std::move(key));
  const std::vector<std::string> pieces = {Pattern(40000, 2), Pattern(100, 3), Pattern(20000, 4)};
  std::string all;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (i > 0) {
      ASSERT_EQ(SSL_key_update(server_, SSL_KEY_UPDATE_NOT_REQUESTED), 1);
    }
    ASSERT_EQ(SSL_write(server_, pieces[i].data(), static_cast<int>(pieces[i].size())),
              static_cast<int>(pieces[i].size()));
    all += pieces[i];
  }
  absl::StatusOr<std::string> got = ReadAtClient(reader, all.size());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == all);
  EXPECT_EQ(reader.key_updates(), 2u);
}

// A KeyUpdate asking for one back is refused by name: the data plane's
// receiving thread does not send, and its peers never ask.
TEST_F(TlsRecordsTest, AKeyUpdateRequestingOneBackIsRefusedByName) {
  auto key = TlsRecordKey::Make(client_, client_secrets_, /*send=*/false);
  ASSERT_TRUE(key.ok()) << key.status();
  TlsRecordReader reader(*std::move(key));
  const std::string before = Pattern(1000, 5);
  ASSERT_EQ(SSL_write(server_, before.data(), static_cast<int>(before.size())), 1000);
  ASSERT_EQ(SSL_key_update(server_, SSL_KEY_UPDATE_REQUESTED), 1);
  ASSERT_EQ(SSL_write(server_, before.data(), 10), 10);
  absl::StatusOr<std::string> got = ReadAtClient(reader, before.size());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == before);
  absl::StatusOr<std::string> more = ReadAtClient(reader, 10);
  ASSERT_FALSE(more.ok());
  EXPECT_TRUE(absl::IsUnavailable(more.status())) << more.status();
  EXPECT_NE(more.status().message().find("update_requested"), std::string::npos) << more.status();
  EXPECT_EQ(reader.key_updates(), 0u);
}

}  // namespace
}  // namespace zerostate
