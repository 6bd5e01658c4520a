#include "server/core/block.h"

#include "absl/strings/str_cat.h"

namespace zerostate::server {
namespace {

const char* NameOf(Block::Speculation s) {
  switch (s) {
    case Block::Speculation::kNone:
      return "no speculation";
    case Block::Speculation::kQueued:
      return "a speculation queued";
    case Block::Speculation::kRunning:
      return "a speculation running";
    case Block::Speculation::kDone:
      return "a speculation done";
  }
  return "?";
}

}  // namespace

absl::Status Block::Refused(const char* transition) const {
  return absl::FailedPreconditionError(
      absl::StrCat(transition, ": block ", index, " at version ", version, " is ",
                   stepping_ ? "being stepped" : "not being stepped", ", with ",
                   NameOf(speculation_)));
}

absl::Status Block::QueueSpeculation() {
  if (stepping_ || speculation_ != Speculation::kNone) return Refused("QueueSpeculation");
  speculation_ = Speculation::kQueued;
  return absl::OkStatus();
}

absl::Status Block::CancelSpeculation() {
  if (speculation_ != Speculation::kQueued) return Refused("CancelSpeculation");
  speculation_ = Speculation::kNone;
  return absl::OkStatus();
}

absl::Status Block::BeginSpeculation() {
  if (stepping_ || speculation_ != Speculation::kQueued) return Refused("BeginSpeculation");
  speculation_ = Speculation::kRunning;
  return absl::OkStatus();
}

absl::Status Block::FinishSpeculation(const StepParams& params) {
  if (speculation_ != Speculation::kRunning) return Refused("FinishSpeculation");
  speculation_ = Speculation::kDone;
  spec_params_ = params;
  return absl::OkStatus();
}

absl::Status Block::DropSpeculation() {
  if (speculation_ == Speculation::kRunning) return Refused("DropSpeculation");
  speculation_ = Speculation::kNone;
  return absl::OkStatus();
}

absl::Status Block::BeginStep() {
  if (stepping_ || speculation_ == Speculation::kRunning) return Refused("BeginStep");
  stepping_ = true;
  return absl::OkStatus();
}

absl::Status Block::AbortStep() {
  if (!stepping_) return Refused("AbortStep");
  stepping_ = false;
  return absl::OkStatus();
}

absl::Status Block::Commit() {
  if (speculation_ == Speculation::kRunning) return Refused("Commit");
  speculation_ = Speculation::kNone;
  ++version;
  stepping_ = false;
  acc.Reset();
  return absl::OkStatus();
}

absl::Status Block::Restore(uint64_t to) {
  if (stepping_ || speculation_ == Speculation::kRunning) return Refused("Restore");
  speculation_ = Speculation::kNone;
  version = to;
  acc.Reset();
  ForgetStats();
  return absl::OkStatus();
}

absl::Status Block::PinSum() {
  if (!acc.complete()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "PinSum: block ", index, " at version ", version, " has no complete sum to pin"));
  }
  ++sum_pins_;
  return absl::OkStatus();
}

absl::Status Block::UnpinSum() {
  if (sum_pins_ == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("UnpinSum: block ", index, " at version ", version, "'s sum is not pinned"));
  }
  --sum_pins_;
  return absl::OkStatus();
}

std::string_view Block::PinnedSum() const {
  const float* sum = acc.sum();
  if (sum == nullptr) return {};
  return std::string_view(reinterpret_cast<const char*>(sum), size_t{required} * sizeof(float));
}

}  // namespace zerostate::server
