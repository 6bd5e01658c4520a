/* The trainer engine's pipeline (trainer/engine/) as a C API, for drivers
 * in other languages (zerostate.torch through ctypes): the bucket plan
 * (trainer/bucket_plan.h), the push thread (trainer/engine/pusher.h),
 * the coordinator's step and the speculative step's parameters sent ahead
 * (trainer/engine/coordinator.h) that
 * zerostate-worker runs too. In libzerostate_client.so, beside the
 * client's (client/zerostate_c.h) and the step policy's
 * (trainer/zerostate_trainer_c.h) C APIs, with their error convention: a
 * status code in the gRPC numbering, *error a malloc'd message (release
 * with zs_free_string), NULL on 0. A call that fails changes nothing.
 *
 * Thread safety: a zs_pusher's calls may come from any thread at once,
 * but not while or after it is freed. */
#ifndef ZEROSTATE_TRAINER_ENGINE_ZEROSTATE_ENGINE_C_H_
#define ZEROSTATE_TRAINER_ENGINE_ZEROSTATE_ENGINE_C_H_

#include <stddef.h>
#include <stdint.h>

#include "client/zerostate_c.h"
#include "trainer/zerostate_trainer_c.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One bucket of a rank's plan (trainer::PlannedBucket): flat elements
 * [begin, end); the rank's share [share_begin, share_end) (empty when
 * equal); the share's offset in the rank's staging; `chunk`, the length
 * of every local rank's share but the last ones (the node's collectives
 * run on chunk * local_size elements). */
typedef struct zs_bucket {
  uint64_t begin, end;
  uint64_t share_begin, share_end;
  uint64_t staging;
  uint64_t chunk;
} zs_bucket;

/* The buckets of `job`'s flat space, in the order backward finishes
 * them (trainer::PlanBuckets): cut at the block boundary at or after each
 * of the `num_points` flat offsets `ready_points` (where backward reports
 * a layer or a parameter ready), consecutive pieces joined while within
 * `max_elems` and longer ones cut (0: no cap, no joining), each with
 * local rank `local_rank`'s share among `local_size`.
 * *count receives the number of buckets; they are written to `out` when
 * `capacity` >= *count (else nothing is: call again with that capacity).
 * Errors: INVALID_ARGUMENT naming the argument (job or count null,
 * local_size 0, local_rank >= local_size, ready_points null with
 * num_points > 0, a point past the job's used elements). */
int zs_job_bucket_plan(const zs_job* job, const uint64_t* ready_points, size_t num_points,
                       uint64_t max_elems, uint32_t local_size, uint32_t local_rank, zs_bucket* out,
                       size_t capacity, size_t* count, char** error);

/* A wait run on the push thread before a push: returns 0 once what it
 * waits for is done, else an error code (the push is then not made).
 * cudaEventSynchronize has this shape (arg: the cudaEvent_t). */
typedef int (*zs_wait_fn)(void* arg);
typedef struct zs_wait {
  zs_wait_fn fn;
  void* arg;
} zs_wait;

typedef struct zs_pusher zs_pusher;

/* A push thread (trainer::Pusher). Errors: INVALID_ARGUMENT (out null). */
int zs_pusher_create(zs_pusher** out, char** error);
/* Waits for every push submitted (errors dropped), then frees. */
void zs_pusher_free(zs_pusher* pusher);

/* Queues a push of node `node`'s gradient of `step` for flat elements
 * [begin, end) of `job` (zs_push_async's arguments): on the push thread,
 * behind the pushes queued before it, the `num_waits` waits run in order
 * and then the push starts. `data` and `job` must stay valid until
 * zs_pusher_drain returns. Errors (nothing queued): INVALID_ARGUMENT
 * naming the argument (pusher, job or data null, data_bytes too small,
 * waits null with num_waits > 0, a wait without fn). */
int zs_pusher_push(zs_pusher* pusher, zs_job* job, uint64_t step, uint32_t node, uint64_t begin,
                   uint64_t end, const void* data, size_t data_bytes, int dtype,
                   const zs_wait* waits, size_t num_waits, char** error);

/* Waits until every push queued so far ran and is done. Returns the first
 * error since the last drain: *error its message (a failed wait's: "the
 * wait before it returned 4"), and when `what` is non-null *what the push
 * it failed ("push of step 3 [0, 1024)"; malloc'd, NULL on 0; release
 * with zs_free_string); with `what` null, *error begins with it. */
int zs_pusher_drain(zs_pusher* pusher, char** what, char** error);

/* The coordinator's part of step `step` (trainer::CoordinateStep): the
 * summed gradient's statistics, `policy`'s decision (moving it on), then
 * `before_step` (if non-null; e.g. the gathers of the new version put
 * out) and the Step carrying the policy's trainer_state. The Step's lr is
 * `lr` when use_lr != 0, else the policy's schedule. refuse_nonfinite !=
 * 0: a gradient holding non-finite values ends the step unapplied, the
 * policy unchanged, *refused = 1 and INVALID_ARGUMENT saying so.
 * *out receives the decision the Step carried. On an error, *stage (if
 * non-null; malloc'd, release with zs_free_string) names where: "gradient
 * statistics of step 3", "decision of step 3", "step 3" (before_step or
 * the Step). Errors: INVALID_ARGUMENT naming a null argument (job,
 * policy, out, refused) or average_over; the servers' errors; ABORTED
 * when before_step returned non-zero. */
int zs_coordinate(zs_job* job, zs_policy* policy, uint64_t step, double average_over, float lr,
                  int use_lr, int refuse_nonfinite, const zs_wait* before_step,
                  zs_step_decision* out, int* refused, char** stage, char** error);

/* The speculative step's parameters for step `step`, sent ahead of its
 * gradients (trainer::SendAhead): the grad_scale zs_coordinate will carry
 * if nothing is clipped or skipped, and `lr` when use_lr != 0, else the
 * policy's schedule. Errors: INVALID_ARGUMENT naming a null argument or
 * average_over; the servers'. */
int zs_send_ahead(zs_job* job, const zs_policy* policy, uint64_t step, double average_over,
                  float lr, int use_lr, char** error);

#ifdef __cplusplus
}
#endif

#endif /* ZEROSTATE_TRAINER_ENGINE_ZEROSTATE_ENGINE_C_H_ */
