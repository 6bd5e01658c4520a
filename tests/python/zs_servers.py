"""Real zerostate-server processes for the Python tests: started on
127.0.0.1 with ephemeral ports (--plaintext), the address read from the
"listening on" line, stopped with SIGTERM (SIGKILL after 20 s)."""

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))


class Server:
    def __init__(self, binary, args=(), log_dir=None, port=0, plaintext=True):
        self.binary, self.args = binary, list(args)
        self.log = tempfile.NamedTemporaryFile("w+", prefix="zs-server-", suffix=".log",
                                               dir=log_dir, delete=False)
        self.plaintext = plaintext
        self.proc = subprocess.Popen([binary, f"--listen=127.0.0.1:{port}",
                                      *(["--plaintext"] if plaintext else []),
                                      "--metrics_listen=", "--threads=1",
                                      f"--ram_budget_bytes={64 << 20}", *self.args],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     start_new_session=True)
        deadline = time.monotonic() + 30
        self.address = self.metrics_address = None  # the latter with --metrics_listen
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if "listening on" in line:
                words = line.split()
                self.address = words[words.index("on") + 1]
                if "metrics" in words:
                    self.metrics_address = words[words.index("metrics") + 2]
                break
        if self.address is None:
            self.stop()
            raise RuntimeError(f"{binary} did not start: " + open(self.log.name).read()[-2000:])
        # Keep reading stdout so the server never blocks on a full pipe.
        self.reader = threading.Thread(target=self.proc.stdout.read, daemon=True)
        self.reader.start()

    def restart(self):
        """A new process on the same port (a server that crashed and came
        back, without its jobs)."""
        self.stop(signal.SIGKILL)
        self.start_again()

    def start_again(self):
        """After stop(): a new process on the same port, without the jobs."""
        self.__init__(self.binary, self.args, port=int(self.address.rsplit(":", 1)[1]),
                      plaintext=self.plaintext)

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        if hasattr(self, "reader"):
            self.reader.join(timeout=5)
        self.proc.stdout.close()


def server_binary():
    path = os.environ.get("ZEROSTATE_SERVER")
    if not path:
        path = os.path.join(ROOT, "build", "server", "zerostate-server")
    if not os.path.exists(path):
        print(f"skipped: no zerostate-server at {path}")
        sys.exit(77)
    return path


def metric(address, name, **labels):
    """The sum of the series `name` whose labels include `labels`, scraped
    from a server's --metrics_listen `address` ("host:port", a Server's
    metrics_address); 0 when there is none."""
    text = urllib.request.urlopen(f"http://{address}/metrics", timeout=10).read()
    total = 0.0
    for line in text.decode().splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        series, value = line.rsplit(" ", 1)
        if all(f'{k}="{v}"' in series for k, v in labels.items()):
            total += float(value)
    return total


def start(n, args=(), plaintext=True):
    binary = server_binary()
    return [Server(binary, args, plaintext=plaintext) for _ in range(n)]


class ServersTestCase(unittest.TestCase):
    """Two servers for the test class (self.servers, self.addresses); the
    engines a test puts in self.engines are closed after it. server_args:
    the servers' extra flags (last: they win)."""

    server_args = ()

    @classmethod
    def setUpClass(cls):
        cls.servers = start(2, cls.server_args)
        cls.addresses = ",".join(s.address for s in cls.servers)

    @classmethod
    def tearDownClass(cls):
        for s in cls.servers:
            s.stop()

    def setUp(self):
        self.engines = []

    def tearDown(self):
        for e in self.engines:
            e.close()  # the servers then stop at once


def make_certificates(directory):
    """A CA, a server certificate for 127.0.0.1 and a client certificate it
    signed (EC P-256, by the openssl tool, as tests/testing/test_certificates.h);
    {name: path}. Exit 77 (skipped) without openssl."""
    new_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def run(*argv):
        try:
            subprocess.run(["openssl", *argv], cwd=directory, check=True, capture_output=True)
        except FileNotFoundError:
            print("skipped: no openssl")
            sys.exit(77)

    with open(os.path.join(directory, "server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("req", "-x509", *new_key, "-days", "2", "-subj", "/CN=zs-test-ca", "-keyout", "ca.key",
        "-out", "ca.pem")
    for name, ext in (("server", ["-extfile", "server.ext"]), ("client", [])):
        run("req", *new_key, "-subj", f"/CN=zs-test-{name}", "-keyout", f"{name}.key", "-out",
            f"{name}.csr")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", *ext)
    return {n: os.path.join(directory, n) for n in
            ("ca.pem", "server.pem", "server.key", "client.pem", "client.key")}
