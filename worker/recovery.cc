#include "worker/recovery.h"

#include <cstdio>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "trainer/engine/recovery_verdict.h"
#include "worker/checkpoint_pruner.h"

namespace zerostate::worker {
namespace {

constexpr char kFailed[] = "failed: ";  // no rollback; why (the rank's own failure follows)
constexpr char kLost[] = "lost: ";      // no rollback: a server lost the job; the whole story

// `failure` with why it was not rolled back.
absl::Status NotRolledBack(const absl::Status& failure, absl::string_view why) {
  return absl::Status(failure.code(),
                      absl::StrCat(failure.message(), "; no rollback: ", why));
}

}  // namespace

absl::Status ValidateRecoveryOptions(const RecoveryOptions& o) {
  if (o.keep_checkpoints < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--keep_checkpoints: ", o.keep_checkpoints, " must be >= 0 (0 keeps every checkpoint)"));
  }
  if (o.checkpoint_every == 0) return absl::OkStatus();
  if (o.checkpoint_dir.empty() || o.checkpoint_dir[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "--checkpoint_dir: '", o.checkpoint_dir,
        "' must be an absolute directory every server reaches (--checkpoint_every is ",
        o.checkpoint_every, ")"));
  }
  return absl::OkStatus();
}

Recovery::Recovery(client::Client* client, const Topology& topo, std::string scope,
                   RecoveryOptions options)
    : client_(client), topo_(topo), scope_(std::move(scope)), options_(std::move(options)) {}

bool Recovery::CheckpointDue(uint64_t version, uint64_t start_version) const {
  return enabled() && (version == start_version || version % options_.checkpoint_every == 0);
}

absl::Status Recovery::AfterStep(client::JobClient* job, uint64_t version,
                                 uint64_t start_version) {
  if (topo_.rank() != 0 || !CheckpointDue(version, start_version)) return absl::OkStatus();
  auto path = job->Checkpoint(version, options_.checkpoint_dir);
  if (!path.ok()) return path.status();
  last_checkpoint_ = *path;
  last_checkpoint_version_ = version;
  Prune(*job, *path, version);
  return absl::OkStatus();
}

void Recovery::Prune(const client::JobClient& job, const std::string& written,
                     uint64_t version) const {
  if (options_.keep_checkpoints == 0) return;
  const std::string& job_id = job.spec().job_id();
  // The servers name checkpoints <root>/<job_id>/v<version>; prune only
  // when they wrote where this process will look.
  const std::string expected = absl::StrCat(options_.checkpoint_dir, "/", job_id, "/v", version);
  if (written != expected) {
    std::fprintf(stderr, "zerostate-worker rank 0: not pruning checkpoints: the servers wrote %s, "
                 "not %s\n", written.c_str(), expected.c_str());
    return;
  }
  PruneReport report = PruneCheckpoints(options_.checkpoint_dir, job_id, version,
                                        static_cast<uint64_t>(options_.keep_checkpoints));
  for (const std::string& path : report.deleted) {
    std::fprintf(stderr, "zerostate-worker rank 0: deleted old checkpoint %s (--keep_checkpoints=%lld)\n",
                 path.c_str(), static_cast<long long>(options_.keep_checkpoints));
  }
  for (const std::string& problem : report.problems) {
    std::fprintf(stderr, "zerostate-worker rank 0: pruning old checkpoints: %s\n", problem.c_str());
  }
}

absl::StatusOr<std::string> Recovery::LostShard(client::JobClient* job) const {
  auto loss = job->Loss(options_.server_wait);
  if (!loss.ok()) return loss.status();
  return loss->account;
}

absl::StatusOr<std::vector<std::string>> Recovery::Meet(const std::string& what,
                                                        const std::string& value) {
  return client_->Rendezvous(scope_, absl::StrCat("recover/", epoch_, "/", what), topo_.rank(),
                             topo_.world(), value);
}

std::string Recovery::Decide(client::JobClient* job) {
  // A lost or silent server's job is deleted on the servers that answer,
  // which wakes every rank still waiting on it there (see recovery.h).
  auto loss = job->EndIfLost(options_.server_wait);
  if (!loss.ok()) return absl::StrCat(kFailed, "the servers cannot be asked: ", loss.status().ToString());
  // The rule is the trainer engine's, as zerostate.torch's.
  const trainer::RecoveryVerdict v = trainer::DecideRecovery(
      *loss, job->spec().job_id(), last_checkpoint_,
      {absl::StrCat("--checkpoint_every=", options_.checkpoint_every), "--checkpoint_every=N"});
  if (v.roll_back) return "";
  return absl::StrCat(v.lost ? kLost : kFailed, v.why);
}

void Recovery::Prepare(client::JobClient* job) {
  if (topo_.rank() == 0 && !verdict_.has_value()) verdict_ = Decide(job);
}

absl::StatusOr<RolledBack> Recovery::RollBack(client::JobClient* job, const absl::Status& failure) {
  ++epoch_;
  const bool coordinator = topo_.rank() == 0;
  if (coordinator) Prepare(job);
  std::string verdict = coordinator ? *std::exchange(verdict_, std::nullopt) : "";
  auto entered = Meet("enter", "");
  if (!entered.ok()) return NotRolledBack(failure, entered.status().ToString());
  std::unique_ptr<client::JobClient> restored;
  if (coordinator && verdict.empty()) {
    auto r = client_->RestoreJob(last_checkpoint_);
    if (r.ok()) {
      restored = *std::move(r);
      verdict = absl::StrCat(last_checkpoint_version_);
      std::fprintf(stderr, "zerostate-worker rank 0: %s; restored %s on every server\n",
                   failure.ToString().c_str(), last_checkpoint_.c_str());
    } else {
      verdict = absl::StrCat(kFailed, "restoring ", last_checkpoint_, ": ", r.status().ToString());
    }
  }
  auto go = Meet("go", coordinator ? verdict : "");
  if (!go.ok()) return NotRolledBack(failure, go.status().ToString());
  RolledBack back;
  const std::string& answer = go->empty() ? "" : (*go)[0];
  if (absl::StartsWith(answer, kLost)) {
    // The coordinator's account is the story; this rank's own error (say,
    // the restarted server not knowing its token) would only mislead.
    return absl::AbortedError(absl::StrCat("step failed: ", absl::StripPrefix(answer, kLost)));
  }
  if (!absl::SimpleAtoi(answer, &back.version)) {
    return NotRolledBack(failure, absl::StripPrefix(answer, kFailed));
  }
  if (!coordinator) {
    auto attached = client_->AttachJob(job->spec().job_id());
    if (!attached.ok()) return NotRolledBack(failure, attached.status().ToString());
    restored = *std::move(attached);
  }
  back.job = std::move(restored);
  back.epoch = epoch_;
  return back;
}

}  // namespace zerostate::worker
