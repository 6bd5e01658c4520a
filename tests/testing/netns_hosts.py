"""Hosts as separate machines on one Linux box: each host a network
namespace with one veth link to a shared bridge, each link rate-limited by
the tbf qdisc in both directions, and partitions made by sending a host's
packets nowhere while every process keeps running.

    hosts = NetnsHosts(["etcd", "s0", "s1", "t0"], gbit=10)
    hosts["s0"].ip                      # "10.77.0.11"
    hosts.popen("s0", [binary, ...])    # a process in s0's namespace
    hosts.partition("s1", ["etcd", "t0"])  # s1 no longer reaches etcd, t0
    hosts.heal("s1")
    hosts.close()

Latency is not modelled: netem is not in this kernel, so a link has the
tbf rate and a queue of 20 ms of it, and nothing else.

Names: every namespace and link of one instance starts with
"zsn<pid><letter>" (at most 15 characters with the host's suffix, the
kernel's limit for a link). An instance removes its own on close(), at
interpreter exit (atexit) and on SIGTERM, SIGINT or SIGHUP; a run killed
with SIGKILL leaves them behind, and the next instance (of any run)
removes those whose pid no longer runs, killing what still runs in them.
The processes started here get PR_SET_PDEATHSIG=SIGKILL, so they die with
the thread that started them.

Every host sits on 10.77.0.0/24 of its own bridge; the root namespace has
no address there, so two runs at once never see each other's hosts.
"""

import atexit
import ctypes
import os
import re
import signal
import subprocess
import threading

PREFIX = "zsn"
SUBNET = "10.77.0"
_NOWHERE = "02:00:00:00:00:01"  # a locally administered MAC no host has
_STALE = re.compile(rf"^{PREFIX}(\d+)[a-z]")
_counter = iter("abcdefghijklmnopqrstuvwxyz")
_counter_lock = threading.Lock()


class Unavailable(Exception):
    """Namespaces, veth links or tbf cannot be made here (the reason)."""


def _ip(*args, check=True):
    """Runs `ip ARGS`; raises RuntimeError with its stderr on failure."""
    return _run(["ip", *args], check)


def _tc(*args, check=True):
    return _run(["tc", *args], check)


