/* Drives the C API (client/zerostate_c.h) from C against a real
 * zerostate-server: register from a serialized JobSpec, push from two
 * nodes, statistics, step, gather, attach with the generated token, and
 * bad arguments.
 * Usage: c_api_test PATH_TO_ZEROSTATE_SERVER */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/zerostate_c.h"
#include "tests/testing/server_process_c.h"

static int failures = 0;

#define CHECK(cond)                                                \
  do {                                                             \
    if (!(cond)) {                                                 \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                  \
    }                                                              \
  } while (0)

/* Checks a call's code and that its message contains `needle`. */
static void expect_error(int code, char* error, int want, const char* needle, int line) {
  if (code != want || error == NULL || strstr(error, needle) == NULL) {
    fprintf(stderr, "line %d: got code %d message '%s'; want code %d with '%s'\n", line, code,
            error ? error : "(null)", want, needle);
    ++failures;
  }
  zs_free_string(error);
}
#define EXPECT_ERROR(call, want, needle)           \
  do {                                             \
    char* err_ = NULL;                             \
    int code_ = (call);                            \
    expect_error(code_, err_, want, needle, __LINE__); \
  } while (0)
#define ERR (&err_)

static void expect_ok(int code, char* error, int line) {
  if (code != ZS_OK) {
    fprintf(stderr, "line %d: code %d: %s\n", line, code, error ? error : "(null)");
    ++failures;
  }
  zs_free_string(error);
}
#define EXPECT_OK(call)                   \
  do {                                    \
    char* err_ = NULL;                    \
    int code_ = (call);                   \
    expect_ok(code_, err_, __LINE__);     \
  } while (0)

/* A minimal protobuf writer, enough for a JobSpec. */
typedef struct {
  unsigned char data[512];
  size_t len;
} Buf;

static void put_varint(Buf* b, unsigned long long v) {
  while (v >= 0x80) {
    b->data[b->len++] = (unsigned char)(v | 0x80);
    v >>= 7;
  }
  b->data[b->len++] = (unsigned char)v;
}
static void put_uint(Buf* b, int field, unsigned long long v) {
  put_varint(b, (unsigned long long)(field << 3));
  put_varint(b, v);
}
static void put_bytes(Buf* b, int field, const void* p, size_t n) {
  put_varint(b, (unsigned long long)(field << 3 | 2));
  put_varint(b, n);
  memcpy(b->data + b->len, p, n);
  b->len += n;
}

enum { kElems = 3000, kUsed = 3008 /* padded to 64 */ };

/* job "c-api": tensor w[3000], SGD with momentum, 2 nodes, bf16 gradients,
 * fp32 weights, 1024-element blocks, seed 7. */
static Buf job_spec(void) {
  Buf tensor = {{0}, 0}, optimizer = {{0}, 0}, spec = {{0}, 0};
  put_bytes(&tensor, 1, "w", 1);
  put_uint(&tensor, 2, kElems);
  put_uint(&optimizer, 1, 3); /* OPTIMIZER_SGD_MOMENTUM */
  put_bytes(&spec, 1, "c-api", 5);
  put_bytes(&spec, 2, tensor.data, tensor.len);
  put_bytes(&spec, 3, optimizer.data, optimizer.len);
  put_uint(&spec, 4, 2);    /* num_nodes */
  put_uint(&spec, 5, ZS_DTYPE_BF16);
  put_uint(&spec, 6, ZS_DTYPE_FP32);
  put_uint(&spec, 7, 1024); /* block_elems */
  put_uint(&spec, 9, 7);    /* seed */
  return spec;
}

