// Conversion between absl::Status (used everywhere inside) and grpc::Status
// (only at the RPC edge). Codes map one to one; messages pass through.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace zerostate {

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

[[nodiscard]] inline absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

}  // namespace zerostate
