"""A real Prometheus scrapes a real zerostate cluster while it trains.

Starts, all on 127.0.0.1 with ephemeral ports: two zerostate-server
processes, two simulated nodes of two zerostate-worker processes each
(started by deploy/launcher/zerostate-launch, CPU backend), and Debian's
/usr/bin/prometheus with deploy/prometheus/prometheus.yml's scrape jobs
(targets replaced), the recording and alert rules, a 1s scrape interval and
a temporary storage directory. Then, through Prometheus' HTTP API
(/api/v1/query), it waits until:
  - the job's zerostate_job_steps_total (labelled `job_id` by the server,
    not renamed on scrape) has risen between two queries;
  - every server's byte counters and the workers' client byte counters are
    non-zero, the workers' step counter has risen;
  - the recording rule job_id:zerostate_job_steps:rate1m is > 0;
  - every query of the Grafana dashboard (but the error panels) has data;
then kills one server and waits for ZerostateServerDown to be pending.

  prometheus_integration_test.py SERVER_BINARY WORKER_BINARY
Exits 77 (skip) only when prometheus or one of the binaries is absent.
Every wait has a generous deadline; nothing depends on the machine's speed.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

import yaml

import deploylib as lib

LAUNCH = os.path.join(lib.ROOT, "deploy", "launcher", "zerostate-launch")
EXAMPLE_CONFIG = os.path.join(lib.ROOT, "deploy", "prometheus", "prometheus.yml")
JOB = "promtest"
JOB_TOKEN = "prometheus-integration-test-token-0123456789"  # every worker's job token
DEADLINE_S = 180


class Failure(Exception):
    pass


def free_port_pair():
    """A port p with p and p+1 free on 127.0.0.1 (worker ranks 0 and 1)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", p + 1))
            return p
        except OSError:
            continue
    raise Failure("no two consecutive free ports")


class Proc:
    """A child process whose output a thread copies to its log file; lines
    holding a marker wake whoever waits for them."""

    def __init__(self, name, argv, env, tmp):
        self.name, self.log = name, os.path.join(tmp, f"{name}.log")
        self.popen = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, env=dict(os.environ, **(env or {})),
                                      start_new_session=True)
        self.lines, self.cond = [], threading.Condition()
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        with open(self.log, "w") as log:
            for line in self.popen.stdout:
                log.write(line)
                log.flush()
                with self.cond:
                    self.lines.append(line)
                    self.cond.notify_all()
        with self.cond:
            self.lines.append(None)  # end of output
            self.cond.notify_all()

    def await_line(self, marker, timeout=60):
        """Returns the first output line holding marker."""
        def found():  # [line], [None] at the end of output, or [] (not yet)
            return [l for l in self.lines if l is None or marker in l][:1]
        with self.cond:
            hit = self.cond.wait_for(found, timeout=timeout)
        if not hit:
            raise Failure(f"{self.name}: no '{marker}' line within {timeout}s")
        if hit[0] is None:
            raise Failure(f"{self.name} exited (status {self.popen.wait()}) before printing '{marker}'")
        return hit[0]


