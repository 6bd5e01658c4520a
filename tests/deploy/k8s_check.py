"""Checks of the fields that matter in zerostate's Kubernetes manifests.

Debian has no schema-aware Kubernetes validator and CI reaches no network
but Debian's archive, so these checks read the objects as plain YAML
(python3-yaml) and check what a schema cannot: that ports, probes, volumes,
the launcher variables, the server list and the monitoring objects agree
with each other. Each check returns a list of problems, each naming the
object and the field; an empty list means the objects are consistent.
"""
import re

SERVER = ("StatefulSet", "zerostate")
SERVICE = ("Service", "zerostate")
JOB = ("Job", "zerostate-train")
PDB = ("PodDisruptionBudget", "zerostate")
CONFIG = ("ConfigMap", "zerostate-worker")
LAUNCH_VARS = {"NNODES", "NPROC_PER_NODE", "NODE_RANK"}
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
UNITS = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
         "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def quantity(q):
    """Bytes (or units) of a Kubernetes quantity such as '36Gi' or '4e9'."""
    m = re.fullmatch(r"([0-9.e+]+)([KMGT]i?|k)?", str(q))
    if not m:
        raise ValueError(f"not a quantity: {q!r}")
    return float(m.group(1)) * UNITS[m.group(2) or ""]


def index(objects):
    return {(o["kind"], o["metadata"]["name"]): o for o in objects if o}


def container(obj):
    return obj["spec"]["template"]["spec"]["containers"][0]


def env_of(c):
    return {e["name"]: e for e in c.get("env", [])}


def ports_of(c):
    return {p["name"]: p["containerPort"] for p in c.get("ports", [])}


def flag(args, name):
    for a in args:
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
    return None


def textproto_values(text, field):
    return re.findall(rf'^\s*{field}:\s*"?([^"\n]*)"?\s*$', text, re.M)


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def check_server_ports_and_probes(sts):
    problems = []
    c = container(sts)
    ports = ports_of(c)
    for name in ("grpc", "data", "metrics"):
        if name not in ports:
            problems.append(f"StatefulSet/zerostate: container port '{name}' missing")
    if problems:
        return problems
    listen, metrics = flag(c.get("args", []), "listen"), flag(c.get("args", []), "metrics_listen")
    if not listen or not listen.endswith(f":{ports['grpc']}"):
        problems.append(f"StatefulSet/zerostate: --listen={listen} is not port grpc {ports['grpc']}")
    if not metrics or not metrics.endswith(f":{ports['metrics']}"):
        problems.append(f"StatefulSet/zerostate: --metrics_listen={metrics} is not port metrics {ports['metrics']}")
    data = flag(c.get("args", []), "data_listen")
    if not data or not data.endswith(f":{ports['data']}"):
        problems.append(f"StatefulSet/zerostate: --data_listen={data} is not port data {ports['data']}")
    # Exec probes running `zerostate health` on the gRPC port with the
    # server's own TLS files: Kubernetes' gRPC probe speaks plaintext only.
    args = c.get("args", [])
    # (A server without TLS is check_security's to report.)
    want = {f"--{probe_flag}={flag(args, server_flag)}"
            for probe_flag, server_flag in (("tls_ca", "tls_client_ca"), ("tls_cert", "tls_cert"),
                                            ("tls_key", "tls_key"))
            if flag(args, server_flag) is not None}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        command = c.get(probe, {}).get("exec", {}).get("command", [])
        ok = (command[1:3] == ["health", f"localhost:{ports['grpc']}"]
              and command[0].endswith("/zerostate") and want <= set(command))
        if not ok:
            problems.append(f"StatefulSet/zerostate: {probe} is not `zerostate health localhost:{ports['grpc']}` "
                            f"with the server's --tls_* files (got {command or c.get(probe)})")
    annotated = sts["spec"]["template"]["metadata"].get("annotations", {}).get("prometheus.io/port")
    if annotated != str(ports["metrics"]):
        problems.append(f"StatefulSet/zerostate: annotation prometheus.io/port={annotated}, metrics port is {ports['metrics']}")
    return problems


