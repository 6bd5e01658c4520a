"""zerostate's Kubernetes manifests parse and agree with each other.

  k8s_manifests_test.py BaseTest ...   plain YAML only (python3-yaml)
  k8s_manifests_test.py RenderTest     renders the overlays with
                                       `kubectl kustomize`; exits 77 (skip)
                                       when kubectl is absent
"""
import copy
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

import yaml

import deploylib as lib
import k8s_check as k

K8S = os.path.join(lib.ROOT, "deploy", "k8s")
OVERLAYS = {"dev": False, "prod-nvme": True}  # overlay -> GPUs expected


def load_all(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d]


def kustomization(folder):
    return load_all(os.path.join(folder, "kustomization.yaml"))[0]


def base_objects():
    base = os.path.join(K8S, "base")
    objs = []
    for r in kustomization(base)["resources"]:
        objs += load_all(os.path.join(base, r))
    return objs


def with_monitoring(objs):
    comp = os.path.join(K8S, "components", "monitoring")
    for r in kustomization(comp)["resources"]:
        objs = objs + load_all(os.path.join(comp, r))
    return objs


class ParseTest(unittest.TestCase):
    def test_every_manifest_parses(self):
        files = glob.glob(os.path.join(K8S, "**", "*.yaml"), recursive=True)
        self.assertGreater(len(files), 10)
        for f in files:
            for doc in load_all(f):
                self.assertIn("kind", doc, f)
                self.assertIn("apiVersion", doc, f)

    def test_kustomizations_name_existing_files(self):
        for kfile in glob.glob(os.path.join(K8S, "**", "kustomization.yaml"), recursive=True):
            folder, kz = os.path.dirname(kfile), load_all(kfile)[0]
            paths = kz.get("resources", []) + kz.get("components", [])
            paths += [p["path"] for p in kz.get("patches", []) if "path" in p]
            for g in kz.get("configMapGenerator", []):
                paths += g.get("files", [])
            for p in paths:
                self.assertTrue(os.path.exists(os.path.join(folder, p)), f"{kfile}: {p} missing")


class BaseTest(unittest.TestCase):
    def test_base_and_monitoring_are_consistent(self):
        self.assertEqual(k.check_all(with_monitoring(base_objects())), [])

    def test_images_are_set_by_kustomize(self):
        names = {i["name"] for i in kustomization(os.path.join(K8S, "base"))["images"]}
        objs = k.index(base_objects())
        self.assertIn(k.container(objs[k.SERVER])["image"], names)
        self.assertIn(k.container(objs[k.JOB])["image"], names)

    def test_prometheusrule_wraps_every_rule_group(self):
        script = os.path.join(K8S, "components", "monitoring", "prometheusrule.sh")
        out = subprocess.run(["bash", script], check=True, capture_output=True, text=True).stdout
        rule = yaml.safe_load(out)
        self.assertEqual(rule["kind"], "PrometheusRule")
        groups = {g["name"]: len(g["rules"]) for g in rule["spec"]["groups"]}
        want = {}
        for f in sorted(os.listdir(lib.RULES_DIR)):
            for g in load_all(os.path.join(lib.RULES_DIR, f))[0]["groups"]:
                want[g["name"]] = len(g["rules"])
        self.assertEqual(groups, want)


def mutated(path, value):
    """Base + monitoring objects with one field (a key path) set to value."""
    objs = k.index(copy.deepcopy(with_monitoring(base_objects())))
    node = objs[path[0]]
    for key in path[1:-1]:
        node = node[key]
    node[path[-1]] = value
    return list(objs.values())


def server_arg(name):
    """The key path of the server container's --name=... argument in the base."""
    args = k.container(k.index(base_objects())[k.SERVER])["args"]
    i = next(i for i, a in enumerate(args) if a.startswith(f"--{name}="))
    return k.SERVER, "spec", "template", "spec", "containers", 0, "args", i


