"""zerostate.torch on this host's CPU, one Python tree against another,
against the same server: a bf16 MLP of about N parameters (LAYERS square
Linear layers) trained by the engine in MODE (delayed, sync or
speculative), one server on this host reached over the same-host plane,
STEPS timed steps after 2 warm-up steps, rounds alternated (the order
swapped each round). Each run is its own process (the tree is imported
there). Prints per tree the median wall milliseconds of a step and the
server's CPU milliseconds per step (/proc), and whether the weights after
the last step are the same bits in every run (they must be).

    OLD_TREE=/path/to/old NEW_TREE=. MODE=delayed ROUNDS=6 \\
      /usr/bin/python3 bench/step/engine_ab.py
"""
import hashlib, json, os, statistics, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TREES = {"old": os.environ.get("OLD_TREE", ROOT), "new": os.environ.get("NEW_TREE", ROOT)}
ROUNDS, STEPS = int(os.environ.get("ROUNDS", "4")), int(os.environ.get("STEPS", "8"))
MODE, LAYERS, D = os.environ.get("MODE", "delayed"), int(os.environ.get("LAYERS", "8")), \
    int(os.environ.get("D", "2048"))

RUN = r'''
import hashlib, json, os, sys, time
tree, tests, mode, steps, layers, d = sys.argv[1:7]
sys.path.insert(0, os.path.join(tree, "python")); sys.path.insert(0, tests)
import torch, zs_servers
import zerostate.torch as zs
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(int(d), int(d), bias=False) for _ in range(int(layers))])
servers = zs_servers.start(1, (f"--ram_budget_bytes={8 << 30}", "--threads=1"))
try:
    config = {"optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "bf16": {"enabled": True},
              "gradient_clipping": 0.0, "zerostate": {"train": {"speculative_step": mode == "speculative"}}}
    if mode == "delayed":
        config["zero_optimization"] = {"delayed_update": {"enabled": True, "warmup_steps": 1}}
    engine, *_ = zs.initialize(model=model, config=config, servers=servers[0].address, job="ab",
                               plaintext=True, token="t" * 40)
    def cpu():
        with open(f"/proc/{servers[0].proc.pid}/stat") as f:
            parts = f.read().rsplit(")", 1)[1].split()
        return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")
    x = torch.randn(8, int(d), generator=torch.Generator().manual_seed(1)).bfloat16()
    for s in range(2 + int(steps)):
        if s == 2:
            t0, c0 = time.perf_counter(), cpu()
        engine.backward(engine(x).float().pow(2).mean())
        engine.step()
    engine.sync_weights()
    wall, used = time.perf_counter() - t0, cpu() - c0
    digest = hashlib.sha256(b"".join(p.detach().view(torch.int16).numpy().tobytes()
                                     for p in engine.module.parameters())).hexdigest()[:16]
    engine.close()
    print(json.dumps({"step_ms": wall / int(steps) * 1e3, "server_cpu_ms": used / int(steps) * 1e3,
                      "digest": digest}))
finally:
    for s in servers:
        s.stop()
'''


def run(tree):
    out = subprocess.run([sys.executable, "-c", RUN, tree, os.path.join(ROOT, "tests", "python"),
                          MODE, str(STEPS), str(LAYERS), str(D)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    got = {side: [] for side in TREES}
    for r in range(ROUNDS):
        for side in (("old", "new") if r % 2 == 0 else ("new", "old")):
            got[side].append(run(TREES[side]))
    for side, runs in got.items():
        print(side, TREES[side], f"step {statistics.median(x['step_ms'] for x in runs):.1f} ms",
              f"server CPU {statistics.median(x['server_cpu_ms'] for x in runs):.1f} ms/step",
              "steps", [round(x["step_ms"], 1) for x in runs])
    digests = {x["digest"] for runs in got.values() for x in runs}
    print("same weights in every run:", len(digests) == 1, sorted(digests))


if __name__ == "__main__":
    main()
