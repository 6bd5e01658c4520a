// The C API (client/zerostate_c.h) over the C++ one: handles own C++
// objects, statuses become codes plus a malloc'd message.
#include "client/zerostate_c.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/c_api_handles.h"
#include "client/client.h"
#include "client/shared_buffer.h"
#include "client/ticket_state.h"
#include "common/job_spec.h"
#include "google/protobuf/util/json_util.h"
#include "prometheus/registry.h"

namespace zc = ::zerostate::client;
namespace v1 = ::zerostate::v1;

namespace {

char* CopyString(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out != nullptr) std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

int Report(const absl::Status& status, char** error) { return zc::ReportStatus(status, error); }

absl::Status CheckBuffer(const char* arg, uint64_t begin, uint64_t end, int dtype, size_t bytes) {
  return zc::CheckBufferBytes(arg, begin, end, dtype, bytes);
}

zs_ticket* NewTicket(zc::Ticket t) { return new zs_ticket{std::move(t)}; }

}  // namespace

namespace zerostate::client {

char* CopyCString(const std::string& s) { return CopyString(s); }

int ReportStatus(const absl::Status& status, char** error) {
  if (error != nullptr) {
    *error = status.ok() ? nullptr : CopyString(std::string(status.message()));
  }
  return static_cast<int>(status.code());
}

absl::Status CheckBufferBytes(const char* arg, uint64_t begin, uint64_t end, int dtype,
                              size_t bytes) {
  if (end < begin) return absl::OkStatus();  // the library names the bad range
  uint64_t need = (end - begin) * zerostate::DTypeSize(static_cast<v1::DType>(dtype));
  if (need <= bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(arg, ": buffer of ", bytes,
                                                 " bytes is smaller than the ", need,
                                                 " bytes the range needs"));
}

}  // namespace zerostate::client

extern "C" {

void zs_client_options_init(zs_client_options* o) {
  zc::ClientOptions d;
  *o = zs_client_options{};
  o->channels_per_server = d.channels_per_server;
  o->streams_per_server = d.streams_per_server;
  o->chunk_bytes = d.chunk_bytes;
  o->max_bytes_in_flight = d.max_bytes_in_flight;
  o->rpc_timeout_ms = d.rpc_timeout.count();
  o->max_attempts = d.max_attempts;
  o->initial_backoff_ms = d.initial_backoff.count();
  o->max_backoff_ms = d.max_backoff.count();
  o->threads = d.threads;
  o->unavailable_wait_ms = d.unavailable_wait.count();
  o->keepalive_time_ms = d.keepalive_time.count();
  o->keepalive_timeout_ms = d.keepalive_timeout.count();
}

int zs_connect(const zs_client_options* o, zs_client** out, char** error) {
  if (o == nullptr || out == nullptr) {
    return Report(absl::InvalidArgumentError("options/out: null"), error);
  }
  zc::ClientOptions options;
  for (size_t i = 0; i < o->num_servers; ++i) {
    options.servers.push_back(o->servers[i] != nullptr ? o->servers[i] : "");
  }
  options.channels_per_server = o->channels_per_server;
  options.streams_per_server = o->streams_per_server;
  options.chunk_bytes = o->chunk_bytes;
  options.max_bytes_in_flight = o->max_bytes_in_flight;
  options.rpc_timeout = std::chrono::milliseconds(o->rpc_timeout_ms);
  options.max_attempts = o->max_attempts;
  options.initial_backoff = std::chrono::milliseconds(o->initial_backoff_ms);
  options.max_backoff = std::chrono::milliseconds(o->max_backoff_ms);
  options.threads = o->threads;
  options.tls_ca_file = o->tls_ca_file != nullptr ? o->tls_ca_file : "";
  options.tls_cert_file = o->tls_cert_file != nullptr ? o->tls_cert_file : "";
  options.tls_key_file = o->tls_key_file != nullptr ? o->tls_key_file : "";
  options.plaintext = o->plaintext != 0;
  options.job_token = o->job_token != nullptr ? o->job_token : "";
  options.data_plane = o->data_plane_off == 0;
  options.unavailable_wait = std::chrono::milliseconds(o->unavailable_wait_ms);
  options.keepalive_time = std::chrono::milliseconds(o->keepalive_time_ms);
  options.keepalive_timeout = std::chrono::milliseconds(o->keepalive_timeout_ms);
  auto metrics = std::make_shared<prometheus::Registry>();
  options.metrics = metrics;
  auto client = zc::Client::Connect(std::move(options));
  if (!client.ok()) return Report(client.status(), error);
  *out = new zs_client{*std::move(client), std::move(metrics)};
  return Report(absl::OkStatus(), error);
}

void zs_client_free(zs_client* client) { delete client; }

namespace {

// The sum of counter `name` over its series whose labels include every
// one of `labels` (name, value).
double CounterSum(const zs_client* client, const std::string& name,
                  const std::vector<std::pair<std::string, std::string>>& labels = {}) {
  double sum = 0;
  for (const prometheus::MetricFamily& family : client->metrics->Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& m : family.metric) {
      bool all = true;
      for (const auto& [key, value] : labels) {
        bool found = false;
        for (const prometheus::ClientMetric::Label& l : m.label)
          found = found || (l.name == key && l.value == value);
        all = all && found;
      }
      if (all) sum += m.counter.value;
    }
  }
  return sum;
}

}  // namespace

