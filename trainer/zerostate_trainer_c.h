/* The trainer's step policy (trainer/policy.h) as a C API, for drivers in
 * other languages (zerostate.torch through ctypes): the clip factor, the
 * fp16 overflow skip and loss scale, the learning rate of each step, and
 * the trainer_state blob that the Step carries. In libzerostate_client.so,
 * beside the client's C API (client/zerostate_c.h).
 *
 * Errors: a call that can fail returns a status code in the gRPC
 * numbering (0 = OK, 3 = INVALID_ARGUMENT, 15 = DATA_LOSS: the ZS_* codes
 * of client/zerostate_c.h); when it is not 0 and `error` is non-null,
 * *error receives a malloc'd message naming what was wrong (release it
 * with zs_free_string or free()); on 0 *error is set to NULL. A call that
 * fails leaves the policy as it was.
 *
 * Thread safety: a zs_policy is used by one thread at a time. */
#ifndef ZEROSTATE_TRAINER_ZEROSTATE_TRAINER_C_H_
#define ZEROSTATE_TRAINER_ZEROSTATE_TRAINER_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zs_policy zs_policy;

/* One step's decision (trainer::StepDecision). */
typedef struct zs_step_decision {
  int skip;               /* non-finite gradients: Step with skip, weights unchanged */
  float grad_scale;       /* the Step's grad_scale: 1/(loss_scale*average_over) * clip_factor */
  double grad_norm;       /* L2 norm of the averaged, unscaled gradient (0 when skipped) */
  double clip_factor;     /* <= 1 */
  float lr;               /* the step's learning rate (the schedule) */
  float next_loss_scale;  /* the loss scale of the next step (1 unless fp16) */
} zs_step_decision;

/* A policy for a job of `train_json`: a zerostate.v1.TrainConfig in
 * protobuf's JSON mapping (zs_parse_ds_config's *train_json; the policy
 * reads precision, gradient_clipping, lr, loss_scaling and steps; absent
 * fields take the worker's defaults). Errors: INVALID_ARGUMENT (not JSON,
 * an unknown field, a value out of range: naming the field). */
int zs_policy_create(const char* train_json, zs_policy** out, char** error);
void zs_policy_free(zs_policy* policy);

/* Decides step `step` from its summed gradient's statistics (sum of
 * squares and count of non-finite values of loss * loss scale, summed
 * over `average_over` rank micro-batches) and moves the loss scale on.
 * Errors: INVALID_ARGUMENT naming the argument (average_over not finite
 * and >= 1, sum_squares negative, out null). */
int zs_policy_decide(zs_policy* policy, uint64_t step, double sum_squares, uint64_t nonfinite,
                     double average_over, zs_step_decision* out, char** error);

/* The loss scale of the next step; whether the last step decided (or
 * restored) was skipped; the learning rate of step `step`. */
float zs_policy_loss_scale(const zs_policy* policy);
int zs_policy_skipped(const zs_policy* policy);
float zs_policy_learning_rate(const zs_policy* policy, uint64_t step);

/* The grad_scale zs_policy_decide gives when nothing is clipped and the
 * gradients are finite (what a speculative step sends ahead).
 * Errors: INVALID_ARGUMENT (average_over, out null). */
int zs_policy_unclipped_grad_scale(const zs_policy* policy, double average_over, float* out,
                                   char** error);

/* Whether step `step` ends with its update in flight (the delayed
 * update; trainer::Policy::EndsDelayed): 1 or 0. next_is_sync_point != 0:
 * version step + 1 is a checkpoint or the run's last, which ends
 * synchronously. */
int zs_policy_ends_delayed(const zs_policy* policy, uint64_t step, int next_is_sync_point);

/* The trainer_state blob of the policy now (what zs_step_with_state
 * carries; empty unless fp16): malloc'd into *blob (NUL-terminated text),
 * *len bytes; release with zs_free_string. Errors: INVALID_ARGUMENT (null
 * out-parameters). */
int zs_policy_state(const zs_policy* policy, char** blob, size_t* len, char** error);

/* Takes a blob of zs_policy_state or zs_trainer_state (`len` bytes).
 * Errors: DATA_LOSS naming what is malformed. */
int zs_policy_restore(zs_policy* policy, const void* blob, size_t len, char** error);

#ifdef __cplusplus
}
#endif

#endif /* ZEROSTATE_TRAINER_ZEROSTATE_TRAINER_C_H_ */
