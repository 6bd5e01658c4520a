"""The C API of client/zerostate_c.h, trainer/zerostate_trainer_c.h (the
step policy) and trainer/engine/zerostate_engine_c.h (the bucket plan, the
push thread, the coordinator's step, the step in flight) through ctypes.

The library is found in this order: $ZEROSTATE_CLIENT_LIB (a path), a
libzerostate_client.so next to this package, the build tree of a source
checkout (build/client/), then the loader's search path."""

import ctypes
import os

DTYPE_FP32 = 1
DTYPE_BF16 = 2
DTYPE_FP16 = 3

# gRPC code numbers, as the C API returns them.
CODE_NAMES = {
    1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND", 6: "ALREADY_EXISTS", 7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED",
    9: "FAILED_PRECONDITION", 10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED",
    13: "INTERNAL", 14: "UNAVAILABLE", 15: "DATA_LOSS", 16: "UNAUTHENTICATED",
}

_u64, _u32, _sz, _int = ctypes.c_uint64, ctypes.c_uint32, ctypes.c_size_t, ctypes.c_int
_p, _cp = ctypes.c_void_p, ctypes.c_char_p
_err = ctypes.POINTER(ctypes.c_void_p)  # char** (read as void* to free it ourselves)


class ClientOptions(ctypes.Structure):
    _fields_ = [
        ("servers", ctypes.POINTER(ctypes.c_char_p)), ("num_servers", _sz),
        ("channels_per_server", _int), ("streams_per_server", _int),
        ("chunk_bytes", _sz), ("max_bytes_in_flight", _sz), ("rpc_timeout_ms", ctypes.c_int64),
        ("max_attempts", _int), ("initial_backoff_ms", ctypes.c_int64),
        ("max_backoff_ms", ctypes.c_int64), ("threads", _int),
        ("tls_ca_file", _cp), ("tls_cert_file", _cp), ("tls_key_file", _cp),
        ("plaintext", _int), ("job_token", _cp), ("data_plane_off", _int),
        ("unavailable_wait_ms", ctypes.c_int64),
        ("keepalive_time_ms", ctypes.c_int64), ("keepalive_timeout_ms", ctypes.c_int64),
    ]


class StepDecision(ctypes.Structure):
    """zs_step_decision (trainer/zerostate_trainer_c.h)."""
    _fields_ = [("skip", _int), ("grad_scale", ctypes.c_float), ("grad_norm", ctypes.c_double),
                ("clip_factor", ctypes.c_double), ("lr", ctypes.c_float),
                ("next_loss_scale", ctypes.c_float)]


class Bucket(ctypes.Structure):
    """zs_bucket (trainer/engine/zerostate_engine_c.h)."""
    _fields_ = [("begin", _u64), ("end", _u64), ("share_begin", _u64), ("share_end", _u64),
                ("staging", _u64), ("chunk", _u64)]


class Verdict(ctypes.Structure):
    """zs_verdict (trainer/engine/zerostate_engine_c.h)."""
    _fields_ = [("active", _int), ("step", _u64), ("coordinated", _int), ("refused", _int),
                ("code", _int), ("decision", StepDecision)]


WAIT_FN = ctypes.CFUNCTYPE(_int, _p)  # zs_wait_fn


class Wait(ctypes.Structure):
    """zs_wait (trainer/engine/zerostate_engine_c.h)."""
    _fields_ = [("fn", WAIT_FN), ("arg", _p)]