void zs_client_bytes(const zs_client* client, uint64_t* pushed, uint64_t* gathered) {
  *pushed = static_cast<uint64_t>(CounterSum(client, "zerostate_client_bytes_sent_total"));
  *gathered = static_cast<uint64_t>(CounterSum(client, "zerostate_client_bytes_received_total"));
}

void zs_client_zero_copy_bytes(const zs_client* client, uint64_t* pushed, uint64_t* gathered) {
  const std::string name = "zerostate_client_zero_copy_bytes_total";
  *pushed = static_cast<uint64_t>(CounterSum(client, name, {{"op", "push"}}));
  *gathered = static_cast<uint64_t>(CounterSum(client, name, {{"op", "gather"}}));
}

int zs_allocate_shared(zs_client* client, size_t bytes, void** data, size_t* size, char** error) {
  // The client's registry keeps the buffer (Client::AllocateShared).
  auto buffer = client->client->AllocateShared(bytes);
  if (!buffer.ok()) return Report(buffer.status(), error);
  *data = (*buffer)->data();
  *size = (*buffer)->size();
  return Report(absl::OkStatus(), error);
}

int zs_register_job(zs_client* client, const void* spec, size_t spec_len, zs_job** out,
                    char** error) {
  v1::JobSpec parsed;
  if (spec == nullptr || !parsed.ParseFromArray(spec, static_cast<int>(spec_len))) {
    return Report(absl::InvalidArgumentError("spec: not a serialized zerostate.v1.JobSpec"),
                  error);
  }
  auto job = client->client->RegisterJob(parsed);
  if (!job.ok()) return Report(job.status(), error);
  *out = new zs_job{*std::move(job)};
  return Report(absl::OkStatus(), error);
}

int zs_attach_job(zs_client* client, const char* job_id, zs_job** out, char** error) {
  auto job = client->client->AttachJob(job_id != nullptr ? job_id : "");
  if (!job.ok()) return Report(job.status(), error);
  *out = new zs_job{*std::move(job)};
  return Report(absl::OkStatus(), error);
}

void zs_job_free(zs_job* job) { delete job; }

int zs_register_job_json(zs_client* client, const char* spec_json, zs_job** out, char** error) {
  v1::JobSpec parsed;
  auto s = google::protobuf::util::JsonStringToMessage(spec_json != nullptr ? spec_json : "",
                                                       &parsed);
  if (!s.ok()) {
    return Report(absl::InvalidArgumentError(absl::StrCat(
                      "spec_json: not a zerostate.v1.JobSpec: ", s.message().as_string())),
                  error);
  }
  std::string bytes = parsed.SerializeAsString();
  return zs_register_job(client, bytes.data(), bytes.size(), out, error);
}

int zs_restore_job(zs_client* client, const char* path, uint32_t num_nodes, zs_job** out,
                   char** error) {
  auto job = client->client->RestoreJob(path != nullptr ? path : "", num_nodes);
  if (!job.ok()) return Report(job.status(), error);
  *out = new zs_job{*std::move(job)};
  return Report(absl::OkStatus(), error);
}

uint64_t zs_job_total_elems(const zs_job* job) { return job->job->layout().total_elems; }
uint64_t zs_job_used_elems(const zs_job* job) { return job->job->layout().used_elems; }
uint32_t zs_job_num_nodes(const zs_job* job) { return job->job->spec().num_nodes(); }

int zs_job_tensor_range(const zs_job* job, const char* name, uint64_t* begin, uint64_t* end,
                        char** error) {
  auto range = job->job->TensorRange(name != nullptr ? name : "");
  if (!range.ok()) return Report(range.status(), error);
  *begin = range->begin;
  *end = range->end;
  return Report(absl::OkStatus(), error);
}

void zs_push_async(zs_job* job, uint64_t step, uint32_t node, uint64_t begin, uint64_t end,
                   const void* data, size_t data_bytes, int dtype, zs_ticket** out) {
  absl::Status s = data == nullptr ? absl::OkStatus()
                                   : CheckBuffer("data", begin, end, dtype, data_bytes);
  *out = NewTicket(s.ok() ? job->job->PushAsync(step, node, {begin, end}, data,
                                                 static_cast<v1::DType>(dtype))
                          : zc::CompletedTicket(s));
}

int zs_push(zs_job* job, uint64_t step, uint32_t node, uint64_t begin, uint64_t end,
            const void* data, size_t data_bytes, int dtype, char** error) {
  zs_ticket* t;
  zs_push_async(job, step, node, begin, end, data, data_bytes, dtype, &t);
  int code = zs_ticket_wait(t, error);
  zs_ticket_free(t);
  return code;
}

