"""Reading the logs of the bench/step device scripts, shared by their
summaries (device_step_summary.py, device_all_summary.py)."""
import gzip
import json
import os
import re


def emit(figure, value, unit, limit=None, ratio=None, **extra):
    """One figure as step_bench prints them, as a JSON line."""
    print(json.dumps(dict({"figure": figure, "value": value, "unit": unit, "limit": limit,
                           "ratio": ratio}, **extra)), flush=True)


def worker_steps(path, skip):
    """[(samples/s, {part: ms})] of every zerostate-worker progress line of
    `path` from step `skip` on; [] when the file is missing."""
    line = re.compile(r"^step (\d+) .*samples/s (\d+(?:\.\d+)?)[^|]*\| (.*)$")
    steps = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for text in f:
                m = line.match(text.strip())
                if m and int(m.group(1)) >= skip:
                    parts = dict(re.findall(r"(\w+) ([\d.]+)ms", m.group(3)))
                    steps.append((float(m.group(2)), {k: float(v) for k, v in parts.items()}))
    except OSError:
        pass
    return steps


def phase_means(path, job):
    """{phase: mean seconds per observation} of `job` on a Prometheus text page
    (or on its gzipped copy, PATH.gz, as bench/results keeps them)."""
    sums, counts = {}, {}
    pat = re.compile(r'^zerostate_step_phase_seconds_(sum|count)\{job_id="%s",phase="(\w+)"\} (\S+)$'
                     % re.escape(job))
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        opener, path = gzip.open, path + ".gz"
    else:
        opener = open
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace") as f:
            for text in f:
                m = pat.match(text.strip())
                if m:
                    (sums if m.group(1) == "sum" else counts)[m.group(2)] = float(m.group(3))
    except OSError:
        pass
    return {k: sums[k] / counts[k] for k in sums if counts.get(k)}


def figures(path):
    """[figure objects] of a file of JSON lines (the bench programs' --json);
    lines that are not JSON are skipped; [] when the file is missing."""
    out = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for text in f:
                try:
                    fig = json.loads(text)
                except ValueError:
                    continue
                if isinstance(fig, dict) and "figure" in fig:
                    out.append(fig)
    except OSError:
        pass
    return out


def figure_value(path, suffix):
    """The value of the first figure of `path` whose name ends with `suffix`, or None."""
    for fig in figures(path):
        if fig["figure"].endswith(suffix):
            return fig["value"]
    return None
