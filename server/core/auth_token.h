// Per-job credentials: the token a job is registered with, the form a
// caller's token must have (the gRPC edge reads it from a call's metadata,
// server/rpc/call_token.h), and the form the server keeps (a SHA-256 digest,
// never the token itself). Thread-safe: pure functions.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zerostate::server {

// The metadata entry every call of a job carries its token in.
inline constexpr char kJobTokenMetadata[] = "zerostate-job-token";
// Bounds on a token a caller chooses (printable ASCII, no spaces).
inline constexpr size_t kMinTokenChars = 32;
inline constexpr size_t kMaxTokenChars = 256;

// A token as the server stores it: SHA-256 of the token (32 bytes), or ""
// for "no token".
using TokenHash = std::string;

// 256 bits from the kernel's CSPRNG (getrandom), as 64 hex digits.
// Errors: INTERNAL when the kernel gives no randomness.
[[nodiscard]] absl::StatusOr<std::string> GenerateToken();

// OK when `token` (not "") has a token's form. Errors: UNAUTHENTICATED
// when it is malformed (length out of [kMinTokenChars, kMaxTokenChars] or
// a character outside '!'..'~'); the message never contains the token.
[[nodiscard]] absl::Status CheckTokenForm(absl::string_view token);

// SHA-256 of `token`; "" for "".
TokenHash HashToken(absl::string_view token);

// Compares two hashes in time independent of where they differ.
bool SameToken(const TokenHash& a, const TokenHash& b);

}  // namespace zerostate::server