_SIGNATURES = {
    "zs_client_options_init": (None, [ctypes.POINTER(ClientOptions)]),
    "zs_connect": (_int, [ctypes.POINTER(ClientOptions), ctypes.POINTER(_p), _err]),
    "zs_client_free": (None, [_p]),
    "zs_client_bytes": (None, [_p, ctypes.POINTER(_u64), ctypes.POINTER(_u64)]),
    "zs_client_zero_copy_bytes": (None, [_p, ctypes.POINTER(_u64), ctypes.POINTER(_u64)]),
    "zs_allocate_shared": (_int, [_p, _sz, ctypes.POINTER(_p), ctypes.POINTER(_sz), _err]),
    "zs_register_job_json": (_int, [_p, _cp, ctypes.POINTER(_p), _err]),
    "zs_attach_job": (_int, [_p, _cp, ctypes.POINTER(_p), _err]),
    "zs_restore_job": (_int, [_p, _cp, _u32, ctypes.POINTER(_p), _err]),
    "zs_job_free": (None, [_p]),
    "zs_job_total_elems": (_u64, [_p]),
    "zs_job_used_elems": (_u64, [_p]),
    "zs_job_num_nodes": (_u32, [_p]),
    "zs_job_tensor_range": (_int, [_p, _cp, ctypes.POINTER(_u64), ctypes.POINTER(_u64), _err]),
    "zs_push_async": (None, [_p, _u64, _u32, _u64, _u64, _p, _sz, _int, ctypes.POINTER(_p)]),
    "zs_ticket_wait": (_int, [_p, _err]),
    "zs_ticket_free": (None, [_p]),
    "zs_grad_stats": (_int, [_p, _u64, ctypes.POINTER(ctypes.c_double),
                             ctypes.POINTER(_u64), _err]),
    "zs_step_with_state": (_int, [_p, _u64, ctypes.c_float, ctypes.c_float, _int, _p, _sz,
                                  _err]),
    "zs_step_ahead": (_int, [_p, _u64, ctypes.c_float, ctypes.c_float, _err]),
    "zs_trainer_state": (_int, [_p, _u64, ctypes.POINTER(_p), ctypes.POINTER(_sz), _err]),
    "zs_gather_async": (None, [_p, _u64, _u64, _u64, _p, _sz, _int, ctypes.POINTER(_p)]),
    "zs_gather_master": (_int, [_p, _u64, _u64, _u64, _p, _sz, _err]),
    "zs_init_weights": (_int, [_p, _u64, _u64, _p, _sz, _err]),
    "zs_version": (_int, [_p, ctypes.POINTER(_u64), _err]),
    "zs_checkpoint": (_int, [_p, _u64, _cp, ctypes.POINTER(_p), _err]),
    "zs_job_delete": (_int, [_p, _err]),
    "zs_job_end_if_lost": (_int, [_p, ctypes.c_int64, ctypes.POINTER(_p), _err]),
    "zs_parse_ds_config": (_int, [_cp, ctypes.POINTER(_p), ctypes.POINTER(_p), _err]),
    "zs_policy_create": (_int, [_cp, ctypes.POINTER(_p), _err]),
    "zs_policy_free": (None, [_p]),
    "zs_policy_decide": (_int, [_p, _u64, ctypes.c_double, _u64, ctypes.c_double,
                                ctypes.POINTER(StepDecision), _err]),
    "zs_policy_loss_scale": (ctypes.c_float, [_p]),
    "zs_policy_skipped": (_int, [_p]),
    "zs_policy_learning_rate": (ctypes.c_float, [_p, _u64]),
    "zs_policy_ends_delayed": (_int, [_p, _u64, _int]),
    "zs_policy_unclipped_grad_scale": (_int, [_p, ctypes.c_double,
                                              ctypes.POINTER(ctypes.c_float), _err]),
    "zs_policy_state": (_int, [_p, ctypes.POINTER(_p), ctypes.POINTER(_sz), _err]),
    "zs_policy_restore": (_int, [_p, _p, _sz, _err]),
    "zs_job_bucket_plan": (_int, [_p, ctypes.POINTER(_u64), _sz, _u64, _u32, _u32,
                                  ctypes.POINTER(Bucket), _sz, ctypes.POINTER(_sz), _err]),
    "zs_local_share": (_int, [_u64, _u64, _u32, _u32, ctypes.POINTER(_u64),
                              ctypes.POINTER(_u64), ctypes.POINTER(_u64), _err]),
    "zs_pusher_create": (_int, [ctypes.POINTER(_p), _err]),
    "zs_pusher_free": (None, [_p]),
    "zs_pusher_push": (_int, [_p, _p, _u64, _u32, _u64, _u64, _p, _sz, _int,
                              ctypes.POINTER(Wait), _sz, _err]),
    "zs_pusher_mark": (_u64, [_p]),
    "zs_pusher_drain": (_int, [_p, _u64, ctypes.POINTER(_p), _err]),
    "zs_pusher_wait_through": (_int, [_p, _u64, _err]),
    "zs_pusher_done_through": (_int, [_p, _u64]),
    "zs_coordinate": (_int, [_p, _p, _u64, ctypes.c_double, ctypes.c_float, _int,
                             ctypes.POINTER(Wait), ctypes.POINTER(StepDecision),
                             ctypes.POINTER(_p), _err]),
    "zs_send_ahead": (_int, [_p, _p, _u64, ctypes.c_double, ctypes.c_float, _int, _err]),
    "zs_in_flight_create": (_int, [ctypes.POINTER(_p), _err]),
    "zs_in_flight_free": (None, [_p]),
    "zs_in_flight_start": (_int, [_p, _p, _p, _u64, ctypes.c_double, ctypes.c_float, _int,
                                  ctypes.POINTER(Wait), _p, _u64, _err]),
    "zs_in_flight_follow": (_int, [_p, _u64, _p, _u64, _err]),
    "zs_in_flight_fail": (_int, [_p, _u64, _int, _cp, _int, _p, _u64, _err]),
    "zs_in_flight_active": (_int, [_p, ctypes.POINTER(_u64)]),
    "zs_in_flight_take": (_int, [_p, _p, ctypes.POINTER(Verdict), ctypes.POINTER(_p),
                                 ctypes.POINTER(_p), _err]),
    "zs_in_flight_wait_gathers_out": (_int, [_p, _u64]),
    "zs_abandon": (None, [_p, _p, ctypes.POINTER(_p), _sz]),
    "zs_gather_slot_create": (_int, [_u64, _u64, ctypes.POINTER(_p), _err]),
    "zs_gather_slot_free": (None, [_p]),
    "zs_gather_slot_fetch": (_int, [_p, _p, _u64, _p, _sz, _int, _err]),
    "zs_gather_slot_land": (_int, [_p, ctypes.POINTER(_int), _err]),
    "zs_gather_slot_landed": (_int, [_p, ctypes.POINTER(Wait), _err]),
    "zs_gather_slot_drop": (_int, [_p, _err]),
    "zs_gather_slot_wait": (_int, [_p, _u64, _err]),
    "zs_gather_slot_pending": (_int, [_p, ctypes.POINTER(_u64)]),
    "zs_recovery_verdict": (_int, [_p, ctypes.c_int64, _cp, _cp, _cp, ctypes.POINTER(_int),
                                   ctypes.POINTER(_int), ctypes.POINTER(_p), _err]),
    "zs_job_token": (_p, [_p]),
    "zs_job_set_pushes_held": (None, [_p, _int]),
    "zs_free_string": (None, [_p]),
}


