// Failover of a replicated job's shards (docs/reliability.md,
// "Replicated shards"): when the server of a shard is gone, the client
// moves the shard to the backup that takes it over (the backup claims it
// through the servers' membership when asked for it), sends that backup
// this client's pushes of the step in progress (the primary had them, the
// backup only ever got whole steps), and runs the interrupted call again.
// A copy that does not answer where this client dials it may have been
// replaced from another address: the other servers say where it is now
// (Relocate), and its connection moves there.
// Versions make every repeated push and Step idempotent, so the step is
// applied exactly once.
#include <algorithm>
#include <chrono>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/job_client_impl.h"
#include "common/shard_map.h"
#include "common/timeline.h"

namespace zerostate::client {
namespace {

// The answers of a server that died, restarted empty or is cut off.
bool MayBeGone(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsAborted(s) ||
         absl::IsNotFound(s) || absl::IsUnauthenticated(s);
}

}  // namespace

void JobClient::Impl::Journal(const PushCall& call) {
  if (spec_.replicas() == 0) return;
  absl::MutexLock lock(&journal_mu_);
  if (call.step != journal_step_) {
    journal_.clear();
    journal_step_ = call.step;
  }
  journal_.push_back(call);
}

absl::Status JobClient::Impl::OnShard(int shard, absl::FunctionRef<absl::Status(int)> fn) {
  absl::Status s;
  // Each failover moves the shard to another of its k + 1 copies.
  for (uint32_t tries = 0; tries <= spec_.replicas() + 1; ++tries) {
    const int server = ServerOf(job_, shard);
    s = fn(server);
    if (s.ok() || spec_.replicas() == 0 || !MayBeGone(s)) return s;
    if (absl::Status moved = FailOver(shard, server, s); !moved.ok()) return moved;
  }
  return s;
}

namespace {

// One JobStatus attempt for `shard` on `server`, answered within `wait`;
// with `check_incarnation`, ABORTED when the server restarted since
// (CheckIncarnation).
// One JobStatus call of `req` to `server`, answered within `wait`, with
// the job's token.
absl::Status AskStatus(Client::Impl& client, int server, const v1::JobStatusRequest& req,
                       absl::Duration wait, v1::JobStatusResponse* resp) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + wait));
  const std::string token = client.job_token().Get();
  if (!token.empty()) ctx.AddMetadata(kJobTokenMetadata, token);
  return FromGrpc(client.server(server).NextStub()->JobStatus(&ctx, req, resp));
}

absl::Status QuickStatus(Client::Impl& client, const JobContext& job, int server, int shard,
                         absl::Duration wait, v1::JobStatusResponse* resp,
                         bool check_incarnation = true) {
  v1::JobStatusRequest req;
  req.set_job_id(job.job_id);
  req.set_shard(shard);
  absl::Status s = AskStatus(client, server, req, wait, resp);
  return s.ok() && check_incarnation ? CheckIncarnation(job, server, resp->incarnation()) : s;
}

// Where server `server` of the job is dialled now, asked of the other
// servers that are not silent (JobStatusRequest.locate: any server holding
// the job answers, the first answer counts): when a replacement of it
// listens elsewhere, its connection moves there (ServerConn::Repoint).
// True when it moved.
bool Relocate(Client::Impl& client, const JobContext& job, int server, absl::Duration wait) {
  for (int other = 0; other < client.num_servers(); ++other) {
    if (other == server || client.server(other).SilentSince().has_value()) continue;
    v1::JobStatusRequest req;
    req.set_job_id(job.job_id);
    req.set_locate(true);
    v1::JobStatusResponse resp;
    if (!AskStatus(client, other, req, wait, &resp).ok()) continue;
    if (resp.server_addresses_size() <= server) return false;  // a server that cannot tell
    const std::string& now = resp.server_addresses(server);
    return !now.empty() && client.server(server).Repoint(now);
  }
  return false;
}

}  // namespace

