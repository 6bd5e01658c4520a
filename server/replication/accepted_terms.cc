#include "server/replication/accepted_terms.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace zerostate::server {

absl::Status AcceptedTerms::Admit(const std::string& job, uint32_t shard, const PrimaryTerm& term,
                                  const char* what) {
  if (term.epoch <= 0 || term.primary.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard ", shard, " of job '", job, "': a ", what, " carries the term of primary '",
        term.primary, "' at epoch ", term.epoch,
        "; a term names its primary and has an epoch above 0"));
  }
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = accepted_.try_emplace({job, shard}, term);
  if (inserted) return absl::OkStatus();
  const PrimaryTerm& newest = it->second;
  if (term.epoch > newest.epoch) {
    it->second = term;
    return absl::OkStatus();
  }
  if (term.epoch == newest.epoch && term.primary == newest.primary) return absl::OkStatus();
  const char* why = term.epoch < newest.epoch ? "a newer term" : "the same epoch under another name";
  return absl::AbortedError(absl::StrCat(
      "shard ", shard, " of job '", job, "': a ", what, " from primary ", term.primary,
      " (epoch ", term.epoch, ") is refused: this copy accepted primary ", newest.primary,
      " (epoch ", newest.epoch, "), ", why, "; the sender is no longer the shard's primary"));
}

std::optional<PrimaryTerm> AcceptedTerms::Accepted(const std::string& job, uint32_t shard) const {
  absl::MutexLock lock(&mu_);
  auto it = accepted_.find({job, shard});
  if (it == accepted_.end()) return std::nullopt;
  return it->second;
}

void AcceptedTerms::Forget(const std::string& job) {
  absl::MutexLock lock(&mu_);
  absl::erase_if(accepted_, [&](const auto& entry) { return entry.first.first == job; });
}

}  // namespace zerostate::server