def _candidates():
    env = os.environ.get("ZEROSTATE_CLIENT_LIB")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "libzerostate_client.so")
    root = os.path.dirname(os.path.dirname(here))
    yield os.path.join(root, "build", "client", "libzerostate_client.so")
    yield "libzerostate_client.so"


def _load():
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(f"{path} (absent)")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({e})")
            continue
        for name, (res, args) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        return lib
    raise ImportError("zerostate: cannot load libzerostate_client.so (build it with `make` or "
                      "set ZEROSTATE_CLIENT_LIB); tried: " + "; ".join(tried))


lib = _load()


def _held(names):
    """The functions `names` of `lib` called with the GIL held (ctypes.PyDLL):
    those that never block and call no Python. A call that lets the GIL go
    hands it to whichever thread waits for it (the push thread's waits are
    Python), and the caller, e.g. a backward hook queueing a bucket's push,
    then waits to take it back."""
    held = ctypes.PyDLL(lib._name, handle=lib._handle)
    for name in names:
        fn = getattr(held, name)
        fn.restype, fn.argtypes = _SIGNATURES[name]
    return held


# zs_pusher_push only queues (trainer::Pusher::Submit): a mutex held for a
# queue's push_back, never while a wait runs; zs_pusher_mark and
# _done_through read counts under it (and tickets' states).
# zs_in_flight_active reads a state under a mutex never held while waiting;
# so do zs_gather_slot_landed and _pending (not _drop: it waits for the
# gather it cancels).
held = _held(["zs_pusher_push", "zs_pusher_mark", "zs_pusher_done_through",
              "zs_in_flight_active", "zs_gather_slot_landed",
              "zs_gather_slot_pending"])


def take_string(ptr):
    """The malloc'd C string at `ptr` as str; frees it."""
    if not ptr:
        return ""
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        lib.zs_free_string(ptr)


def take_bytes(ptr, n):
    """The `n` malloc'd bytes at `ptr`; frees them."""
    try:
        return ctypes.string_at(ptr, n) if ptr else b""
    finally:
        lib.zs_free_string(ptr)
