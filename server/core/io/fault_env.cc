#include "server/core/io/fault_env.h"

#include <cerrno>
#include <deque>

#include "absl/container/flat_hash_map.h"

namespace zerostate::server::io {
namespace {

class FaultQueue final : public IoQueue {
 public:
  FaultQueue(FaultEnv* env, std::unique_ptr<IoQueue> base) : env_(env), base_(std::move(base)) {}

  int depth() const override { return base_->depth(); }
  int in_flight() const override {
    return base_->in_flight() + static_cast<int>(failed_.size());
  }

  absl::Status Submit(const IoRequest& r) override {
    std::optional<FaultRule> rule = env_->Decide(r);
    std::optional<FaultKind> fault;
    if (rule.has_value()) fault = rule->kind;
    if (fault == FaultKind::kDelay) {
      if (rule->delay) rule->delay();  // outside FaultEnv's lock: other queues go on
      fault.reset();
    }
    if (fault == FaultKind::kEio || fault == FaultKind::kEnospc) {
      failed_.push_back(IoCompletion{r, fault == FaultKind::kEio ? -EIO : -ENOSPC});
      return absl::OkStatus();
    }
    if (auto s = base_->Submit(r); !s.ok()) return s;
    if (fault.has_value() && r.op == IoOp::kRead) after_[r.buf] = *fault;
    return absl::OkStatus();
  }

  absl::StatusOr<IoCompletion> Wait() override {
    if (!failed_.empty()) {
      IoCompletion done = failed_.front();
      failed_.pop_front();
      return done;
    }
    auto done = base_->Wait();
    if (!done.ok()) return done;
    auto it = after_.find(done->req.buf);
    if (it == after_.end()) return done;
    FaultKind kind = it->second;
    after_.erase(it);
    if (done->result != done->req.len) return done;  // already failed for real
    if (kind == FaultKind::kShortRead) {
      done->result = done->req.len / 2;
    } else {
      static_cast<unsigned char*>(done->req.buf)[done->req.len / 3] ^= 0x5A;
    }
    return done;
  }

 private:
  FaultEnv* const env_;
  const std::unique_ptr<IoQueue> base_;
  std::deque<IoCompletion> failed_;                   // injected errors, not yet reaped
  absl::flat_hash_map<void*, FaultKind> after_;       // faults applied on completion
};

bool Matches(const FaultRule& rule, const IoRequest& r) {
  if (rule.op.has_value() && *rule.op != r.op) return false;
  return rule.path_contains.empty() ||
         r.file->path().find(rule.path_contains) != std::string::npos;
}

}  // namespace

void FaultEnv::AddRule(FaultRule rule) {
  absl::MutexLock lock(&mu_);
  rules_.push_back(Armed{std::move(rule)});
}

void FaultEnv::ClearRules() {
  absl::MutexLock lock(&mu_);
  rules_.clear();
}

uint64_t FaultEnv::faults_injected() const {
  absl::MutexLock lock(&mu_);
  return injected_;
}

std::optional<FaultRule> FaultEnv::Decide(const IoRequest& r) {
  absl::MutexLock lock(&mu_);
  for (Armed& a : rules_) {
    if (!Matches(a.rule, r)) continue;
    uint64_t n = a.seen++;
    if (n >= a.rule.skip && n - a.rule.skip < a.rule.times) {
      ++injected_;
      return a.rule;
    }
  }
  return std::nullopt;
}

absl::StatusOr<std::unique_ptr<IoQueue>> FaultEnv::NewQueue(int depth) {
  auto base = base_->NewQueue(depth);
  if (!base.ok()) return base.status();
  return std::make_unique<FaultQueue>(this, *std::move(base));
}

}  // namespace zerostate::server::io
