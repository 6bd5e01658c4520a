/* The trainer engine's pipeline (trainer/engine/) as a C API, for drivers
 * in other languages (zerostate.torch through ctypes): the bucket plan
 * (trainer/bucket_plan.h), the push thread (trainer/engine/pusher.h),
 * the coordinator's step and the speculative step's parameters sent ahead
 * (trainer/engine/coordinator.h), the step in flight
 * (trainer/engine/in_flight.h), the gathers landed once
 * (trainer/engine/gather_slot.h), the verdict after a failed step
 * (trainer/engine/recovery_verdict.h) that
 * zerostate-worker runs too. In libzerostate_client.so, beside the
 * client's (client/zerostate_c.h) and the step policy's
 * (trainer/zerostate_trainer_c.h) C APIs, with their error convention: a
 * status code in the gRPC numbering, *error a malloc'd message (release
 * with zs_free_string), NULL on 0. A call that fails changes nothing.
 *
 * Thread safety: a zs_pusher's calls may come from any thread at once,
 * but not while or after it is freed; a zs_in_flight's and a
 * zs_gather_slot's as they say. */
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

/* Local rank `local_rank`'s share of the flat elements [begin, end)
 * among `local_size` ranks (trainer::LocalShare, as the bucket plan and
 * zerostate-worker split every range inside a node):
 * [*share_begin, *share_end), and *chunk, the length of every share but
 * the last ones (the node's all-gather runs on chunk * local_size
 * elements). Errors: INVALID_ARGUMENT naming the argument (share_begin,
 * share_end or chunk null, begin > end, local_size 0, local_rank >=
 * local_size); nothing is written then. */
int zs_local_share(uint64_t begin, uint64_t end, uint32_t local_size, uint32_t local_rank,
                   uint64_t* share_begin, uint64_t* share_end, uint64_t* chunk, char** error);

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
 * and then the push starts. `data` and `job` must stay valid until a
 * drain through it (a mark at or after zs_pusher_mark's right after this
 * call) returns. Errors (nothing queued): INVALID_ARGUMENT
 * naming the argument (pusher, job or data null, data_bytes too small,
 * waits null with num_waits > 0, a wait without fn). */
int zs_pusher_push(zs_pusher* pusher, zs_job* job, uint64_t step, uint32_t node, uint64_t begin,
                   uint64_t end, const void* data, size_t data_bytes, int dtype,
                   const zs_wait* waits, size_t num_waits, char** error);

/* The number of pushes queued so far: the mark through the last one
 * (trainer::Pusher::Mark). Never blocks long. 0 for a null pusher. */
uint64_t zs_pusher_mark(const zs_pusher* pusher);

/* Waits until every push queued before `mark` ran and is done (the later
 * ones go on). Returns the first error of those pushes not drained
 * before: *error its message (a failed wait's: "the wait before it
 * returned 4"), and when `what` is non-null *what the push it failed
 * ("push of step 3 [0, 1024)"; malloc'd, NULL on 0; release with
 * zs_free_string); with `what` null, *error begins with it. Each error is
 * returned once. Errors: INVALID_ARGUMENT (pusher null; mark past
 * zs_pusher_mark's, nothing waited for). */
int zs_pusher_drain(zs_pusher* pusher, uint64_t mark, char** what, char** error);

/* Waits as zs_pusher_drain does, taking no error (e.g. before a buffer a
 * push before `mark` reads is written again). Errors: as zs_pusher_drain's. */
int zs_pusher_wait_through(zs_pusher* pusher, uint64_t mark, char** error);

/* 1 when zs_pusher_wait_through would return at once, else 0 (also for
 * a null pusher or a mark past zs_pusher_mark's). Never blocks long. */
int zs_pusher_done_through(zs_pusher* pusher, uint64_t mark);

/* The coordinator's part of step `step` (trainer::CoordinateStep): the
 * summed gradient's statistics, `policy`'s decision (moving it on), then
 * `before_step` (if non-null; e.g. the gathers of the new version put
 * out) and the Step carrying the policy's trainer_state. The Step's lr is
 * `lr` when use_lr != 0, else the policy's schedule. A gradient holding
 * non-finite values is skipped, in every precision (out->skip).
 * *out receives the decision the Step carried. On an error, *stage (if
 * non-null; malloc'd, release with zs_free_string) names where: "gradient
 * statistics of step 3", "decision of step 3", "step 3" (before_step or
 * the Step). Errors: INVALID_ARGUMENT naming a null argument (job,
 * policy, out) or average_over; the servers' errors; ABORTED
 * when before_step returned non-zero. */
int zs_coordinate(zs_job* job, zs_policy* policy, uint64_t step, double average_over, float lr,
                  int use_lr, const zs_wait* before_step, zs_step_decision* out, char** stage,
                  char** error);

/* The speculative step's parameters for step `step`, sent ahead of its
 * gradients (trainer::SendAhead): the grad_scale zs_coordinate will carry
 * if nothing is clipped or skipped, and `lr` when use_lr != 0, else the
 * policy's schedule. Errors: INVALID_ARGUMENT naming a null argument or
 * average_over; the servers'. */
