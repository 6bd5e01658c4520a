/* The zerostate client library's C API: the C++ API of client/client.h
 * behind opaque handles, for trainers in Python (ctypes/cffi), Rust or Go.
 * Link libzerostate_client.so (or the static library).
 *
 * Errors: every call that can fail returns a status code, the gRPC code
 * numbering (ZS_OK = 0, ZS_INVALID_ARGUMENT = 3, ZS_NOT_FOUND = 5,
 * ZS_UNAVAILABLE = 14, ...). When it is not ZS_OK and `error` is non-null,
 * *error receives a NUL-terminated message that names the problem (and the
 * server, for server errors); release it with zs_free_string. On ZS_OK
 * *error is set to NULL.
 *
 * Ownership: handles returned through out-parameters belong to the caller
 * and are released with their zs_*_free function. A zs_job may outlive its
 * zs_client. Buffers passed to an async call must stay valid until its
 * ticket is waited on.
 *
 * Thread safety: every function may be called from any thread at once,
 * except that a handle must not be used while or after it is freed. */
#ifndef ZEROSTATE_CLIENT_ZEROSTATE_C_H_
#define ZEROSTATE_CLIENT_ZEROSTATE_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zs_client zs_client;
typedef struct zs_job zs_job;
typedef struct zs_ticket zs_ticket;

enum {
  ZS_OK = 0,
  ZS_CANCELLED = 1,
  ZS_UNKNOWN = 2,
  ZS_INVALID_ARGUMENT = 3,
  ZS_DEADLINE_EXCEEDED = 4,
  ZS_NOT_FOUND = 5,
  ZS_ALREADY_EXISTS = 6,
  ZS_PERMISSION_DENIED = 7,
  ZS_RESOURCE_EXHAUSTED = 8,
  ZS_FAILED_PRECONDITION = 9,
  ZS_ABORTED = 10,
  ZS_OUT_OF_RANGE = 11,
  ZS_INTERNAL = 13,
  ZS_UNAVAILABLE = 14,
  ZS_DATA_LOSS = 15,
  ZS_UNAUTHENTICATED = 16
};

/* Wire dtypes, numbered as zerostate.v1.DType. */
enum { ZS_DTYPE_FP32 = 1, ZS_DTYPE_BF16 = 2, ZS_DTYPE_FP16 = 3 };

/* Mirrors zerostate::client::ClientOptions; see client/client.h for each
 * field. Fill with zs_client_options_init, then set `servers`. */
typedef struct zs_client_options {
  const char* const* servers; /* "host:port", in shard order */
  size_t num_servers;
  int channels_per_server;
  int streams_per_server;
  size_t chunk_bytes;
  size_t max_bytes_in_flight;
  int64_t rpc_timeout_ms;
  int max_attempts;
  int64_t initial_backoff_ms;
  int64_t max_backoff_ms;
  int threads;
  /* Transport security, one of the two required (see ClientOptions): PEM
   * file paths for TLS (NULL: unset; cert and key only for mutual TLS), or
   * plaintext != 0 for servers started with --plaintext. */
  const char* tls_ca_file;
  const char* tls_cert_file;
  const char* tls_key_file;
  int plaintext;
  /* The job's token (NULL: none yet; the first zs_register_job gets one
   * generated, see zs_job_token). A secret: never log it. */
  const char* job_token;
  /* != 0: push and gather over gRPC even where the servers have a TCP
   * data plane (ClientOptions::data_plane = false). */
  int data_plane_off;
  /* How long a server may stay unreachable, in ms: UNAVAILABLE is retried
   * past max_attempts until this long after a call began (a restarting
   * server); 0: max_attempts bounds it (ClientOptions::unavailable_wait). */
  int64_t unavailable_wait_ms;
  /* Keepalive pings of each channel, in ms (ClientOptions::keepalive_time
   * and keepalive_timeout): a server that does not answer one within the
   * timeout is given up at once (a hung server); 0: off. */
  int64_t keepalive_time_ms;
  int64_t keepalive_timeout_ms;
} zs_client_options;

/* The library's defaults, no servers. */
void zs_client_options_init(zs_client_options* options);

/* Opens channels to every server. Errors: ZS_INVALID_ARGUMENT. */
int zs_connect(const zs_client_options* options, zs_client** out, char** error);
void zs_client_free(zs_client* client);
/* Payload bytes this client pushed and gathered since zs_connect, every
 * server and job together, counted once per completed call (the client
 * library's zerostate_client_bytes_{sent,received}_total). */