class Cluster:
    """The processes of the test; stop() ends every one of them."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = []

    def spawn(self, name, argv, env=None):
        proc = Proc(name, argv, env, self.tmp)
        self.procs.append(proc)
        return proc

    def stop(self):
        for p in self.procs:
            if p.popen.poll() is None:
                os.killpg(p.popen.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.popen.pid, signal.SIGKILL)
                p.popen.wait()

    def logs(self):
        out = []
        for p in self.procs:
            with open(p.log) as f:
                out.append(f"--- {p.name}\n" + f.read()[-3000:])
        return "\n".join(out)


def start_servers(cluster, server_bin, extra_args=([], [])):
    """Two servers (extra_args: more flags for each); [(grpc, metrics, Proc)]."""
    servers = []
    for i, extra in enumerate(extra_args):
        p = cluster.spawn(f"server{i}", [server_bin, "--listen=127.0.0.1:0", "--plaintext",
                                         "--metrics_listen=127.0.0.1:0", "--threads=1",
                                         f"--ram_budget_bytes={256 << 20}", *extra])
        words = p.await_line("listening on").split()
        servers.append((words[words.index("on") + 1], words[-1], p))  # grpc, metrics, proc
    return servers


def start_workers(cluster, worker_bin, servers, tmp):
    config = os.path.join(tmp, "worker.textproto")
    with open(config, "w") as f:
        # Small blocks, so that both servers own a shard of the small MLP.
        f.write('train { steps: 1000000 block_elems: 1024 }\ncluster { metrics_host: "127.0.0.1" }\n')
    targets = []
    for node in range(2):
        port = free_port_pair()
        targets += [f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}"]
        argv = ["bash", LAUNCH, "--nnodes", "2", "--nproc-per-node", "2", "--node-rank", str(node),
                "--", worker_bin, f"--config={config}", f"--job_id={JOB}",
                "--servers=" + ",".join(s[0] for s in servers), "--plaintext",
                f"--metrics_port={port}"]
        cluster.spawn(f"node{node}", argv, {"ZEROSTATE_JOB_TOKEN": JOB_TOKEN})
    return targets


def prometheus_config(servers, workers, path):
    """The example config with its targets replaced, scraping every second."""
    with open(EXAMPLE_CONFIG) as f:
        cfg = yaml.safe_load(f)
    cfg["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    cfg["rule_files"] = [os.path.join(os.path.dirname(EXAMPLE_CONFIG), r) for r in cfg["rule_files"]]
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    jobs["zerostate-server"]["static_configs"] = [{"targets": [s[1] for s in servers]}]
    jobs["zerostate-worker"]["static_configs"] = [{"targets": workers,
                                                   "labels": {"job_id": JOB}}]
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)


def start_prometheus(cluster, binary, config, tmp):
    port = free_port_pair()
    cluster.spawn("prometheus", [binary, f"--config.file={config}",
                                 f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
                                 f"--web.listen-address=127.0.0.1:{port}"])
    return f"http://127.0.0.1:{port}"


def query(api, expr):
    """Instant query; returns {frozenset(labels): value}. Errors are failures."""
    url = f"{api}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise Failure(f"query {expr}: {body}")
    return {frozenset(s["metric"].items()): float(s["value"][1]) for s in body["data"]["result"]}


def wait_for(what, check, deadline):
    """Calls check() about once a second until it returns True."""
    last = None
    while time.monotonic() < deadline:
        try:
            if check():
                print(f"ok   {what}")
                return
        except (OSError, ValueError) as e:  # Prometheus not up yet
            last = e
        time.sleep(1)
    raise Failure(f"timed out waiting for: {what} (last error: {last})")


def total(api, expr):
    return sum(query(api, expr).values())


def run(server_bin, worker_bin, prom_bin, tmp):
    cluster = Cluster(tmp)
    try:
        servers = start_servers(cluster, server_bin)
        workers = start_workers(cluster, worker_bin, servers, tmp)
        config = os.path.join(tmp, "prometheus.yml")
        prometheus_config(servers, workers, config)
        api = start_prometheus(cluster, prom_bin, config, tmp)
        deadline = time.monotonic() + DEADLINE_S
        checks(api, deadline)
        dashboard_checks(api, deadline)
        print_figures(api)
        servers[1][2].popen.kill()
        wait_for("ZerostateServerDown pending or firing for the killed server",
                 lambda: server_down_alert(api, servers[1][1]), deadline)
    except Failure:
        print(cluster.logs())
        raise
    finally:
        cluster.stop()


def checks(api, deadline):
    steps = f'sum(zerostate_job_steps_total{{job_id="{JOB}"}})'
    wait_for("both servers scraped", lambda: total(api, 'up{job="zerostate-server"} == 1') == 2, deadline)
    wait_for("the four workers scraped", lambda: total(api, 'up{job="zerostate-worker"} == 1') == 4, deadline)
    wait_for("zerostate_job_steps_total of the job is > 0", lambda: total(api, steps) > 0, deadline)
    first = total(api, steps)
    wait_for(f"zerostate_job_steps_total rising above {first:g}", lambda: total(api, steps) > first, deadline)
    for metric in ("zerostate_rpc_bytes_received_total", "zerostate_rpc_bytes_sent_total"):
        wait_for(f"{metric} > 0 on both servers",
                 lambda m=metric: len(query(api, f"sum by (instance) ({m}) > 0")) == 2, deadline)
    for metric in ("zerostate_client_bytes_sent_total", "zerostate_client_bytes_received_total"):
        wait_for(f"{metric} > 0 towards both servers",
                 lambda m=metric: len(query(api, f'sum by (server) ({m}{{job_id="{JOB}"}}) > 0')) == 2,
                 deadline)
    wait_for("zerostate_worker_steps_total > 0",
             lambda: total(api, f'zerostate_worker_steps_total{{job_id="{JOB}"}}') > 0, deadline)
    wait_for("recording rule job_id:zerostate_job_steps:rate1m > 0",
             lambda: total(api, f'job_id:zerostate_job_steps:rate1m{{job_id="{JOB}"}}') > 0,
             deadline)


FIGURES = [  # (what, recording rule, unit): printed, never asserted
    ("job steps/s", "job_id:zerostate_job_steps:rate1m", ""),
    ("optimizer params/s", "job_id:zerostate_optimizer_params:rate1m", ""),
    ("bytes in/s", "instance:zerostate_rpc_bytes_received:rate1m", "B"),
    ("bytes out/s", "instance:zerostate_rpc_bytes_sent:rate1m", "B"),
]


def print_figures(api):
    """What Prometheus measured of the run, through the recording rules."""
    for what, rule, unit in FIGURES:
        for labels, value in sorted(query(api, rule).items()):
            where = ",".join(f"{k}={v}" for k, v in sorted(labels) if k != "__name__")
            print(f"figure {what} [{where}]: {value:.4g}{unit}")


# Panels that show only errors, empty while nothing goes wrong, and the NVMe
# tier's, empty for this job on the RAM tier (the worker has no tier setting).
MAY_BE_EMPTY = {"Errors by reason", "Client retries", "Tier traffic per server",
                "Tier I/O latency p99", "Tier cache hit ratio", "Tier queue depth"}


def dashboard_checks(api, deadline):
    """Every panel of the Grafana dashboard shows data for the job."""
    for title, expr in lib.dashboard_queries(lib.load_dashboard()):
        if title in MAY_BE_EMPTY:
            continue
        expr = expr.replace("$__rate_interval", "10s").replace("$job", JOB)
        wait_for(f"dashboard panel '{title}' has data: {expr[:60]}...",
                 lambda e=expr: len(query(api, e)) > 0, deadline)


def server_down_alert(api, instance):
    url = f"{api}/api/v1/alerts"
    with urllib.request.urlopen(url, timeout=10) as r:
        alerts = json.load(r)["data"]["alerts"]
    return any(a["labels"].get("alertname") == "ZerostateServerDown"
               and a["labels"].get("instance") == instance for a in alerts)


def main():
    bins = sys.argv[1:3]
    prom = shutil.which("prometheus") or "/usr/bin/prometheus"
    if len(bins) < 2 or not all(os.access(b, os.X_OK) for b in bins) or not os.access(prom, os.X_OK):
        print(f"SKIP: needs prometheus ({prom}) and the built binaries ({bins})")
        return lib.SKIP
    return run_in_tmp(lambda tmp: run(bins[0], bins[1], prom, tmp),
                      "Prometheus saw the job step and the bytes flow")


def run_in_tmp(body, passed):
    """Runs body(tmp) in a temporary directory; prints PASS or FAIL and
    returns the exit code."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            body(tmp)
        except Failure as e:
            print(f"FAIL: {e}")
            return 1
    print(f"PASS: {passed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
