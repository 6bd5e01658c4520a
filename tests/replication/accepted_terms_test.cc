// The backups' rule for primary terms (server/replication/accepted_terms.h):
// a message of a term older than the newest accepted for its shard is
// refused naming both terms, a newer one is accepted and remembered, and a
// refusal changes nothing.
#include "server/replication/accepted_terms.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace zerostate::server {
namespace {

void ExpectHas(const absl::Status& s, const std::string& part) {
  EXPECT_NE(std::string(s.message()).find(part), std::string::npos)
      << "no '" << part << "' in: " << s;
}

TEST(AcceptedTermsTest, AnOlderTermIsRefusedNamingBothANewerOneIsRemembered) {
  AcceptedTerms terms;
  EXPECT_FALSE(terms.Accepted("j", 0).has_value());
  ASSERT_TRUE(terms.Admit("j", 0, {"a:1", 5}, "step").ok());
  ASSERT_TRUE(terms.Admit("j", 0, {"a:1", 5}, "step").ok()) << "the same term again";
  ASSERT_TRUE(terms.Admit("j", 0, {"b:2", 9}, "step").ok()) << "a newer term";
  absl::Status old = terms.Admit("j", 0, {"a:1", 5}, "catch-up");
  EXPECT_TRUE(absl::IsAborted(old)) << old;
  ExpectHas(old, "shard 0 of job 'j': a catch-up from primary a:1 (epoch 5) is refused");
  ExpectHas(old, "this copy accepted primary b:2 (epoch 9), a newer term");
  auto accepted = terms.Accepted("j", 0);
  ASSERT_TRUE(accepted.has_value());
  EXPECT_EQ(accepted->primary, "b:2");
  EXPECT_EQ(accepted->epoch, 9);
  // Other shards and jobs have terms of their own.
  EXPECT_TRUE(terms.Admit("j", 1, {"a:1", 5}, "step").ok());
  EXPECT_TRUE(terms.Admit("k", 0, {"a:1", 5}, "step").ok());
}

TEST(AcceptedTermsTest, TheSameEpochUnderAnotherNameIsRefused) {
  AcceptedTerms terms;
  ASSERT_TRUE(terms.Admit("j", 0, {"a:1", 5}, "step").ok());
  absl::Status other = terms.Admit("j", 0, {"b:2", 5}, "step's sum");
  EXPECT_TRUE(absl::IsAborted(other)) << other;
  ExpectHas(other, "the same epoch under another name");
  EXPECT_EQ(terms.Accepted("j", 0)->primary, "a:1");
}

TEST(AcceptedTermsTest, BadTermsAreRefusedNamingWhatIsWrongAndNothingIsRemembered) {
  AcceptedTerms terms;
  for (const PrimaryTerm& bad : {PrimaryTerm{"a:1", 0}, PrimaryTerm{"a:1", -3}, PrimaryTerm{"", 4}}) {
    absl::Status s = terms.Admit("j", 0, bad, "step");
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    ExpectHas(s, "a term names its primary and has an epoch above 0");
  }
  EXPECT_FALSE(terms.Accepted("j", 0).has_value());
}

TEST(AcceptedTermsTest, ForgetDropsOnlyThatJobsTerms) {
  AcceptedTerms terms;
  ASSERT_TRUE(terms.Admit("j", 0, {"b:2", 9}, "step").ok());
  ASSERT_TRUE(terms.Admit("k", 0, {"b:2", 9}, "step").ok());
  terms.Forget("j");
  EXPECT_FALSE(terms.Accepted("j", 0).has_value());
  EXPECT_TRUE(terms.Admit("j", 0, {"a:1", 5}, "step").ok()) << "a job registered again";
  EXPECT_TRUE(absl::IsAborted(terms.Admit("k", 0, {"a:1", 5}, "step")));
}

// Admissions race from many threads (a primary's lanes and its ApplyStep,
// a catch-up): the newest epoch wins, whatever the order.
TEST(AcceptedTermsTest, ConcurrentAdmissionsKeepTheNewestEpoch) {
  AcceptedTerms terms;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&terms, t] {
      for (int64_t e = 1; e <= 200; ++e) {
        (void)terms.Admit("j", 0, {"p", e * 8 + t}, "step");
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(terms.Accepted("j", 0)->epoch, 200 * 8 + 7);
}

}  // namespace
}  // namespace zerostate::server