int zs_send_ahead(zs_job* job, const zs_policy* policy, uint64_t step, double average_over,
                  float lr, int use_lr, char** error);

/* A step whose update is in flight (trainer::InFlightStep): the delayed
 * parameter update's step t, the version t+1 it brings, and its verdict
 * once known. Its calls come from one driver thread, but
 * zs_in_flight_wait_gathers_out from any (the push thread). */
typedef struct zs_in_flight zs_in_flight;

/* Errors: INVALID_ARGUMENT (out null). */
int zs_in_flight_create(zs_in_flight** out, char** error);
/* Waits for a Step still running, then frees. */
void zs_in_flight_free(zs_in_flight* in_flight);

/* The step's pushes: each transition below takes `pusher` (may be null:
 * none) and `mark`, and the step in flight owns the pushes of `pusher`
 * before `mark` (zs_pusher_mark's once the step's pushes were all
 * queued): they are drained before its Step (start) or by
 * zs_in_flight_take (follow, fail), and `pusher` must stay valid until
 * then. A failed one fails the step as its Step would: its error, stage
 * the push ("push of step 3 [0, 1024)"); after fail, its errors are
 * dropped. */

/* The coordinator's step `step` left in flight: on a thread of its own,
 * its pushes drained, then zs_coordinate's work (statistics, decision,
 * before_step, Step; its arguments alike) on a copy of `policy`
 * (`policy` is not changed; zs_in_flight_take hands the moved copy
 * over). Once before_step returned 0 the step's gathers are out
 * (zs_in_flight_wait_gathers_out). `job` must stay valid until
 * zs_in_flight_take or _free returns. Errors (nothing started):
 * INVALID_ARGUMENT naming the argument (a null in_flight, job, policy or
 * before_step->fn; a mark past zs_pusher_mark's); FAILED_PRECONDITION
 * naming the step in flight still. */
int zs_in_flight_start(zs_in_flight* in_flight, zs_job* job, const zs_policy* policy,
                       uint64_t step, double average_over, float lr, int use_lr,
                       const zs_wait* before_step, zs_pusher* pusher, uint64_t mark,
                       char** error);
/* Step `step` in flight, its Step another rank's (no verdict here but its
 * pushes'). Errors: INVALID_ARGUMENT (in_flight null, mark as above);
 * FAILED_PRECONDITION as above. */
int zs_in_flight_follow(zs_in_flight* in_flight, uint64_t step, zs_pusher* pusher,
                        uint64_t mark, char** error);
/* Step `step` in flight, failed already with status `code` (not 0) and
 * `message`; `refused`: the step was refused (bad input, no rollback).
 * Errors: INVALID_ARGUMENT naming the argument (in_flight or message
 * null, code 0 or not a status code, mark as above); FAILED_PRECONDITION
 * as above. */
int zs_in_flight_fail(zs_in_flight* in_flight, uint64_t step, int code, const char* message,
                      int refused, zs_pusher* pusher, uint64_t mark, char** error);
/* 1 while a step is in flight (started, followed or failed, not taken),
 * *step (if non-null) receiving it; else 0. Never blocks long: callable
 * with Python's GIL held. 0 for a null in_flight. */
int zs_in_flight_active(const zs_in_flight* in_flight, uint64_t* step);

/* What a step in flight came to (trainer::Verdict). */
typedef struct zs_verdict {
  int active;       /* 0: nothing was in flight; the rest is unset */
  uint64_t step;
  int coordinated;  /* this rank ran its Step (zs_in_flight_start) */
  int refused;      /* refused as bad input (zs_in_flight_fail's) */
  int code;         /* its status: 0 or a gRPC code (*message says why) */
  zs_step_decision decision;  /* what the Step carried (coordinated) */
} zs_verdict;

/* Waits for the Step in flight, if running (or drains the pushes of a
 * followed or failed step), and hands its verdict over:
 * the step is no longer in flight. When `policy` is non-null and the step
 * was coordinated and its status is 0, the policy after the step is
 * copied into it. *stage and *message (if non-null; malloc'd, NULL when
 * empty, release with zs_free_string) receive where it failed ("step 3")
 * and why. Errors: INVALID_ARGUMENT naming a null argument (in_flight,
 * out); nothing is taken then. */
int zs_in_flight_take(zs_in_flight* in_flight, zs_policy* policy, zs_verdict* out, char** stage,
                      char** message, char** error);

/* Returns once step `step`'s gathers are out (1), or its Step ended
 * without them, or it is not the step in flight (0). 0 for a null in_flight. */
int zs_in_flight_wait_gathers_out(zs_in_flight* in_flight, uint64_t step);

/* Drops what a failed (or reset, or closing) step left in flight
 * (trainer::AbandonInFlight): waits for the Step in flight (its pushes
 * drained) and forgets its verdict; drops the gathers of `slots[0..num_slots)`, cancelling
 * them (a gather of a version whose Step failed would otherwise wait out
 * its deadline and retries); waits for every push queued, their errors
 * dropped; then for the dropped gathers, whose buffers are the caller's
 * again on return. in_flight and pusher may be null, slots null when
 * num_slots is 0; a null slot is skipped. */