void zs_client_bytes(const zs_client* client, uint64_t* pushed, uint64_t* gathered);
/* Of those, the bytes a server on this host read from or wrote into a
 * shared buffer in place (zs_allocate_shared), the client copying none
 * (zerostate_client_zero_copy_bytes_total). */
void zs_client_zero_copy_bytes(const zs_client* client, uint64_t* pushed, uint64_t* gathered);

/* A shared buffer of at least `bytes` (Client::AllocateShared): page-aligned,
 * zeroed memory that a state server on this host reads (zs_push from it,
 * sent in the job's grad dtype) and writes (zs_gather into it, in the
 * dtype gathered) in place, the client copying nothing; elsewhere
 * ordinary memory. *data and *size (rounded up to whole pages) describe
 * it; it stays mapped until the client and every job of it are freed.
 * Errors: ZS_INVALID_ARGUMENT (0 bytes), ZS_UNAVAILABLE (the kernel
 * refused; the reason). */
int zs_allocate_shared(zs_client* client, size_t bytes, void** data, size_t* size, char** error);

/* Registers (or attaches to) a job from a serialized zerostate.v1.JobSpec.
 * Errors: ZS_INVALID_ARGUMENT (unparsable or bad spec), server errors. */
int zs_register_job(zs_client* client, const void* spec, size_t spec_len, zs_job** out,
                    char** error);
/* Attaches to a registered job with the client's job_token
 * (Client::AttachJob). Errors: ZS_INVALID_ARGUMENT (job_id),
 * ZS_UNAUTHENTICATED (no token, or not valid here), ZS_PERMISSION_DENIED
 * (the token of another job), whether or not the job exists;
 * ZS_FAILED_PRECONDITION (shards more than one version apart). */
int zs_attach_job(zs_client* client, const char* job_id, zs_job** out, char** error);
void zs_job_free(zs_job* job);
/* The same from a zerostate.v1.JobSpec in protobuf's JSON mapping (field
 * names as in the proto or lowerCamelCase; enums by name), for callers
 * without generated protobuf code. Errors: ZS_INVALID_ARGUMENT (not JSON,
 * an unknown field: the parser's message), then as zs_register_job. */
int zs_register_job_json(zs_client* client, const char* spec_json, zs_job** out, char** error);
/* Loads the checkpoint directory `path` (zs_checkpoint's answer) onto the
 * client's servers and attaches to the job (Client::RestoreJob);
 * num_nodes 0 keeps the checkpoint's. A job of the same id there is
 * replaced if it has the client's token and the checkpoint's layout
 * (else ZS_PERMISSION_DENIED / ZS_FAILED_PRECONDITION; zs_job_delete it
 * first to restore another layout). Errors: as Client::RestoreJob. */
int zs_restore_job(zs_client* client, const char* path, uint32_t num_nodes, zs_job** out,
                   char** error);

/* The job's flat space: padded size, used size, nodes. */
uint64_t zs_job_total_elems(const zs_job* job);
uint64_t zs_job_used_elems(const zs_job* job);
uint32_t zs_job_num_nodes(const zs_job* job);
/* Flat range [*begin, *end) of the tensor `name`. Errors: ZS_NOT_FOUND. */
int zs_job_tensor_range(const zs_job* job, const char* name, uint64_t* begin, uint64_t* end,
                        char** error);

/* Pushes node `node`'s gradient for flat elements [begin, end) of `step`;
 * `data` holds `data_bytes` bytes of `dtype` elements (fp32 or the job's
 * grad dtype). Errors: ZS_INVALID_ARGUMENT (range, node, dtype, null data
 * or data_bytes too small), server errors. */
int zs_push(zs_job* job, uint64_t step, uint32_t node, uint64_t begin, uint64_t end,
            const void* data, size_t data_bytes, int dtype, char** error);
/* The same, asynchronous: *out receives a ticket even when the call fails
 * early (its wait returns the error). */
void zs_push_async(zs_job* job, uint64_t step, uint32_t node, uint64_t begin, uint64_t end,
                   const void* data, size_t data_bytes, int dtype, zs_ticket** out);

/* Blocks until the ticket's call is done; returns its status. */
int zs_ticket_wait(zs_ticket* ticket, char** error);
void zs_ticket_free(zs_ticket* ticket);

