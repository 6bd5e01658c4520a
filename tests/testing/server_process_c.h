/* C entry points to zerostate_testing, for tests written in C: start one
 * zerostate-server on 127.0.0.1 with an ephemeral port, read its address,
 * stop it. Not thread-safe per handle. */
#ifndef ZEROSTATE_TESTS_TESTING_SERVER_PROCESS_C_H_
#define ZEROSTATE_TESTS_TESTING_SERVER_PROCESS_C_H_

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zs_test_server zs_test_server;

/* Starts `binary` with --listen=127.0.0.1:0 and the NULL-terminated extra
 * flags `args` (may be NULL). Returns NULL on failure, after printing why
 * on stderr. */
zs_test_server* zs_test_server_start(const char* binary, const char* const* args);

/* "127.0.0.1:PORT"; valid until the handle is freed. */
const char* zs_test_server_address(const zs_test_server* server);

/* SIGTERM and wait: 0 on a clean exit, -1 otherwise (printed on stderr). */
int zs_test_server_stop(zs_test_server* server);

/* Kills the server if it still runs and frees the handle. */
void zs_test_server_free(zs_test_server* server);

#ifdef __cplusplus
}
#endif

#endif /* ZEROSTATE_TESTS_TESTING_SERVER_PROCESS_C_H_ */
