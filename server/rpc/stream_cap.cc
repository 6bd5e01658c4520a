#include "server/rpc/stream_cap.h"

#include "absl/strings/str_cat.h"

namespace zerostate::server {

StreamCap::StreamCap(int max_streams, ServerMetrics& metrics)
    : max_(max_streams), metrics_(metrics) {
  metrics_.SetGrpcStreams(0);
}

absl::Status StreamCap::Check(int max_streams) {
  if (max_streams >= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "max_grpc_streams: ", max_streams, " streams; at least 1 must be served at once"));
}

absl::StatusOr<StreamCap::Slot> StreamCap::Take() {
  {
    absl::MutexLock lock(&mu_);
    if (open_ < max_) {
      metrics_.SetGrpcStreams(++open_);
      return Slot(this);
    }
  }
  metrics_.RecordGrpcStreamRefused();
  return absl::ResourceExhaustedError(
      absl::StrCat("this server already serves ", max_,
                   " chunk streams, its cap (--max_grpc_streams); try again later"));
}

void StreamCap::Slot::Release() {
  if (cap_ == nullptr) return;
  absl::MutexLock lock(&cap_->mu_);
  cap_->metrics_.SetGrpcStreams(--cap_->open_);
  cap_ = nullptr;
}

}  // namespace zerostate::server