class BadManifestTest(unittest.TestCase):
    """Each inconsistency is reported, naming the object and the field."""

    def assertReported(self, objs, *words):
        problems = k.check_all(objs)
        self.assertTrue(any(all(w in p for w in words) for p in problems), problems)

    def test_probe_on_wrong_port(self):
        c = ("StatefulSet", "zerostate"), "spec", "template", "spec", "containers", 0
        objs = mutated(c + ("readinessProbe",), {"tcpSocket": {"port": 9464}})
        self.assertReported(objs, "StatefulSet/zerostate", "readinessProbe", "7070")

    def test_tcp_probe_instead_of_the_health_check(self):
        c = ("StatefulSet", "zerostate"), "spec", "template", "spec", "containers", 0
        objs = mutated(c + ("livenessProbe",), {"tcpSocket": {"port": 7070}})
        self.assertReported(objs, "StatefulSet/zerostate", "livenessProbe", "zerostate health")

    def test_probe_with_another_certificate(self):
        c = ("StatefulSet", "zerostate"), "spec", "template", "spec", "containers", 0
        objs = mutated(c + ("startupProbe",), {"exec": {"command": [
            "/usr/local/bin/zerostate", "health", "localhost:7070", "--tls_ca=/etc/other/ca.crt",
            "--tls_cert=/etc/zerostate/tls/tls.crt", "--tls_key=/etc/zerostate/tls/tls.key"]}})
        self.assertReported(objs, "StatefulSet/zerostate", "startupProbe", "--tls_* files")

    def test_data_plane_off_its_port(self):
        objs = mutated(server_arg("data_listen"), "--data_listen=0.0.0.0:7072")
        self.assertReported(objs, "StatefulSet/zerostate", "--data_listen=0.0.0.0:7072", "7071")

    def test_server_list_shorter_than_replicas(self):
        objs = mutated((k.SERVER, "spec", "replicas"), 5)
        self.assertReported(objs, "ConfigMap/zerostate-worker", "cluster.servers", "5")

    def test_nnodes_not_completions(self):
        objs = mutated((k.JOB, "spec", "completions"), 3)
        self.assertReported(objs, "Job/zerostate-train", "completions=3", "NNODES=2")

    def test_ram_budget_above_memory_limit(self):
        env = k.SERVER, "spec", "template", "spec", "containers", 0, "env", 0
        objs = mutated(env, {"name": "ZEROSTATE_RAM_BUDGET", "value": str(64 << 30)})
        self.assertReported(objs, "StatefulSet/zerostate", f"RAM budget {64 << 30}", "40Gi")

    def test_staging_budget_over_the_ram_budget(self):
        env = k.SERVER, "spec", "template", "spec", "containers", 0, "env", 1
        objs = mutated(env, {"name": "ZEROSTATE_STAGING_BUDGET", "value": str(33 << 30)})
        self.assertReported(objs, "StatefulSet/zerostate", f"staging budget {33 << 30}", "over the RAM budget")

    def test_staging_budget_leaves_no_room_below_the_memory_limit(self):
        env = k.SERVER, "spec", "template", "spec", "containers", 0, "env", 1
        objs = mutated(env, {"name": "ZEROSTATE_STAGING_BUDGET", "value": str(8 << 30)})
        self.assertReported(objs, "StatefulSet/zerostate", f"staging budget {8 << 30}", "40Gi")

    def test_staging_budget_not_set_from_its_variable(self):
        objs = mutated(server_arg("staging_budget_bytes"), "--staging_budget_bytes=4294967296")
        self.assertReported(objs, "StatefulSet/zerostate", "--staging_budget_bytes", "ZEROSTATE_STAGING_BUDGET")

    def test_max_data_connections_zero(self):
        objs = mutated(server_arg("max_data_connections"), "--max_data_connections=0")
        self.assertReported(objs, "StatefulSet/zerostate", "--max_data_connections=0")

    def test_checkpoint_dir_the_servers_do_not_mount(self):
        c = k.JOB, "spec", "template", "spec", "containers", 0
        args = k.container(k.index(base_objects())[k.JOB])["args"] + ["--checkpoint_dir=/checkpoints"]
        objs = mutated(c + ("args",), args)
        self.assertReported(objs, "StatefulSet/zerostate", "--checkpoint_dir=/checkpoints")

    def test_ram_budget_not_in_bytes(self):
        env = k.SERVER, "spec", "template", "spec", "containers", 0, "env", 0
        objs = mutated(env, {"name": "ZEROSTATE_RAM_BUDGET", "value": "32Gi"})
        self.assertReported(objs, "StatefulSet/zerostate", "ZEROSTATE_RAM_BUDGET=32Gi", "byte count")

    def test_service_not_headless(self):
        objs = mutated((k.SERVICE, "spec", "clusterIP"), "10.0.0.1")
        self.assertReported(objs, "Service/zerostate", "clusterIP")

    def test_node_rank_not_from_completion_index(self):
        env = k.JOB, "spec", "template", "spec", "containers", 0, "env", 2
        objs = mutated(env, {"name": "NODE_RANK", "value": "0"})
        self.assertReported(objs, "Job/zerostate-train", "NODE_RANK", "completion index")

    def test_gpus_not_processes(self):
        lim = k.JOB, "spec", "template", "spec", "containers", 0, "resources", "limits"
        objs = mutated(lim + ("nvidia.com/gpu",), 4)
        self.assertReported(objs, "Job/zerostate-train", "nvidia.com/gpu limit 4", "NPROC_PER_NODE=2")

    def test_worker_series_without_job_label(self):
        labels = k.JOB, "spec", "template", "metadata", "labels"
        objs = mutated(labels + ("zerostate.io/job",), "other")
        self.assertReported(objs, "Job/zerostate-train", "zerostate.io/job=other")

    def test_worker_port_without_job_id_relabelling(self):
        endpoint = ("PodMonitor", "zerostate-worker"), "spec", "podMetricsEndpoints", 3
        objs = mutated(endpoint + ("relabelings",), [])
        self.assertReported(objs, "PodMonitor/zerostate-worker", "metrics-3", "job_id")

    def test_nvme_dir_off_the_state_volume(self):
        c = k.SERVER, "spec", "template", "spec", "containers", 0
        args = [a for a in k.container(k.index(base_objects())[k.SERVER])["args"]
                if not a.startswith("--nvme_dir=")] + ["--nvme_dir=/tmp"]
        self.assertReported(mutated(c + ("args",), args), "StatefulSet/zerostate", "--nvme_dir=/tmp")

    def test_server_without_tls(self):
        c = k.SERVER, "spec", "template", "spec", "containers", 0
        args = [a for a in k.container(k.index(base_objects())[k.SERVER])["args"]
                if not a.startswith("--tls_")] + ["--plaintext"]
        objs = mutated(c + ("args",), args)
        self.assertReported(objs, "StatefulSet/zerostate", "--tls_client_ca missing")
        self.assertReported(objs, "StatefulSet/zerostate", "--plaintext")

    def test_worker_certificate_outside_the_secret(self):
        c = k.JOB, "spec", "template", "spec", "containers", 0
        args = [a for a in k.container(k.index(base_objects())[k.JOB])["args"]
                if not a.startswith("--tls_key=")] + ["--tls_key=/tmp/key.pem"]
        self.assertReported(mutated(c + ("args",), args), "Job/zerostate-train", "--tls_key=/tmp/key.pem")

    def test_job_token_not_from_a_secret(self):
        c = k.JOB, "spec", "template", "spec", "containers", 0
        env = [e for e in k.container(k.index(base_objects())[k.JOB])["env"]
               if e["name"] != "ZEROSTATE_JOB_TOKEN"] + [{"name": "ZEROSTATE_JOB_TOKEN", "value": "x"}]
        self.assertReported(mutated(c + ("env",), env), "Job/zerostate-train", "ZEROSTATE_JOB_TOKEN")

    def test_bad_quantity_is_named(self):
        with self.assertRaisesRegex(ValueError, "36GB"):
            k.quantity("36GB")