/* Summed gradient statistics of `step` over every server. */
int zs_grad_stats(zs_job* job, uint64_t step, double* sum_squares, uint64_t* nonfinite_count,
                  char** error);

/* Applies step `step` on every server. skip != 0: advance without changes. */
int zs_step(zs_job* job, uint64_t step, float lr, float grad_scale, int skip, char** error);

/* Sends step `step`'s parameters ahead of its gradients (a job registered
 * with speculative_step): the grad_scale its zs_step will carry if no
 * clipping applies and the gradients are finite (JobClient::StepAhead). */
int zs_step_ahead(zs_job* job, uint64_t step, float lr, float grad_scale, char** error);

/* Gathers flat elements [begin, end) at version >= min_version into `out`
 * (`out_bytes` bytes of `dtype`: fp32, or the job's weight dtype).
 * Errors: ZS_INVALID_ARGUMENT (range, dtype, null or too small out). */
int zs_gather(zs_job* job, uint64_t min_version, uint64_t begin, uint64_t end, void* out,
              size_t out_bytes, int dtype, char** error);
void zs_gather_async(zs_job* job, uint64_t min_version, uint64_t begin, uint64_t end, void* out,
                     size_t out_bytes, int dtype, zs_ticket** out_ticket);
/* Gathers the fp32 master weights. */
int zs_gather_master(zs_job* job, uint64_t min_version, uint64_t begin, uint64_t end,
                     float* out, size_t out_bytes, char** error);

/* Streams initial fp32 weights (jobs registered with streamed_init). */
int zs_init_weights(zs_job* job, uint64_t begin, uint64_t end, const float* data,
                    size_t data_bytes, char** error);

/* The lowest version over every server's shard. */
int zs_version(zs_job* job, uint64_t* version, char** error);

/* zs_step carrying the trainer's own state for version step + 1 (at most
 * 1024 bytes, opaque; JobClient::Step). */
int zs_step_with_state(zs_job* job, uint64_t step, float lr, float grad_scale, int skip,
                       const void* state, size_t state_len, char** error);
/* The trainer state the Step that made `version` carried (malloc'd into
 * *out, *out_len bytes; release with zs_free_string). Errors: ZS_NOT_FOUND
 * (no server keeps one), ZS_INVALID_ARGUMENT (version 0). */
int zs_trainer_state(zs_job* job, uint64_t version, char** out, size_t* out_len, char** error);

/* Makes every server write its shard at `version` under `root` (absolute,
 * reached by every server); *path receives <root>/<job_id>/v<version>
 * (release with zs_free_string). Errors: as JobClient::Checkpoint. */
int zs_checkpoint(zs_job* job, uint64_t version, const char* root, char** path, char** error);

/* Deletes the job on every server (JobClient::Delete); the handle must
 * still be freed. */
int zs_job_delete(zs_job* job, char** error);

/* After a failed step: whether the job can go on (JobClient::EndIfLost).
 * Asks every server for it, waiting up to wait_ms for servers that do not
 * answer; when one lost its shard or stayed silent, deletes the job on the
 * servers that answer, so calls waiting on it there end at once. *account
 * receives "" when every server holds the job, else the account naming the
 * server (free it with zs_free_string). */
int zs_job_end_if_lost(zs_job* job, int64_t wait_ms, char** account, char** error);

/* Maps a DeepSpeed ds_config.json (the text) as zerostate-worker does
 * (worker/ds_config.h): *train_json receives the resulting
 * zerostate.v1.TrainConfig in protobuf's JSON mapping, *warnings the keys
 * ignored, one per line ("" if none); release both with zs_free_string.
 * Errors: ZS_INVALID_ARGUMENT naming the key. In libzerostate_client.so
 * only (not the static library). */
int zs_parse_ds_config(const char* json, char** train_json, char** warnings, char** error);

/* The job's token, for the nodes that attach (malloc'd, NUL-terminated;
 * release with zs_free_string). A secret: never log it. */
char* zs_job_token(const zs_job* job);

/* held != 0: pushes from shared buffers promise that the buffer stays
 * unchanged until the step the push is for is applied (JobClient::
 * SetPushesHeld); 0 (the default): no such promise. */
void zs_job_set_pushes_held(zs_job* job, int held);

void zs_free_string(char* s);

#ifdef __cplusplus
}
#endif

#endif /* ZEROSTATE_CLIENT_ZEROSTATE_C_H_ */