typedef struct zs_gather_slot zs_gather_slot;
void zs_abandon(zs_in_flight* in_flight, zs_pusher* pusher, zs_gather_slot* const* slots,
                size_t num_slots);

/* One range's gather of new weights, landed once (trainer::GatherSlot,
 * as zerostate-worker lands each bucket): which version is fetched, its
 * ticket, whether it landed, when its buffer may be written again, and
 * waits on a version's gather from other threads. The driver keeps the
 * buffer, the node's all-gather and the copies into its parameters.
 * Lifecycle: idle -fetch-> fetched -land-> landing -landed-> idle, and
 * fetched -drop-> idle; land on an idle slot does nothing. Any other
 * transition is refused with FAILED_PRECONDITION naming it and the
 * slot's state, changing nothing. Its calls come from one driver thread,
 * but zs_gather_slot_wait and _pending from any. */

/* The slot of this rank's share [begin, end) (may be empty). Errors:
 * INVALID_ARGUMENT naming the argument (out null, begin > end). */
int zs_gather_slot_create(uint64_t begin, uint64_t end, zs_gather_slot** out, char** error);
/* Frees; a gather in flight is cancelled and waited for (at once), so its
 * buffer is the caller's again. */
void zs_gather_slot_free(zs_gather_slot* slot);

/* Runs the reuse wait the last landing left (its error returned, nothing
 * gathered), then gathers the share at `min_version` from `job` into `out`
 * (zs_gather_async's arguments; nothing for an empty share, `out` may then
 * be null). `out` and `job` must stay valid until the gather is done.
 * Errors: INVALID_ARGUMENT naming the argument (slot or job null, out null
 * or out_bytes too small for a non-empty share); FAILED_PRECONDITION
 * while fetched or landing; ABORTED when the reuse wait failed. */
int zs_gather_slot_fetch(zs_gather_slot* slot, zs_job* job, uint64_t min_version, void* out,
                         size_t out_bytes, int dtype, char** error);
/* Fetched: waits for the gather, *take_part = 1: the driver's part (the
 * node's all-gather, the copies) follows, then zs_gather_slot_landed,
 * even when the gather failed (every local rank takes part). Idle:
 * *take_part = 0. Errors: INVALID_ARGUMENT (slot or take_part null);
 * FAILED_PRECONDITION while landing. */
int zs_gather_slot_land(zs_gather_slot* slot, int* take_part, char** error);
/* The driver's part is done: the version landed (unless its gather
 * failed); `reuse` (may be null) runs at the next fetch, before the gather
 * writes the buffer again (a copy out of it still reading). Returns the
 * gather's status. Errors: INVALID_ARGUMENT (slot null, reuse without
 * fn); FAILED_PRECONDITION unless landing. */
int zs_gather_slot_landed(zs_gather_slot* slot, const zs_wait* reuse, char** error);
/* Forgets the gather fetched, not landed, and the version landed: the
 * gather is cancelled and waited for (at once), so its buffer is the
 * caller's again. Errors: INVALID_ARGUMENT (slot null);
 * FAILED_PRECONDITION while landing. */
int zs_gather_slot_drop(zs_gather_slot* slot, char** error);
/* From any thread: returns once the share's blocks are at `version` or
 * later as this slot knows it: the gather in flight of that version or
 * later done (its status), or that version or later landed (0). ABORTED
 * when none was fetched (dropped: the update that brings it failed).
 * Errors: INVALID_ARGUMENT (slot null). */
int zs_gather_slot_wait(const zs_gather_slot* slot, uint64_t version, char** error);
/* 1 while fetched or landing, *version (if non-null) receiving it; else 0.
 * Never blocks long. 0 for a null slot. */
int zs_gather_slot_pending(const zs_gather_slot* slot, uint64_t* version);

/* The coordinator's verdict after a step failed on the servers
 * (trainer::DecideRecovery, as zerostate-worker's): asks the servers
 * whether they hold the job, waiting up to wait_ms for a silent one
 * (JobClient::EndIfLost, which deletes a job that lost a server on the
 * servers that answer, so no rank waits there), then *roll_back = 1 to
 * roll back to `last_checkpoint` (NULL or "": none), else 0 with *why
 * (malloc'd; release with zs_free_string) saying why not, and *lost = 1
 * when the job is gone on some server (*why then names it and says what
 * to do). `off` and `enable` name the driver's checkpoint setting in that
 * advice ("checkpoint_every=0", "checkpoint_every=N"). Errors:
 * INVALID_ARGUMENT naming a null argument (job, off, enable, roll_back,
 * lost, why) or a negative wait_ms, nothing asked; the servers' when
 * they cannot be asked. */
int zs_recovery_verdict(zs_job* job, int64_t wait_ms, const char* last_checkpoint,
                        const char* off, const char* enable, int* roll_back, int* lost,
                        char** why, char** error);

#ifdef __cplusplus
}
#endif

#endif /* ZEROSTATE_TRAINER_ENGINE_ZEROSTATE_ENGINE_C_H_ */