def check_server_resources(sts):
    problems = []
    c = container(sts)
    res = c.get("resources", {})
    req, lim = res.get("requests", {}), res.get("limits", {})
    for key in ("cpu", "memory"):
        if key not in req:
            problems.append(f"StatefulSet/zerostate: resources.requests.{key} missing")
    if "memory" not in lim or lim.get("memory") != req.get("memory"):
        problems.append("StatefulSet/zerostate: memory limit must equal the request (state is not swappable)")
    budget = env_of(c).get("ZEROSTATE_RAM_BUDGET", {}).get("value")
    if budget is None or flag(c.get("args", []), "ram_budget_bytes") != "$(ZEROSTATE_RAM_BUDGET)":
        problems.append("StatefulSet/zerostate: --ram_budget_bytes is not set from ZEROSTATE_RAM_BUDGET")
    elif not budget.isdigit():
        problems.append(f"StatefulSet/zerostate: ZEROSTATE_RAM_BUDGET={budget} is not a byte count")
    elif "memory" in lim and quantity(budget) >= quantity(lim["memory"]):
        problems.append(f"StatefulSet/zerostate: RAM budget {budget} is not below the memory limit {lim['memory']}")
    if not sts["spec"]["template"]["spec"].get("securityContext", {}).get("runAsNonRoot"):
        problems.append("StatefulSet/zerostate: securityContext.runAsNonRoot is not true")
    return problems


def check_server_budgets(sts):
    """--staging_budget_bytes from ZEROSTATE_STAGING_BUDGET, at most the RAM
    budget (else the server refuses to start), both below the memory limit;
    --max_data_connections a count of at least 1 (else the same)."""
    problems = []
    c = container(sts)
    args, env = c.get("args", []), env_of(c)
    budget = env.get("ZEROSTATE_RAM_BUDGET", {}).get("value")
    staging = env.get("ZEROSTATE_STAGING_BUDGET", {}).get("value")
    limit = c.get("resources", {}).get("limits", {}).get("memory")
    if staging is None or flag(args, "staging_budget_bytes") != "$(ZEROSTATE_STAGING_BUDGET)":
        problems.append("StatefulSet/zerostate: --staging_budget_bytes is not set from ZEROSTATE_STAGING_BUDGET")
    elif not staging.isdigit():
        problems.append(f"StatefulSet/zerostate: ZEROSTATE_STAGING_BUDGET={staging} is not a byte count")
    elif budget is not None and budget.isdigit():
        if int(staging) > int(budget):
            problems.append(f"StatefulSet/zerostate: staging budget {staging} is over the RAM budget {budget}")
        elif limit is not None and int(budget) + int(staging) >= quantity(limit):
            problems.append(f"StatefulSet/zerostate: RAM budget {budget} + staging budget {staging} "
                            f"is not below the memory limit {limit}")
    conns = flag(args, "max_data_connections")
    if conns is None or not conns.isdigit() or int(conns) < 1:
        problems.append(f"StatefulSet/zerostate: --max_data_connections={conns} is not a count of at least 1")
    return problems


def claim_mounted_at(obj, path):
    """(claim name, read-only) of the persistentVolumeClaim volume whose mount
    holds `path` (the deepest one), or (None, False)."""
    spec = obj["spec"]["template"]["spec"]
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"]
              for v in spec.get("volumes", []) if "persistentVolumeClaim" in v}
    best = None
    for m in container(obj).get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/")
        if m["name"] in claims and (path == mp or path.startswith(mp + "/")):
            if best is None or len(mp) > len(best["mountPath"].rstrip("/")):
                best = m
    return (claims[best["name"]], bool(best.get("readOnly"))) if best else (None, False)


