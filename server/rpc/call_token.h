// The job token a gRPC call carries in its metadata (kJobTokenMetadata,
// server/core/auth_token.h). Thread-safe: a pure function.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/server_context.h"

namespace zerostate::server {

// The token the call carries ("" when none). Errors: UNAUTHENTICATED when
// it is malformed (CheckTokenForm); the message never contains the token.
[[nodiscard]] absl::StatusOr<std::string> TokenOf(const grpc::ServerContextBase& ctx);

}  // namespace zerostate::server
