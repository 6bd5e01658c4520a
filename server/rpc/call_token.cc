#include "server/rpc/call_token.h"

#include "server/core/auth_token.h"

namespace zerostate::server {

absl::StatusOr<std::string> TokenOf(const grpc::ServerContextBase& ctx) {
  const auto& metadata = ctx.client_metadata();
  auto it = metadata.find(kJobTokenMetadata);
  if (it == metadata.end()) return std::string();
  std::string token(it->second.data(), it->second.size());
  if (absl::Status s = CheckTokenForm(token); !s.ok()) return s;
  return token;
}

}  // namespace zerostate::server