def check_checkpoint_mounts(sts, job):
    """Where the workers checkpoint (--checkpoint_dir), the servers write and
    rank 0 deletes old checkpoints (--keep_checkpoints): both mount the same
    shared claim there, the workers read-write."""
    ckpt = flag(container(job).get("args", []), "checkpoint_dir")
    if ckpt is None:
        return []
    server_claim, _ = claim_mounted_at(sts, ckpt)
    worker_claim, read_only = claim_mounted_at(job, ckpt)
    if server_claim is None:
        return [f"StatefulSet/zerostate: no shared volume mounted at the workers' --checkpoint_dir={ckpt}"]
    if worker_claim != server_claim:
        return [f"Job/zerostate-train: --checkpoint_dir={ckpt} is not on the servers' checkpoint volume "
                f"(claim {server_claim}, mounted there in the servers); rank 0 prunes old checkpoints through it"]
    if read_only:
        return [f"Job/zerostate-train: the checkpoint volume at {ckpt} is mounted read-only; "
                f"rank 0 deletes old checkpoints through it"]
    return []


def check_server_volumes(sts):
    problems = []
    templates = {t["metadata"]["name"]: t for t in sts["spec"].get("volumeClaimTemplates", [])}
    mounts = {m["name"]: m["mountPath"] for m in container(sts).get("volumeMounts", [])}
    if "state" not in templates:
        problems.append("StatefulSet/zerostate: volumeClaimTemplates has no 'state' claim")
    elif "storage" not in templates["state"]["spec"].get("resources", {}).get("requests", {}):
        problems.append("StatefulSet/zerostate: claim 'state' requests no storage")
    if mounts.get("state") != "/var/lib/zerostate":
        problems.append(f"StatefulSet/zerostate: claim 'state' is mounted at {mounts.get('state')}, not /var/lib/zerostate")
    nvme_dir = flag(container(sts).get("args", []), "nvme_dir")
    if nvme_dir != mounts.get("state"):
        problems.append(f"StatefulSet/zerostate: --nvme_dir={nvme_dir} is not the state volume {mounts.get('state')}")
    return problems


def check_service(sts, svc):
    problems = []
    if sts["spec"].get("serviceName") != svc["metadata"]["name"]:
        problems.append(f"StatefulSet/zerostate: serviceName {sts['spec'].get('serviceName')} is not the headless Service")
    if svc["spec"].get("clusterIP") != "None":
        problems.append("Service/zerostate: clusterIP is not None (not headless: no per-pod DNS names)")
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    if not matches(svc["spec"]["selector"], pod_labels):
        problems.append("Service/zerostate: selector does not match the server pods")
    ports = ports_of(container(sts))
    for p in svc["spec"]["ports"]:
        if p.get("targetPort") not in ports:
            problems.append(f"Service/zerostate: port {p['name']} targets {p.get('targetPort')}, not a container port")
    return problems


def check_pdb(sts, pdb):
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    if not matches(pdb["spec"]["selector"]["matchLabels"], pod_labels):
        return ["PodDisruptionBudget/zerostate: selector does not match the server pods"]
    return []


def check_job_launch(job):
    problems = []
    spec = job["spec"]
    c = container(job)
    env = env_of(c)
    if spec.get("completionMode") != "Indexed":
        problems.append("Job/zerostate-train: completionMode is not Indexed (no NODE_RANK)")
    for var in sorted(LAUNCH_VARS - set(env)):
        problems.append(f"Job/zerostate-train: env {var} missing")
    if problems:
        return problems
    nnodes = int(env["NNODES"]["value"])
    for field in ("completions", "parallelism"):
        if spec.get(field) != nnodes:
            problems.append(f"Job/zerostate-train: {field}={spec.get(field)} but NNODES={nnodes}")
    ref = env["NODE_RANK"].get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
    if ref != COMPLETION_INDEX:
        problems.append(f"Job/zerostate-train: NODE_RANK comes from {ref}, not the completion index")
    inits = [i["name"] for i in job["spec"]["template"]["spec"].get("initContainers", [])]
    if "wait-for-servers" not in inits:
        problems.append("Job/zerostate-train: no wait-for-servers init container")
    if not c.get("command", [""])[0].endswith("zerostate-launch"):
        problems.append("Job/zerostate-train: command is not zerostate-launch (no RANK/LOCAL_RANK/WORLD_SIZE)")
    return problems