class WaitForServersTest(unittest.TestCase):
    """The Job's init container waits for every server of the config."""

    def run_script(self, servers, timeout_s):
        job = k.index(base_objects())[k.JOB]
        init = job["spec"]["template"]["spec"]["initContainers"][0]
        self.assertEqual(init["name"], "wait-for-servers")
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "worker.textproto"), "w") as f:
                f.write("cluster {\n" + "".join(f'  servers: "{s}"\n' for s in servers) + "}\n")
            script = init["args"][0].replace("/etc/zerostate", tmp)
            script = script.replace("timeout 600", f"timeout {timeout_s}")
            return subprocess.run([*init["command"], script], capture_output=True, text=True)

    def test_passes_once_every_server_listens(self):
        with socket.socket() as a, socket.socket() as b:
            for s in (a, b):
                s.bind(("127.0.0.1", 0))
                s.listen()
            servers = [f"127.0.0.1:{s.getsockname()[1]}" for s in (a, b)]
            out = self.run_script(servers, 30)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertEqual(out.stdout.count("is up"), 2)

    def test_fails_naming_the_server_that_never_listens(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]  # bound, not listening: refused
            out = self.run_script([f"127.0.0.1:{port}"], 3)
        self.assertEqual(out.returncode, 1)
        self.assertIn(f"state server 127.0.0.1:{port} not reachable", out.stdout)


