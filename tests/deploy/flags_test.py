"""Every flag that deploy/ passes to zerostate-server or zerostate-worker
(Kubernetes args, args that kustomizations append, the systemd unit, the
bare-metal launcher example) is a
flag the built binary knows: absl rejects an unknown flag at start, which
would crash-loop a pod.

  flags_test.py SERVER_BINARY WORKER_BINARY
Exits 77 (skip) when either binary is absent.
"""
import glob
import os
import re
import subprocess
import sys
import unittest

import yaml

import deploylib as lib

K8S = os.path.join(lib.ROOT, "deploy", "k8s")
SYSTEMD = os.path.join(lib.ROOT, "deploy", "systemd")
FLAG = re.compile(r"--([a-z][a-z0-9_]*)(?:=|\b)")


def known_flags(binary):
    out = subprocess.run([binary, "--helpfull"], capture_output=True, text=True)
    return set(re.findall(r"^\s+--(\w+) \(", out.stdout + out.stderr, re.M))


def k8s_args(kind):
    """{file: [args]} of every container of `kind` objects under deploy/k8s."""
    found = {}
    for f in glob.glob(os.path.join(K8S, "**", "*.yaml"), recursive=True):
        with open(f, encoding="utf-8") as fh:
            for doc in yaml.safe_load_all(fh):
                if doc and doc.get("kind") == kind:
                    for c in doc["spec"]["template"]["spec"].get("containers", []):
                        if c.get("args"):
                            found[f] = c["args"]
    return found


def kustomize_patch_args(kind):
    """{file: [args]} that kustomizations append to `kind` objects' args
    (inline JSON patches adding to .../args/-)."""
    found = {}
    for f in glob.glob(os.path.join(K8S, "**", "kustomization.yaml"), recursive=True):
        with open(f, encoding="utf-8") as fh:
            kz = yaml.safe_load(fh)
        for p in kz.get("patches", []):
            if p.get("target", {}).get("kind") != kind or "patch" not in p:
                continue
            for op in yaml.safe_load(p["patch"]) or []:
                if op.get("path", "").endswith("/args/-") and isinstance(op.get("value"), str):
                    found.setdefault(f, []).append(op["value"])
    return found


def systemd_server_flags():
    with open(os.path.join(SYSTEMD, "zerostate-server.service"), encoding="utf-8") as f:
        return FLAG.findall(f.read().split("ExecStart=", 1)[1].split("\n\n")[0])


def launcher_worker_flags():
    with open(os.path.join(SYSTEMD, "train-node.sh"), encoding="utf-8") as f:
        code = "".join(l for l in f if not l.lstrip().startswith("#"))
    return FLAG.findall(code.split("zerostate-worker", 1)[1])


def unknown(used, known):
    return sorted(set(used) - known)


class FlagsTest(unittest.TestCase):
    server = worker = None

    def test_server_flags_in_kubernetes_and_systemd(self):
        known = known_flags(self.server)
        self.assertIn("listen", known, "could not read --helpfull")
        used = systemd_server_flags()
        self.assertGreaterEqual(len(used), 4)
        self.assertEqual(unknown(used, known), [], "zerostate-server.service")
        for f, args in {**k8s_args("StatefulSet"), **kustomize_patch_args("StatefulSet")}.items():
            self.assertEqual(unknown(FLAG.findall(" ".join(args)), known), [], f)

    def test_worker_flags_in_kubernetes_and_launcher_example(self):
        known = known_flags(self.worker)
        self.assertIn("config", known, "could not read --helpfull")
        self.assertEqual(unknown(launcher_worker_flags(), known), [], "train-node.sh")
        jobs = k8s_args("Job")
        self.assertGreaterEqual(len(jobs), 2)
        for f, args in jobs.items():
            worker_args = args[args.index("--") + 1:] if "--" in args else args
            self.assertEqual(unknown(FLAG.findall(" ".join(worker_args)), known), [], f)
        patched = kustomize_patch_args("Job")
        self.assertTrue(patched, "no kustomization appends worker args (prod-nvme's checkpoints)")
        for f, args in patched.items():
            self.assertEqual(unknown(FLAG.findall(" ".join(args)), known), [], f)

    def test_every_server_chooses_a_transport(self):
        """--tls_cert and --tls_key, or --plaintext: a server without either exits."""
        for name, flags in [("zerostate-server.service", systemd_server_flags())] + [
                (f, FLAG.findall(" ".join(a))) for f, a in k8s_args("StatefulSet").items()]:
            tls = {"tls_cert", "tls_key"} <= set(flags)
            self.assertTrue(tls != ("plaintext" in flags), f"{name}: {sorted(flags)}")

    def test_an_unknown_flag_is_named(self):
        self.assertEqual(unknown(FLAG.findall("--listen=x --listen_port=1 --plaintext"), {"listen"}),
                         ["listen_port", "plaintext"])


if __name__ == "__main__":
    bins = sys.argv[1:3]
    if len(bins) < 2 or not all(os.access(b, os.X_OK) for b in bins):
        print(f"SKIP: zerostate-server or zerostate-worker not built: {bins}")
        sys.exit(lib.SKIP)
    FlagsTest.server, FlagsTest.worker = bins
    unittest.main(argv=[sys.argv[0], "-v"])