int zs_ticket_wait(zs_ticket* ticket, char** error) { return Report(ticket->ticket.Wait(), error); }

void zs_ticket_free(zs_ticket* ticket) { delete ticket; }

int zs_grad_stats(zs_job* job, uint64_t step, double* sum_squares, uint64_t* nonfinite_count,
                  char** error) {
  auto stats = job->job->GradStats(step);
  if (!stats.ok()) return Report(stats.status(), error);
  if (sum_squares != nullptr) *sum_squares = stats->sum_squares;
  if (nonfinite_count != nullptr) *nonfinite_count = stats->nonfinite_count;
  return Report(absl::OkStatus(), error);
}

int zs_step(zs_job* job, uint64_t step, float lr, float grad_scale, int skip, char** error) {
  return Report(job->job->Step(step, lr, grad_scale, skip != 0), error);
}

int zs_step_ahead(zs_job* job, uint64_t step, float lr, float grad_scale, char** error) {
  return Report(job->job->StepAhead(step, lr, grad_scale), error);
}

void zs_gather_async(zs_job* job, uint64_t min_version, uint64_t begin, uint64_t end, void* out,
                     size_t out_bytes, int dtype, zs_ticket** out_ticket) {
  absl::Status s =
      out == nullptr ? absl::OkStatus() : CheckBuffer("out", begin, end, dtype, out_bytes);
  *out_ticket = NewTicket(s.ok() ? job->job->GatherAsync(min_version, {begin, end}, out,
                                                          static_cast<v1::DType>(dtype))
                                 : zc::CompletedTicket(s));
}

int zs_gather(zs_job* job, uint64_t min_version, uint64_t begin, uint64_t end, void* out,
              size_t out_bytes, int dtype, char** error) {
  zs_ticket* t;
  zs_gather_async(job, min_version, begin, end, out, out_bytes, dtype, &t);
  int code = zs_ticket_wait(t, error);
  zs_ticket_free(t);
  return code;
}

int zs_gather_master(zs_job* job, uint64_t min_version, uint64_t begin, uint64_t end,
                     float* out, size_t out_bytes, char** error) {
  absl::Status s =
      out == nullptr ? absl::OkStatus() : CheckBuffer("out", begin, end, ZS_DTYPE_FP32, out_bytes);
  if (s.ok()) s = job->job->GatherMaster(min_version, {begin, end}, out);
  return Report(s, error);
}

int zs_init_weights(zs_job* job, uint64_t begin, uint64_t end, const float* data,
                    size_t data_bytes, char** error) {
  absl::Status s = data == nullptr ? absl::OkStatus()
                                   : CheckBuffer("data", begin, end, ZS_DTYPE_FP32, data_bytes);
  if (s.ok()) s = job->job->InitWeights({begin, end}, data);
  return Report(s, error);
}

int zs_version(zs_job* job, uint64_t* version, char** error) {
  auto v = job->job->Version();
  if (!v.ok()) return Report(v.status(), error);
  *version = *v;
  return Report(absl::OkStatus(), error);
}

int zs_step_with_state(zs_job* job, uint64_t step, float lr, float grad_scale, int skip,
                       const void* state, size_t state_len, char** error) {
  std::string trainer_state;
  if (state != nullptr) trainer_state.assign(static_cast<const char*>(state), state_len);
  return Report(job->job->Step(step, lr, grad_scale, skip != 0, trainer_state), error);
}

int zs_trainer_state(zs_job* job, uint64_t version, char** out, size_t* out_len, char** error) {
  auto state = job->job->TrainerState(version);
  if (!state.ok()) return Report(state.status(), error);
  *out = static_cast<char*>(std::malloc(state->size() + 1));
  std::memcpy(*out, state->data(), state->size());
  (*out)[state->size()] = '\0';
  *out_len = state->size();
  return Report(absl::OkStatus(), error);
}

int zs_checkpoint(zs_job* job, uint64_t version, const char* root, char** path, char** error) {
  auto written = job->job->Checkpoint(version, root != nullptr ? root : "");
  if (!written.ok()) return Report(written.status(), error);
  *path = CopyString(*written);
  return Report(absl::OkStatus(), error);
}

int zs_job_delete(zs_job* job, char** error) { return Report(job->job->Delete(), error); }

int zs_job_end_if_lost(zs_job* job, int64_t wait_ms, char** account, char** error) {
  auto loss = job->job->EndIfLost(absl::Milliseconds(wait_ms));
  if (!loss.ok()) return Report(loss.status(), error);
  *account = CopyString(loss->account);
  return Report(absl::OkStatus(), error);
}

char* zs_job_token(const zs_job* job) { return CopyString(job->job->token()); }

void zs_job_set_pushes_held(zs_job* job, int held) { job->job->SetPushesHeld(held != 0); }

void zs_free_string(char* s) { std::free(s); }

}  // extern "C"