def check_job_gpus_and_ports(job, gpu_expected):
    problems = []
    c = container(job)
    nproc = int(env_of(c)["NPROC_PER_NODE"]["value"])
    gpus = c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
    if gpu_expected and gpus != nproc:
        problems.append(f"Job/zerostate-train: nvidia.com/gpu limit {gpus} but NPROC_PER_NODE={nproc}")
    if not gpu_expected and gpus is not None:
        problems.append(f"Job/zerostate-train: CPU workers request nvidia.com/gpu {gpus}")
    backend = flag(c.get("args", []), "backend")
    if backend != ("cuda" if gpu_expected else "cpu"):
        problems.append(f"Job/zerostate-train: --backend={backend} with GPUs {'' if gpu_expected else 'not '}requested")
    want = {f"metrics-{r}": 9470 + r for r in range(nproc)}
    if ports_of(c) != want:
        problems.append(f"Job/zerostate-train: metrics ports {sorted(ports_of(c).items())} "
                        f"are not 9470 + local rank for {nproc} ranks")
    return problems


def check_worker_config(objs, job):
    problems = []
    sts, svc, cm = objs[SERVER], objs[SERVICE], objs[CONFIG]
    text = cm["data"]["worker.textproto"]
    grpc = ports_of(container(sts))["grpc"]
    want = [f"zerostate-{i}.{svc['metadata']['name']}:{grpc}" for i in range(sts["spec"]["replicas"])]
    got = textproto_values(text, "servers")
    if got != want:
        problems.append(f"ConfigMap/zerostate-worker: cluster.servers {got} is not the "
                        f"{sts['spec']['replicas']} StatefulSet names in order {want}")
    if textproto_values(text, "metrics_host") != ["0.0.0.0"]:
        problems.append("ConfigMap/zerostate-worker: cluster.metrics_host must be 0.0.0.0 to be scraped")
    if textproto_values(text, "metrics_port") != ["9470"]:
        problems.append("ConfigMap/zerostate-worker: cluster.metrics_port is not 9470")
    label = job["spec"]["template"]["metadata"]["labels"].get("zerostate.io/job")
    if textproto_values(text, "job_id") != [label]:
        problems.append(f"Job/zerostate-train: label zerostate.io/job={label} is not the config's job_id "
                        f"{textproto_values(text, 'job_id')}")
    config = flag(container(job).get("args", []), "config") or ""
    mounts = {m["name"]: m["mountPath"] for m in container(job).get("volumeMounts", [])}
    if config != mounts.get("config", "") + "/worker.textproto":
        problems.append(f"Job/zerostate-train: --config={config} is not in the config volume")
    return problems


def secret_mounts(obj):
    """{mountPath: secretName} of the Secret volumes the first container mounts."""
    spec = obj["spec"]["template"]["spec"]
    secrets = {v["name"]: v["secret"]["secretName"] for v in spec.get("volumes", []) if "secret" in v}
    return {m["mountPath"]: secrets[m["name"]] for m in container(obj).get("volumeMounts", [])
            if m["name"] in secrets}


def check_tls_files(name, args, flags, obj):
    """Each of `flags` is given and names a file in a mounted Secret."""
    problems = []
    mounts = secret_mounts(obj)
    for f in flags:
        path = flag(args, f)
        if path is None:
            problems.append(f"{name}: --{f} missing (TLS is required; docs/operations.md, Security)")
        elif not any(path.startswith(m + "/") for m in mounts):
            problems.append(f"{name}: --{f}={path} is not in a mounted Secret {sorted(mounts)}")
    return problems


