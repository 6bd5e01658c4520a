"""The state service's client for Python: Client (channels to every
server) and Job (one job across them), thin wrappers over the C API that
turn every failure into a ZerostateError carrying the gRPC code name."""

import ctypes
import json
import os
import threading

from zerostate import _capi
from zerostate._capi import lib


class ZerostateError(RuntimeError):
    """A failed call: `code` is the gRPC code's name ("UNAVAILABLE", ...)."""

    def __init__(self, message, code="UNKNOWN"):
        super().__init__(message)
        self.code = code


def _check(rc, err, what):
    if rc != 0:
        message = _capi.take_string(err.value)
        raise ZerostateError(f"{what}: {_capi.CODE_NAMES.get(rc, rc)}: {message}",
                             _capi.CODE_NAMES.get(rc, str(rc)))


def _call(what, fn, *args):
    err = ctypes.c_void_p()
    _check(fn(*args, ctypes.byref(err)), err, what)


class Ticket:
    """An asynchronous push or gather; wait() raises its error, each time
    it is called, from any thread. The buffer it reads or writes is kept
    alive until then."""

    def __init__(self, handle, what, keep, job):
        self._handle, self._what, self._keep = handle, what, keep
        self._job = job  # the job's handle outlives its calls
        self._lock = threading.Lock()
        self._error = None

    def wait(self):
        with self._lock:
            if self._handle is not None:
                handle, self._handle = self._handle, None
                err = ctypes.c_void_p()
                rc = lib.zs_ticket_wait(handle, ctypes.byref(err))
                lib.zs_ticket_free(handle)
                self._keep = self._job = None
                try:
                    _check(rc, err, self._what)
                except ZerostateError as e:
                    self._error = e
        if self._error is not None:
            raise self._error

    def __del__(self):
        if self._handle is not None:
            lib.zs_ticket_wait(self._handle, None)
            lib.zs_ticket_free(self._handle)


class Job:
    """One job on every server. Methods raise ZerostateError."""

    def __init__(self, handle, job_id):
        self._h = ctypes.c_void_p(handle)
        self.job_id = job_id

    def close(self):
        if self._h:
            lib.zs_job_free(self._h)
            self._h = ctypes.c_void_p()

    def __del__(self):
        self.close()

    @property
    def total_elems(self):
        return lib.zs_job_total_elems(self._h)

    @property
    def num_nodes(self):
        return lib.zs_job_num_nodes(self._h)

    @property
    def token(self):
        return _capi.take_string(lib.zs_job_token(self._h))

    def set_pushes_held(self, held):
        """Whether pushes from shared buffers promise the servers that the
        buffer stays unchanged until the push's step is applied
        (JobClient::SetPushesHeld): a server on this host then reads the
        gradient there at the step instead of copying it as it lands."""
        lib.zs_job_set_pushes_held(self._h, int(bool(held)))

    def tensor_range(self, name):
        b, e = ctypes.c_uint64(), ctypes.c_uint64()
        _call(f"job {self.job_id}: tensor '{name}'", lib.zs_job_tensor_range, self._h,
              name.encode(), ctypes.byref(b), ctypes.byref(e))
        return b.value, e.value

    def push_async(self, step, node, begin, end, ptr, nbytes, dtype, keep=None):
        t = ctypes.c_void_p()
        lib.zs_push_async(self._h, step, node, begin, end, ptr, nbytes, dtype, ctypes.byref(t))
        return Ticket(t, f"job {self.job_id}: push of step {step} [{begin}, {end})", keep, self)

    def gather_async(self, min_version, begin, end, ptr, nbytes, dtype, keep=None):
        t = ctypes.c_void_p()
        lib.zs_gather_async(self._h, min_version, begin, end, ptr, nbytes, dtype, ctypes.byref(t))
        return Ticket(t, f"job {self.job_id}: gather of version {min_version} [{begin}, {end})",
                      keep, self)

    def gather_master(self, min_version, begin, end, ptr, nbytes):
        _call(f"job {self.job_id}: gather of masters", lib.zs_gather_master, self._h,
              min_version, begin, end, ptr, nbytes)

    def grad_stats(self, step):
        ss, bad = ctypes.c_double(), ctypes.c_uint64()
        _call(f"job {self.job_id}: gradient statistics of step {step}", lib.zs_grad_stats,
              self._h, step, ctypes.byref(ss), ctypes.byref(bad))
        return ss.value, bad.value

    def step(self, step, lr, grad_scale, skip=False, state=b""):
        _call(f"job {self.job_id}: step {step}", lib.zs_step_with_state, self._h, step, lr,
              grad_scale, int(skip), state or None, len(state))

    def step_ahead(self, step, lr, grad_scale):
        _call(f"job {self.job_id}: step {step} sent ahead", lib.zs_step_ahead, self._h, step, lr,
              grad_scale)

    def trainer_state(self, version):
        out, n = ctypes.c_void_p(), ctypes.c_size_t()
        _call(f"job {self.job_id}: trainer state of version {version}", lib.zs_trainer_state,
              self._h, version, ctypes.byref(out), ctypes.byref(n))
        return _capi.take_bytes(out.value, n.value)

    def init_weights(self, begin, end, ptr, nbytes):
        _call(f"job {self.job_id}: initial weights", lib.zs_init_weights, self._h, begin, end,
              ptr, nbytes)

    def version(self):
        v = ctypes.c_uint64()
        _call(f"job {self.job_id}: version", lib.zs_version, self._h, ctypes.byref(v))
        return v.value

    def checkpoint(self, version, root):
        path = ctypes.c_void_p()
        _call(f"job {self.job_id}: checkpoint of version {version}", lib.zs_checkpoint,
              self._h, version, os.path.abspath(root).encode(), ctypes.byref(path))
        return _capi.take_string(path.value)

    def delete(self):
        _call(f"job {self.job_id}: delete", lib.zs_job_delete, self._h)

    def end_if_lost(self, wait):
        """After a failed step: "" if every server holds the job, else the
        account naming the server that lost its shard or did not answer
        within `wait` seconds, the job then deleted on the servers that
        answer (JobClient::EndIfLost)."""
        account = ctypes.c_void_p()
        _call(f"job {self.job_id}: end if lost", lib.zs_job_end_if_lost, self._h,
              int(wait * 1000), ctypes.byref(account))
        return _capi.take_string(account.value)