absl::Status JobClient::Impl::FailOver(int shard, int from, const absl::Status& cause) {
  absl::MutexLock lock(&failover_mu_);
  if (ServerOf(job_, shard) != from) return absl::OkStatus();  // another call moved it
  Timeline::Record("failover_begin", shard, from);
  const auto& hook = client_->options().before_failover_probe;
  if (hook) hook(shard, from);
  const absl::Duration wait = absl::FromChrono(client_->options().failover_wait);
  // A silent server (its keepalive unanswered: a host cut off, a hung
  // process) is not asked: the probe would only wait out its deadline.
  v1::JobStatusResponse probe;
  if (!client_->server(from).SilentSince().has_value() &&
      QuickStatus(*client_, job_, from, shard, wait, &probe).ok()) {
    // Still there, and the shard's primary now (the probe claims it: a
    // JobStatus for the shard is served as any call). UNAVAILABLE was its
    // "not now" (fenced until it joined etcd again on a new lease, after
    // its old one expired): the caller runs the call there again. Any
    // other answer stands.
    return absl::IsUnavailable(cause) ? absl::OkStatus() : cause;
  }
  Timeline::Record("failover_probed", shard, from);
  std::vector<PushCall> pushes;
  uint64_t step = 0;
  {
    absl::MutexLock journal(&journal_mu_);
    pushes = journal_;
    step = journal_step_;
  }
  const int servers = client_->num_servers();
  // Each copy's last answer that did not take the shard, for the error.
  absl::flat_hash_map<uint32_t, std::string> answers;
  // Every copy's server, `from` last: the current holder of the shard's
  // claim, whoever it is, answers for it (a server that took the shard
  // over on its own, or `from` itself once it rejoined the membership
  // after an etcd outage); the others answer "not primary".
  std::vector<uint32_t> copies = ReplicaServers(servers, shard, spec_.replicas());
  std::stable_partition(copies.begin(), copies.end(),
                        [from](uint32_t s) { return static_cast<int>(s) != from; });
  // A shard of no block (more servers than blocks) holds no state a copy
  // could be behind on: every copy that answers for it may take it, at
  // version 0, and nothing is pushed to it again.
  const bool empty =
      ShardBlocks(layout_.num_blocks(), static_cast<uint32_t>(servers), shard).empty();
  // The first copy that answers for the shard takes it; none: nullopt.
  auto take_over = [&]() -> std::optional<absl::Status> {
    for (uint32_t to : copies) {
      v1::JobStatusResponse resp;
      // Nor is a silent copy, until its channel answers again.
      auto ask = [&] {
        absl::Status st = client_->server(static_cast<int>(to)).cutter()->Check();
        if (!st.ok()) return st;
        return QuickStatus(*client_, job_, static_cast<int>(to), shard, wait, &resp,
                           /*check_incarnation=*/false);
      };
      absl::Status st = ask();
      // Gone from the address this client knows: a replacement of it may
      // listen elsewhere.
      if (MayBeGone(st) && Relocate(*client_, job_, static_cast<int>(to), wait)) st = ask();
      if (!st.ok()) {
        answers[to] = std::string(st.message());
        continue;
      }
      const uint64_t version = resp.min_version();
      // A backup that restarted since this client attached holds the shard
      // only if its primary caught it up (ReplicaService.Seed): then it is
      // at the step in progress, never at 0 (a copy registered again and
      // not caught up). Its calls then carry its new incarnation.
      const bool restarted = resp.incarnation() != job_.incarnations->Of(static_cast<int>(to));
      if (!empty && restarted && (version == 0 || version < step)) {
        answers[to] = std::string(
            CheckIncarnation(job_, static_cast<int>(to), resp.incarnation()).message());
        continue;
      }
      if (!empty && !pushes.empty() && version < step) {
        return absl::AbortedError(absl::StrCat(
            "shard ", shard, " of job ", spec_.job_id(), ": its server ",
            client_->server(from).address(), " is gone and its backup ",
            client_->server(to).address(), " is at version ", version, ", behind step ", step,
            " in progress: it missed acknowledged steps (it was lost as a backup earlier); "
            "restore the job from a checkpoint"));
      }
      if (restarted) {
        // Its new process listens for the data plane on another port.
        job_.incarnations->Set(static_cast<int>(to), resp.incarnation());
        job_.data->Set(static_cast<int>(to),
                       DataPool(client_->options(), static_cast<int>(to),
                                client_->server(static_cast<int>(to)).address(), resp.data_port(),
                                resp.incarnation(), client_->server(static_cast<int>(to)).cutter()));
      }
      job_.routes->Move(shard, from, static_cast<int>(to));
      Timeline::Record("failover_moved", shard, to);
      if (empty || pushes.empty() || version > step) return absl::OkStatus();  // applied there
      return PushAgain(shard, pushes);
    }
    return std::nullopt;
  };
  // A backup can take the shard only once the membership let the dead
  // primary's claim go (etcd: its lease's TTL), and none can during an
  // etcd outage (every server fenced): asked again until then.
  const auto& o = client_->options();
  const absl::Time give_up =
      absl::Now() +
      (o.unavailable_wait.count() > 0 ? absl::FromChrono(o.unavailable_wait) : absl::Seconds(60));
  while (true) {
    if (std::optional<absl::Status> done = take_over(); done.has_value()) return *done;
    if (absl::Now() >= give_up) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::UnavailableError(
      absl::StrCat("shard ", shard, " of job ", spec_.job_id(), ": its server ",
                   client_->server(from).address(), " is gone (", cause.message(),
                   ") and none of its copies answered for it (",
                   absl::StrJoin(copies, "; ",
                                 [&](std::string* out, uint32_t c) {
                                   absl::StrAppend(out, client_->server(c).address(), ": ",
                                                   answers[c]);
                                 }),
                   ")"));
}

absl::Status JobClient::Impl::PushAgain(int shard, const std::vector<PushCall>& pushes) {
  // The call's own streams of the shard: the same pieces as its first
  // sending (an int8 push resends the bytes it encoded then).
  for (const PushCall& call : pushes) {
    for (const StreamPlan& plan : Plans(call.elems, PlanWire(call))) {
      if (plan.shard != static_cast<uint32_t>(shard)) continue;
      auto ticket = std::make_shared<Ticket::State>(1);
      ticket->Done(RunPushStream(job_, call, plan, ticket));
      if (absl::Status done = ticket->Wait(); !done.ok()) return done;
    }
  }
  return absl::OkStatus();
}

}  // namespace zerostate::client