def check_security(sts, job):
    """The server requires mutual TLS, the workers present certificates and
    read the job token from a Secret."""
    problems = check_tls_files("StatefulSet/zerostate", container(sts).get("args", []),
                               ("tls_cert", "tls_key", "tls_client_ca"), sts)
    if "--plaintext" in container(sts).get("args", []):
        problems.append("StatefulSet/zerostate: --plaintext on a cluster network")
    args = container(job).get("args", [])
    problems += check_tls_files("Job/zerostate-train", args, ("tls_ca", "tls_cert", "tls_key"), job)
    token = env_of(container(job)).get("ZEROSTATE_JOB_TOKEN", {})
    if "secretKeyRef" not in token.get("valueFrom", {}):
        problems.append("Job/zerostate-train: env ZEROSTATE_JOB_TOKEN does not come from a Secret")
    return problems


def check_monitoring(objs):
    problems = []
    sm, pm = objs.get(("ServiceMonitor", "zerostate-server")), objs.get(("PodMonitor", "zerostate-worker"))
    if sm:
        svc = objs[SERVICE]
        if not matches(sm["spec"]["selector"]["matchLabels"], svc["metadata"]["labels"]):
            problems.append("ServiceMonitor/zerostate-server: selector does not match Service/zerostate")
        if svc["metadata"]["labels"].get(sm["spec"].get("jobLabel")) != "zerostate-server":
            problems.append("ServiceMonitor/zerostate-server: jobLabel does not name the scrape job zerostate-server")
        if [e["port"] for e in sm["spec"]["endpoints"]] != ["metrics"]:
            problems.append("ServiceMonitor/zerostate-server: endpoint is not the Service's metrics port")
    if pm:
        job = objs[JOB]
        labels = job["spec"]["template"]["metadata"]["labels"]
        if labels.get(pm["spec"].get("jobLabel")) != "zerostate-worker":
            problems.append("PodMonitor/zerostate-worker: jobLabel does not name the scrape job zerostate-worker")
        scraped = {e["port"] for e in pm["spec"]["podMetricsEndpoints"]}
        # Workers do not label their series with the job; the rules and the
        # dashboard select them by the `job_id` this relabelling adds.
        for e in pm["spec"]["podMetricsEndpoints"]:
            if not any(r.get("targetLabel") == "job_id" for r in e.get("relabelings", [])):
                problems.append(f"PodMonitor/zerostate-worker: port {e['port']} does not set the job_id label")
        for port in sorted(set(ports_of(container(job))) - scraped):
            problems.append(f"PodMonitor/zerostate-worker: port {port} is not scraped")
    return problems


def check_namespaced(objects, namespace):
    cluster_scoped = {"Namespace", "StorageClass", "PersistentVolume"}
    return [f"{o['kind']}/{o['metadata']['name']}: namespace is not {namespace}"
            for o in objects if o["kind"] not in cluster_scoped
            and o["metadata"].get("namespace") != namespace]


def check_all(objects, gpu_expected=True):
    """Every check over one rendered set of objects (base or an overlay)."""
    objs = index(objects)
    missing = [f"{k}/{n}: missing" for k, n in (SERVER, SERVICE, JOB, PDB, CONFIG) if (k, n) not in objs]
    if missing:
        return missing
    sts, job = objs[SERVER], objs[JOB]
    problems = (check_server_ports_and_probes(sts) + check_server_resources(sts)
                + check_server_budgets(sts) + check_server_volumes(sts)
                + check_checkpoint_mounts(sts, job) + check_service(sts, objs[SERVICE])
                + check_pdb(sts, objs[PDB]) + check_job_launch(job))
    if not problems:
        problems += (check_job_gpus_and_ports(job, gpu_expected) + check_worker_config(objs, job)
                     + check_security(sts, job))
    return problems + check_monitoring(objs)