static void test_bad_arguments(zs_job* job, float* buf) {
  EXPECT_ERROR(zs_push(job, 0, 2, 0, kElems, buf, sizeof(float) * kElems, ZS_DTYPE_FP32, ERR),
               ZS_INVALID_ARGUMENT, "node: 2");
  EXPECT_ERROR(zs_push(job, 0, 0, 0, kElems, buf, 100, ZS_DTYPE_FP32, ERR), ZS_INVALID_ARGUMENT,
               "data: buffer of 100 bytes");
  EXPECT_ERROR(zs_push(job, 0, 0, 0, kElems, buf, sizeof(float) * kElems, ZS_DTYPE_FP16, ERR),
               ZS_INVALID_ARGUMENT, "dtype: fp16");
  EXPECT_ERROR(zs_push(job, 0, 0, 0, 1u << 30, buf, (size_t)-1, ZS_DTYPE_FP32, ERR),
               ZS_INVALID_ARGUMENT, "elems:");
  EXPECT_ERROR(zs_gather(job, 0, 0, kElems, buf, 8, ZS_DTYPE_FP32, ERR), ZS_INVALID_ARGUMENT,
               "out: buffer of 8 bytes");
  EXPECT_ERROR(zs_gather(job, 0, 0, kElems, NULL, 0, ZS_DTYPE_FP32, ERR), ZS_INVALID_ARGUMENT,
               "out: null");
  uint64_t b, e;
  EXPECT_ERROR(zs_job_tensor_range(job, "nope", &b, &e, ERR), ZS_NOT_FOUND, "'nope'");
}

/* Two nodes push 0.5 and 0.25 (exact in bf16) over the used flat space
 * (the tensor and its alignment padding); one SGD step at lr 0.5 moves
 * every weight by -0.375. */
static void test_train_step(zs_client* client, zs_job* job) {
  static float w0[kElems], w1[kElems], g0[kUsed], g1[kUsed];
  uint64_t begin = 1, end = 0, version = 99;
  CHECK(zs_job_used_elems(job) == kUsed);
  EXPECT_OK(zs_job_tensor_range(job, "w", &begin, &end, ERR));
  CHECK(begin == 0 && end == kElems);
  EXPECT_OK(zs_gather_master(job, 0, 0, kElems, w0, sizeof w0, ERR));
  for (int i = 0; i < kElems; ++i) g0[i] = 0.5f, g1[i] = 0.25f;
  uint64_t pushed0 = 0, gathered0 = 0, pushed = 0, gathered = 0;
  zs_client_bytes(client, &pushed0, &gathered0);
  zs_ticket* t;
  zs_push_async(job, 0, 1, 0, kUsed, g1, sizeof g1, ZS_DTYPE_FP32, &t);
  EXPECT_OK(zs_push(job, 0, 0, 0, kUsed, g0, sizeof g0, ZS_DTYPE_FP32, ERR));
  EXPECT_OK(zs_ticket_wait(t, ERR));
  zs_ticket_free(t);
  double sum_squares = 0;
  uint64_t nonfinite = 1;
  EXPECT_OK(zs_grad_stats(job, 0, &sum_squares, &nonfinite, ERR));
  CHECK(sum_squares == 0.5625 * kElems && nonfinite == 0);
  EXPECT_OK(zs_step(job, 0, 0.5f, 1.0f, 0, ERR));
  EXPECT_OK(zs_gather(job, 1, 0, kElems, w1, sizeof w1, ZS_DTYPE_FP32, ERR));
  /* The client's counters: both pushes' payload on the wire (the job's
   * grad dtype, bf16), and the gather's (its weight dtype, fp32). */
  zs_client_bytes(client, &pushed, &gathered);
  CHECK(pushed - pushed0 == 2 * kUsed * 2);
  CHECK(gathered - gathered0 == sizeof w1);
  int bad = 0;
  for (int i = 0; i < kElems; ++i) {
    float want = w0[i] - 0.375f;
    bad += fabsf(w1[i] - want) > 1e-6f * fmaxf(1.0f, fabsf(want));
  }
  CHECK(bad == 0);
  EXPECT_OK(zs_version(job, &version, ERR));
  CHECK(version == 1);
  char* account = NULL;  /* every server holds the job: "", and it is left as it is */
  EXPECT_OK(zs_job_end_if_lost(job, 0, &account, ERR));
  CHECK(account != NULL && account[0] == '\0');
  zs_free_string(account);
  EXPECT_OK(zs_version(job, &version, ERR));
  zs_job* attached = NULL;
  EXPECT_OK(zs_attach_job(client, "c-api", &attached, ERR));
  CHECK(attached != NULL && zs_job_num_nodes(attached) == 2);
  CHECK(attached != NULL && zs_job_total_elems(attached) >= kElems);
  zs_job_free(attached);
  EXPECT_ERROR(zs_attach_job(client, "missing", &attached, ERR), ZS_PERMISSION_DENIED,
               "JobStatus to");
}

