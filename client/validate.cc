#include "client/validate.h"

#include "absl/strings/str_cat.h"

namespace zerostate::client {
namespace {

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

absl::Status ValidateDType(v1::DType dtype, v1::DType job_dtype, const char* job_field) {
  if (DTypeSize(dtype) == 0) {
    return Invalid(absl::StrCat("dtype: ", static_cast<int>(dtype), " is not a wire dtype"));
  }
  if (dtype != v1::DTYPE_FP32 && dtype != job_dtype) {
    return Invalid(absl::StrCat("dtype: ", DTypeName(dtype), " is neither fp32 nor the job's ",
                                job_field, " ", DTypeName(job_dtype)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateOptions(const ClientOptions& o) {
  if (o.servers.empty()) return Invalid("servers: empty server list");
  for (size_t i = 0; i < o.servers.size(); ++i) {
    if (o.servers[i].empty()) return Invalid(absl::StrCat("servers[", i, "]: empty address"));
  }
  if (o.channels_per_server < 1) return Invalid("channels_per_server: must be >= 1");
  if (o.streams_per_server < 1) return Invalid("streams_per_server: must be >= 1");
  if (o.userspace_tls_streams_per_server < 0) {
    return Invalid("userspace_tls_streams_per_server: must be >= 0");
  }
  if (o.same_host_streams_per_server < 0) {
    return Invalid("same_host_streams_per_server: must be >= 0");
  }
  if (o.chunk_bytes < 256 || o.chunk_bytes > (64u << 20)) {
    return Invalid(absl::StrCat("chunk_bytes: ", o.chunk_bytes, " outside [256, 64 MiB]"));
  }
  if (o.max_bytes_in_flight < o.chunk_bytes) {
    return Invalid("max_bytes_in_flight: smaller than chunk_bytes");
  }
  if (o.rpc_timeout.count() <= 0) return Invalid("rpc_timeout: must be > 0");
  if (o.max_attempts < 1) return Invalid("max_attempts: must be >= 1");
  if (o.unavailable_wait.count() < 0) return Invalid("unavailable_wait: must be >= 0");
  if (o.keepalive_time.count() != 0 && o.keepalive_time.count() < 1000) {
    return Invalid(absl::StrCat("keepalive_time: ", o.keepalive_time.count(),
                                " ms; 0 (off) or at least 1000 ms (servers refuse pings more "
                                "often)"));
  }
  if (o.keepalive_time.count() != 0 && o.keepalive_timeout.count() <= 0) {
    return Invalid("keepalive_timeout: must be > 0 with keepalive_time");
  }
  if (o.initial_backoff.count() < 0 || o.max_backoff < o.initial_backoff) {
    return Invalid("initial_backoff/max_backoff: need 0 <= initial_backoff <= max_backoff");
  }
  if (o.threads < 0) return Invalid("threads: must be >= 0");
  if (!o.data_servers.empty() && o.data_servers.size() != o.servers.size()) {
    return Invalid(absl::StrCat("data_servers: ", o.data_servers.size(), " addresses for ",
                                o.servers.size(), " servers"));
  }
  return absl::OkStatus();
}

absl::Status ValidateRange(const Layout& layout, Range elems) {
  if (elems.begin > elems.end) {
    return Invalid(absl::StrCat("elems: begin ", elems.begin, " > end ", elems.end));
  }
  if (elems.end > layout.total_elems) {
    return Invalid(absl::StrCat("elems: [", elems.begin, ", ", elems.end,
                                ") is outside the layout's ", layout.total_elems, " elements"));
  }
  return absl::OkStatus();
}

absl::Status ValidatePush(const v1::JobSpec& spec, const Layout& layout, uint32_t node,
                          Range elems, const void* data, v1::DType dtype) {
  if (node >= spec.num_nodes()) {
    return Invalid(
        absl::StrCat("node: ", node, " is out of range [0, ", spec.num_nodes(), ")"));
  }
  if (absl::Status s = ValidateRange(layout, elems); !s.ok()) return s;
  if (data == nullptr && !elems.empty()) return Invalid("data: null buffer");
  return ValidateDType(dtype, spec.grad_dtype(), "grad_dtype");
}

absl::Status ValidateGather(const v1::JobSpec& spec, const Layout& layout, Range elems,
                            const void* out, v1::DType dtype) {
  if (absl::Status s = ValidateRange(layout, elems); !s.ok()) return s;
  if (out == nullptr && !elems.empty()) return Invalid("out: null buffer");
  return ValidateDType(dtype, spec.weight_dtype(), "weight_dtype");
}

}  // namespace zerostate::client