def _run(argv, check):
    p = subprocess.run(argv, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {p.stderr.strip() or p.returncode}")
    return p


def _pid_alive(pid):
    """Whether process `pid` runs (a zombie, not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def remove_stale():
    """Removes the namespaces and links of instances whose process is gone
    (a run killed with SIGKILL), killing the processes left in them."""
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = _STALE.match(name)
        if m and not _pid_alive(int(m.group(1))):
            _remove_netns(name)
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        fields = line.split(":")
        if len(fields) < 2:
            continue
        name = fields[1].strip().split("@")[0]
        m = _STALE.match(name)
        if m and not _pid_alive(int(m.group(1))):
            _ip("link", "del", name, check=False)


def _remove_netns(name):
    pids = _ip("netns", "pids", name, check=False).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    _ip("netns", "del", name, check=False)


def _pdeathsig():
    """In the child, before exec: SIGKILL when the starting thread dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def tbf_args(gbit):
    """The tbf parameters of a link of `gbit` Gbit/s: a bucket of 2 ms of
    the rate (at least 256 KiB, so a 64 KiB GSO segment always fits) and a
    queue of 20 ms of it."""
    rate_bytes = gbit * 1e9 / 8
    burst = max(int(rate_bytes * 0.002), 256 << 10)
    return ["rate", f"{int(gbit * 1000)}mbit", "burst", str(burst), "latency", "20ms"]


def probe():
    """None when namespaces, veth links, a bridge and tbf work here; else
    the reason, for a test's skip message."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "tc"):
        if _run(["which", tool], check=False).returncode != 0:
            return f"no `{tool}` (iproute2; scripts/install-deps.sh installs it)"
    try:
        with NetnsHosts(["p0", "p1"], gbit=1):
            pass
    except (RuntimeError, Unavailable) as e:
        return f"cannot make namespaced hosts here: {e}"
    return None


class Host:
    """One host: its namespace, its address, its link's two ends."""

    def __init__(self, name, ns, ip, veth):
        self.name, self.ns, self.ip, self.veth = name, ns, ip, veth
        self.gbit = None


class NetnsHosts:
    """The hosts named in `names` (lower-case letters and digits, at most 4
    characters), in that order at 10.77.0.1, .2, ..., each link at `gbit`
    Gbit/s each way. Raises Unavailable (and removes what it made) when
    something cannot be made. Thread safety: one thread at a time."""

    def __init__(self, names, gbit):
        remove_stale()
        with _counter_lock:
            self.prefix = f"{PREFIX}{os.getpid()}{next(_counter)}"
        self.hosts = {}
        self._cut = set()  # frozensets of two host names
        self._closed = False
        atexit.register(self.close)
        _install_signal_handlers()
        self.bridge = self.prefix + "br"
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("link", "set", self.bridge, "up")
            for i, name in enumerate(names):
                self._add_host(name, i + 1)
            self.set_rate(gbit)
        except RuntimeError as e:
            self.close()
            raise Unavailable(str(e)) from e

    def _add_host(self, name, index):
        if not re.fullmatch(r"[a-z0-9]{1,4}", name):
            raise ValueError(f"host name {name!r}: 1-4 lower-case letters or digits")
        ns, veth = f"{self.prefix}-{name}", self.prefix + name
        _ip("netns", "add", ns)
        self.hosts[name] = Host(name, ns, f"{SUBNET}.{index}", veth)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("link", "set", veth, "master", self.bridge, "up")
        _ip("-n", ns, "addr", "add", f"{SUBNET}.{index}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "link", "set", "eth0", "up")

    def __getitem__(self, name):
        return self.hosts[name]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def set_rate(self, gbit, names=None):
        """Caps each named host's link (default: all) at `gbit` Gbit/s each
        way: tbf on the host's eth0 (what it sends) and on the bridge's end
        (what it receives). The byte counters go on counting."""
        for name in names or self.hosts:
            h = self.hosts[name]
            _tc("-n", h.ns, "qdisc", "replace", "dev", "eth0", "root", "tbf", *tbf_args(gbit))
            _tc("qdisc", "replace", "dev", h.veth, "root", "tbf", *tbf_args(gbit))
            h.gbit = gbit

    def link_bytes(self, name):
        """{"out": bytes host `name` sent, "in": bytes it received} through
        its link's tbf since it was made, Ethernet headers included."""
        h = self.hosts[name]
        out = _tc("-s", "-n", h.ns, "qdisc", "show", "dev", "eth0").stdout
        into = _tc("-s", "qdisc", "show", "dev", h.veth).stdout
        return {"out": _sent_bytes(out), "in": _sent_bytes(into)}

    def partition(self, name, peers=None):
        """Cuts host `name` off from `peers` (host names; None: every other
        host), both ways, silently (no reset, no ICMP, no error to a
        sender): a host that dropped off the network while it keeps running.
        Each side gets a permanent neighbour entry that sends its packets
        for the other to a MAC no host has (this kernel has no tc drop
        action). Adds to an earlier partition of `name`."""
        for peer in (p for p in peers or self.hosts if p != name):
            for a, b in ((name, peer), (peer, name)):
                _ip("-n", self.hosts[a].ns, "neigh", "replace", self.hosts[b].ip, "lladdr",
                    _NOWHERE, "dev", "eth0", "nud", "permanent")
            self._cut.add(frozenset((name, peer)))

    def heal(self, name):
        """Ends every cut of host `name` (a no-op without one): ARP finds
        the real addresses again."""
        for pair in [c for c in self._cut if name in c]:
            a, b = tuple(pair)
            for x, y in ((a, b), (b, a)):
                _ip("-n", self.hosts[x].ns, "neigh", "del", self.hosts[y].ip, "dev", "eth0",
                    check=False)
            self._cut.discard(pair)

    def popen(self, name, argv, **kwargs):
        """subprocess.Popen of `argv` in host `name`'s namespace, killed
        (SIGKILL) when the calling thread dies."""
        return subprocess.Popen(["ip", "netns", "exec", self.hosts[name].ns, *argv],
                                preexec_fn=_pdeathsig, **kwargs)

    def close(self):
        """Kills what still runs in the hosts and removes them; idempotent."""
        if self._closed:
            return
        self._closed = True
        for h in self.hosts.values():
            _remove_netns(h.ns)
            _ip("link", "del", h.veth, check=False)
        _ip("link", "del", self.bridge, check=False)


def _sent_bytes(tc_stats):
    m = re.search(r"Sent (\d+) bytes", tc_stats)
    return int(m.group(1)) if m else 0


_handlers_installed = False


def _install_signal_handlers():
    """SIGTERM, SIGINT and SIGHUP end the interpreter through SystemExit,
    so atexit removes the hosts; a handler the program set is kept."""
    global _handlers_installed
    if _handlers_installed or threading.current_thread() is not threading.main_thread():
        return
    _handlers_installed = True

    def leave(signum, _frame):
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) in (signal.SIG_DFL, None):
            signal.signal(sig, leave)