class Client:
    """Channels to every server (ClientOptions of client/client.h)."""

    def __init__(self, servers, plaintext=False, tls_ca_file=None, tls_cert_file=None,
                 tls_key_file=None, job_token=None, rpc_timeout_ms=None, max_attempts=None,
                 unavailable_wait_ms=None, data_plane=True):
        self._h = ctypes.c_void_p()
        if isinstance(servers, str):
            servers = [s.strip() for s in servers.split(",") if s.strip()]
        opts = _capi.ClientOptions()
        lib.zs_client_options_init(ctypes.byref(opts))
        self._servers = (ctypes.c_char_p * len(servers))(*[s.encode() for s in servers])
        self._strings = [x.encode() if x else None
                         for x in (tls_ca_file, tls_cert_file, tls_key_file, job_token)]
        opts.servers, opts.num_servers = self._servers, len(servers)
        opts.tls_ca_file, opts.tls_cert_file, opts.tls_key_file, opts.job_token = self._strings
        opts.plaintext = int(bool(plaintext))
        opts.data_plane_off = int(not data_plane)  # gRPC for pushes and gathers
        if rpc_timeout_ms is not None:
            opts.rpc_timeout_ms = int(rpc_timeout_ms)
        if max_attempts is not None:
            opts.max_attempts = int(max_attempts)
        if unavailable_wait_ms is not None:
            opts.unavailable_wait_ms = int(unavailable_wait_ms)
        h = ctypes.c_void_p()
        _call("connect to " + ",".join(servers), lib.zs_connect, ctypes.byref(opts),
              ctypes.byref(h))
        self._h = h
        self.servers = list(servers)

    def close(self):
        if self._h:
            lib.zs_client_free(self._h)
            self._h = ctypes.c_void_p()

    def __del__(self):
        self.close()

    def bytes(self):
        """(pushed, gathered): payload bytes this client moved since it
        connected, every server and job together (the client library's
        counters, zs_client_bytes)."""
        pushed, gathered = ctypes.c_uint64(), ctypes.c_uint64()
        lib.zs_client_bytes(self._h, ctypes.byref(pushed), ctypes.byref(gathered))
        return pushed.value, gathered.value

    def zero_copy_bytes(self):
        """(pushed, gathered): of bytes(), those a server on this host
        read from or wrote into a shared buffer in place
        (zs_client_zero_copy_bytes)."""
        pushed, gathered = ctypes.c_uint64(), ctypes.c_uint64()
        lib.zs_client_zero_copy_bytes(self._h, ctypes.byref(pushed), ctypes.byref(gathered))
        return pushed.value, gathered.value

    def allocate_shared(self, nbytes):
        """(address, size) of a new shared buffer of at least `nbytes`
        (zs_allocate_shared): zeroed, page-aligned memory that a state
        server on this host reads pushes from and writes gathers into in
        place, the client copying nothing (elsewhere ordinary memory). It
        stays mapped until this client and its jobs are closed."""
        data, size = ctypes.c_void_p(), ctypes.c_size_t()
        _call(f"allocate a shared buffer of {nbytes} bytes", lib.zs_allocate_shared, self._h,
              int(nbytes), ctypes.byref(data), ctypes.byref(size))
        return data.value, size.value

    def register_job(self, spec):
        """Registers (or attaches to, when equal) the job of `spec`, a
        zerostate.v1.JobSpec as a dict in protobuf's JSON mapping."""
        h = ctypes.c_void_p()
        _call(f"register job {spec.get('job_id')}", lib.zs_register_job_json, self._h,
              json.dumps(spec).encode(), ctypes.byref(h))
        return Job(h.value, spec.get("job_id"))

    def attach_job(self, job_id):
        h = ctypes.c_void_p()
        _call(f"attach to job {job_id}", lib.zs_attach_job, self._h, job_id.encode(),
              ctypes.byref(h))
        return Job(h.value, job_id)

    def restore_job(self, path, job_id, num_nodes=0):
        h = ctypes.c_void_p()
        _call(f"restore {path}", lib.zs_restore_job, self._h, path.encode(), num_nodes,
              ctypes.byref(h))
        return Job(h.value, job_id)


def connect(servers, **options):
    return Client(servers, **options)


def parse_ds_config(text):
    """(TrainConfig as a dict, [warnings]) for a ds_config.json text, by the
    worker's rules (worker/ds_config.h). Raises ZerostateError naming the key."""
    out, warn = ctypes.c_void_p(), ctypes.c_void_p()
    _call("ds_config", lib.zs_parse_ds_config, text.encode(), ctypes.byref(out),
          ctypes.byref(warn))
    warnings = _capi.take_string(warn.value)
    return json.loads(_capi.take_string(out.value)), [w for w in warnings.split("\n") if w]
