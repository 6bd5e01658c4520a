// The C API's handles (client/zerostate_c.h) and its status and buffer
// helpers, for C APIs built on the client's beside it into
// libzerostate_client.so (trainer/engine/c_api.cc: pushes on a zs_job).
// Not for trainers: they see only the opaque handles.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "client/client.h"

namespace prometheus {
class Registry;
}

struct zs_client {
  std::unique_ptr<zerostate::client::Client> client;
  std::shared_ptr<prometheus::Registry> metrics;  // its byte counters (zs_client_bytes)
};
struct zs_job {
  std::unique_ptr<zerostate::client::JobClient> job;
};
struct zs_ticket {
  zerostate::client::Ticket ticket;
};

namespace zerostate::client {

// The status's code (gRPC numbering); `*error` (if non-null) receives a
// malloc'd copy of its message, or NULL when OK.
int ReportStatus(const absl::Status& status, char** error);

// A malloc'd, NUL-terminated copy of `s` (release with zs_free_string).
char* CopyCString(const std::string& s);

// INVALID_ARGUMENT naming `arg` when [begin, end) of `dtype` (a C API
// ZS_DTYPE_*) needs more than `bytes`.
absl::Status CheckBufferBytes(const char* arg, uint64_t begin, uint64_t end, int dtype,
                              size_t bytes);

}  // namespace zerostate::client
