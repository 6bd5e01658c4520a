"""A zerostate cluster of separate hosts on one box (netns_hosts.py): etcd
on one host, each state server on its own host, each trainer node (a
zerostate-worker process) on its own, every host's link capped at the
given Gbit/s. For the partition tests and bench/cluster.

    with NetnsCluster(state_hosts=3, trainer_nodes=2, gbit=10) as c:
        c.start_etcd()                          # "10.77.0.1:2379"
        servers = c.start_servers(server_binary, ttl_seconds=2)
        # ["10.77.0.11:7000", "10.77.0.12:7000", "10.77.0.13:7000"]
        node = c.start_worker(0, worker_binary, flags, env)
        c.hosts.partition("s1", ["etcd", "t0", "t1"])

Every process's output goes to a log file under c.dir, and the time each
line arrived is kept (Proc.wait_for), so a test measures when a step
finished relative to a cut. Host names: "etcd", "s<i>", "t<j>".
Thread safety: one thread at a time.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from netns_hosts import NetnsHosts  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVER_PORT = 7000  # every server has a host of its own, so one port serves
ETCD_PORT = 2379
ETCD_BINARY = os.environ.get("ZEROSTATE_ETCD", "/usr/bin/etcd")


def binary(env_name, build_path):
    """The binary named by $env_name, else build/<build_path> of the tree;
    None when it does not exist."""
    path = os.environ.get(env_name) or os.path.join(ROOT, "build", build_path)
    return path if os.path.exists(path) else None


class Proc:
    """A process on a host: its output (stdout and stderr) appended to
    `log` line by line, each line's arrival time (time.monotonic()) kept."""

    def __init__(self, popen, log):
        self.popen, self.log = popen, log
        self.lines = []  # (time, line)
        self._cv = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        with open(self.log, "a") as out:
            for line in self.popen.stdout:
                out.write(line)
                out.flush()
                with self._cv:
                    self.lines.append((time.monotonic(), line))
                    self._cv.notify_all()
        with self._cv:
            self._cv.notify_all()

    def wait_for(self, pattern, timeout, after=0.0):
        """The arrival time of the first line after time `after` that
        matches regex `pattern`; None if the process ended or `timeout`
        seconds passed first."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cv:
            seen = 0
            while True:
                for t, line in self.lines[seen:]:
                    if t > after and regex.search(line):
                        return t
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0 or (not self._reader.is_alive() and seen == len(self.lines)):
                    return None
                self._cv.wait(min(left, 0.5))

    def matches(self, pattern, after=0.0):
        """[(arrival time, re.Match)] of the lines after time `after` that
        match regex `pattern`, so far."""
        regex = re.compile(pattern)
        with self._cv:
            found = [(t, regex.search(line)) for t, line in self.lines if t > after]
        return [(t, m) for t, m in found if m]

    def text(self):
        with self._cv:
            return "".join(line for _, line in self.lines)

    def wait(self, timeout):
        """The exit code; None (and the process killed) past `timeout` s."""
        try:
            code = self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None
        self._reader.join(timeout=5)
        return code

    def kill(self, sig=signal.SIGKILL):
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            self.popen.wait()
        self._reader.join(timeout=5)


class NetnsCluster:
    """The hosts of a cluster and the processes on them; close() (or the
    with block's end) kills every process and removes the hosts."""

    def __init__(self, state_hosts, trainer_nodes, gbit, etcd=True):
        names = (["etcd"] if etcd else []) + [f"s{i}" for i in range(state_hosts)] + \
            [f"t{j}" for j in range(trainer_nodes)]
        self.hosts = NetnsHosts(names, gbit)
        self.state_hosts, self.trainer_nodes = state_hosts, trainer_nodes
        self.dir = tempfile.mkdtemp(prefix=f"{self.hosts.prefix}-")
        self.procs = []
        self.servers = []
        self.etcd_endpoint = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self, keep_dir=False):
        for p in self.procs:
            p.kill()
        self.hosts.close()
        if not keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def start(self, host, argv, log_name, env=None):
        """Starts `argv` on `host`; a Proc logging to c.dir/<log_name>.log."""
        popen = self.hosts.popen(host, argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, text=True,
                                 env={**os.environ, **(env or {})})
        proc = Proc(popen, os.path.join(self.dir, log_name + ".log"))
        self.procs.append(proc)
        return proc

    def start_etcd(self, timeout=30):
        """etcd on host "etcd" (a member of its own; peers on its loopback);
        its client endpoint once it serves. RuntimeError with its log when
        it does not start."""
        ip, peer = self.hosts["etcd"].ip, "http://127.0.0.1:2380"
        url = f"http://{ip}:{ETCD_PORT}"
        proc = self.start("etcd", [ETCD_BINARY, "--name=zs", f"--data-dir={self.dir}/etcd",
                                   f"--listen-client-urls={url}", f"--advertise-client-urls={url}",
                                   f"--listen-peer-urls={peer}",
                                   f"--initial-advertise-peer-urls={peer}",
                                   f"--initial-cluster=zs={peer}"], "etcd")
        if proc.wait_for("ready to serve client requests", timeout) is None:
            raise RuntimeError("etcd did not start:\n" + proc.text()[-3000:])
        self.etcd_endpoint = f"{ip}:{ETCD_PORT}"
        return self.etcd_endpoint

    def start_servers(self, server_binary, args=(), ttl_seconds=2, per_server_args=None,
                      timeout=30):
        """A zerostate-server on each state host, listening on its address
        (plaintext), members of this cluster's etcd when it was started
        (`ttl_seconds` leases); `per_server_args[i]` is added to server i's
        flags. Their addresses in shard order. RuntimeError with the log of a
        server that does not start."""
        addresses = []
        for i in range(self.state_hosts):
            host = f"s{i}"
            address = f"{self.hosts[host].ip}:{SERVER_PORT}"
            argv = [server_binary, f"--listen={address}", "--plaintext", "--threads=1"]
            if self.etcd_endpoint:
                argv += [f"--etcd_endpoints={self.etcd_endpoint}",
                         f"--cluster={self.hosts.prefix}",
                         f"--etcd_lease_ttl_seconds={ttl_seconds}"]
            argv += list(args) + list((per_server_args or {}).get(i, ()))
            proc = self.start(host, argv, f"server{i}")
            if proc.wait_for("listening on", timeout) is None:
                raise RuntimeError(f"server {i} did not start:\n" + proc.text()[-3000:])
            self.servers.append(proc)
            addresses.append(address)
        return addresses

    def metrics(self, server):
        """The Prometheus page of server `server` (its --metrics_listen
        default, port 9464 of its host), read from inside its host."""
        ip = self.hosts[f"s{server}"].ip
        p = self.hosts.popen(f"s{server}", [sys.executable, "-c",
                             f"import urllib.request,sys;sys.stdout.write(urllib.request.urlopen"
                             f"('http://{ip}:9464/metrics',timeout=10).read().decode())"],
                             stdout=subprocess.PIPE, text=True)
        return p.communicate(timeout=30)[0]

    def start_worker(self, node, worker_binary, flags, env, log_name=None):
        """zerostate-worker as trainer node `node` (NODE_RANK) on host
        t<node>, with `flags` and the extra environment `env`."""
        return self.start(f"t{node}", [worker_binary, *flags],
                          log_name or f"worker{node}", {**env, "NODE_RANK": str(node)})


def longest_stall(worker, after):
    """(seconds, step): the longest zerostate-worker process `worker`
    went without printing a step's progress line from time `after` on, and
    the step whose line ended it (a failover's cost, where steps are
    otherwise short)."""
    steps = worker.matches(r"^step (\d+) loss", after)
    starts = [after] + [t for t, _ in steps]
    return max((end - start, int(m.group(1))) for start, (end, m) in zip(starts, steps))


def metric(page, name):
    """The value of series `name` (labels as the page writes them) on a
    Prometheus page; None when it is missing."""
    for line in page.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None