/* A shared buffer: page-aligned, zeroed, at least the size asked; a
 * gather into it (in place on the same-host plane) equals one into
 * ordinary memory. 0 bytes is refused by name. */
static void test_shared_buffer(zs_client* client, zs_job* job) {
  static float plain[kElems];
  void* data = NULL;
  size_t size = 0;
  EXPECT_OK(zs_allocate_shared(client, sizeof plain, &data, &size, ERR));
  CHECK(data != NULL && size >= sizeof plain && ((uintptr_t)data % 4096) == 0);
  const unsigned char* bytes = (const unsigned char*)data;
  int nonzero = 0;
  for (size_t i = 0; i < size; ++i) nonzero += bytes[i] != 0;
  CHECK(nonzero == 0);
  EXPECT_OK(zs_gather_master(job, 1, 0, kElems, (float*)data, size, ERR));
  EXPECT_OK(zs_gather_master(job, 1, 0, kElems, plain, sizeof plain, ERR));
  CHECK(memcmp(data, plain, sizeof plain) == 0);
  EXPECT_ERROR(zs_allocate_shared(client, 0, &data, &size, ERR), ZS_INVALID_ARGUMENT, "size 0");
}

/* The token the server generated for the job lets a second client attach;
 * a client without it is refused. */
static void test_token(const zs_client_options* base, zs_job* job) {
  char* token = zs_job_token(job);
  CHECK(token != NULL && strlen(token) == 64);
  zs_client_options options = *base;
  zs_client* other = NULL;
  zs_job* attached = NULL;
  EXPECT_OK(zs_connect(&options, &other, ERR));
  EXPECT_ERROR(zs_attach_job(other, "c-api", &attached, ERR), ZS_UNAUTHENTICATED, "no job token");
  zs_client_free(other);
  options.job_token = token;
  EXPECT_OK(zs_connect(&options, &other, ERR));
  EXPECT_OK(zs_attach_job(other, "c-api", &attached, ERR));
  CHECK(attached != NULL && zs_job_num_nodes(attached) == 2);
  zs_job_free(attached);
  zs_client_free(other);
  zs_free_string(token);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s PATH_TO_ZEROSTATE_SERVER\n", argv[0]);
    return 2;
  }
  const char* flags[] = {"--metrics_listen=", "--threads=1", "--ram_budget_bytes=100000000",
                         NULL};
  zs_test_server* server = zs_test_server_start(argv[1], flags);
  if (server == NULL) return 1;
  const char* servers[] = {zs_test_server_address(server)};
  zs_client_options options;
  zs_client_options_init(&options);
  zs_client* client = NULL;
  EXPECT_ERROR(zs_connect(&options, &client, ERR), ZS_INVALID_ARGUMENT, "servers");
  options.servers = servers;
  options.num_servers = 1;
  options.chunk_bytes = 4096;
  options.rpc_timeout_ms = 20000;
  options.max_attempts = 2;
  options.rpc_timeout_ms = 10000;
  options.max_attempts = 2;
  EXPECT_ERROR(zs_connect(&options, &client, ERR), ZS_INVALID_ARGUMENT, "tls_ca_file");
  options.plaintext = 1;
  EXPECT_OK(zs_connect(&options, &client, ERR));
  Buf spec = job_spec();
  zs_job* job = NULL;
  EXPECT_ERROR(zs_register_job(client, "\xff\xff", 2, &job, ERR), ZS_INVALID_ARGUMENT, "spec");
  EXPECT_OK(zs_register_job(client, spec.data, spec.len, &job, ERR));
  if (job != NULL) {
    static float buf[kElems];
    test_bad_arguments(job, buf);
    test_train_step(client, job);
    test_shared_buffer(client, job);
    test_token(&options, job);
  }
  zs_job_free(job);
  zs_client_free(client);
  CHECK(zs_test_server_stop(server) == 0);
  zs_test_server_free(server);
  printf("c_api_test: %s\n", failures == 0 ? "PASSED" : "FAILED");
  return failures == 0 ? 0 : 1;
}
