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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))


class Server:
    def __init__(self, binary, args=(), log_dir=None, port=0):
        self.binary, self.args = binary, list(args)
        self.log = tempfile.NamedTemporaryFile("w+", prefix="zs-server-", suffix=".log",
                                               dir=log_dir, delete=False)
        self.proc = subprocess.Popen([binary, f"--listen=127.0.0.1:{port}", "--plaintext",
                                      "--metrics_listen=", "--threads=1",
                                      f"--ram_budget_bytes={64 << 20}", *self.args],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     start_new_session=True)
        deadline = time.monotonic() + 30
        self.address = None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if "listening on" in line:
                words = line.split()
                self.address = words[words.index("on") + 1]
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
        self.__init__(self.binary, self.args, port=int(self.address.rsplit(":", 1)[1]))

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


def start(n, args=()):
    binary = server_binary()
    return [Server(binary, args) for _ in range(n)]