def render(overlay):
    out = subprocess.run([shutil.which("kubectl"), "kustomize", os.path.join(K8S, "overlays", overlay)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise AssertionError(f"kubectl kustomize {overlay}: {out.stderr}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


class RenderTest(unittest.TestCase):
    def test_overlays_render_consistent(self):
        for overlay, gpus in OVERLAYS.items():
            objs = render(overlay)
            ns = kustomization(os.path.join(K8S, "overlays", overlay))["namespace"]
            with self.subTest(overlay=overlay):
                self.assertEqual(k.check_all(objs, gpu_expected=gpus) + k.check_namespaced(objs, ns), [])
                for key in (k.SERVER, k.JOB):
                    image = k.container(k.index(objs)[key])["image"]
                    self.assertRegex(image, r"^registry\.example\.com/zerostate/\w+:")

    def test_prod_nvme_has_a_local_volume_per_server(self):
        objs = render("prod-nvme")
        by = k.index(objs)
        sc = by[("StorageClass", "local-nvme")]
        self.assertEqual(sc["provisioner"], "kubernetes.io/no-provisioner")
        self.assertEqual(sc["volumeBindingMode"], "WaitForFirstConsumer")
        claim = by[k.SERVER]["spec"]["volumeClaimTemplates"][0]["spec"]
        pvs = [o for o in objs if o["kind"] == "PersistentVolume"]
        self.assertEqual(len(pvs), by[k.SERVER]["spec"]["replicas"])
        for pv in pvs:
            self.assertEqual(pv["spec"]["storageClassName"], claim["storageClassName"])
            self.assertGreaterEqual(k.quantity(pv["spec"]["capacity"]["storage"]),
                                    k.quantity(claim["resources"]["requests"]["storage"]))
            self.assertIn("local", pv["spec"])

    def test_prod_nvme_mounts_shared_checkpoints_in_every_server(self):
        by = k.index(render("prod-nvme"))
        pod = by[k.SERVER]["spec"]["template"]["spec"]
        mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        self.assertEqual(mounts.get("checkpoints"), "/checkpoints")
        claim = next(v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if v["name"] == "checkpoints")
        self.assertEqual(by[("PersistentVolumeClaim", claim)]["spec"]["accessModes"], ["ReadWriteMany"])

    def test_prod_nvme_workers_mount_the_checkpoints_read_write(self):
        """Rank 0 prunes old checkpoints (--keep_checkpoints) at the servers' path."""
        objs = render("prod-nvme")
        job = k.container(k.index(objs)[k.JOB])
        self.assertEqual(k.flag(job["args"], "checkpoint_dir"), "/checkpoints")
        self.assertEqual(k.claim_mounted_at(k.index(objs)[k.JOB], "/checkpoints"), ("zerostate-checkpoints", False))
        for mount, words in [(None, "is not on the servers' checkpoint volume"),
                             (True, "read-only")]:
            bad = copy.deepcopy(objs)
            c = k.container(k.index(bad)[k.JOB])
            m = next(m for m in c["volumeMounts"] if m["mountPath"] == "/checkpoints")
            if mount is None:
                c["volumeMounts"].remove(m)
            else:
                m["readOnly"] = True
            with self.subTest(words=words):
                problems = k.check_checkpoint_mounts(k.index(bad)[k.SERVER], k.index(bad)[k.JOB])
                self.assertTrue(any("Job/zerostate-train" in p and words in p for p in problems), problems)

    def test_dev_uses_the_default_storage_class(self):
        sts = k.index(render("dev"))[k.SERVER]
        self.assertNotIn("storageClassName", sts["spec"]["volumeClaimTemplates"][0]["spec"])


if __name__ == "__main__":
    if "RenderTest" in sys.argv[1:] and not shutil.which("kubectl"):
        print("SKIP: kubectl (for `kubectl kustomize`) not installed")
        sys.exit(lib.SKIP)
    unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[1:])
