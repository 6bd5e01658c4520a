"""The documents answer from the repository as it is: every path that
README.md, docs/*.md and bench/results/*/README.md name exists; every
results folder is cited by a document and has a README; bench/results
stays under 3 MB; the documents stay within their line limits; no link
leaves the repository; no tracker number stands in for a reason.

Usage: docs_test.py [TestCase ...]   (no processes, no network; the
repository root is two folders up)"""

import glob
import itertools
import os
import re
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "bench", "results")
RESULTS_MAX_BYTES = 3 << 20
# Longest a document may grow (lines): about 300 / 400 with some room.
LINE_LIMITS = {"docs/performance.md": 330, "docs/architecture.md": 440,
               "docs/reliability.md": 440, "docs/operations.md": 440}
TOP = ("bench", "client", "cmake", "common", "configs", "deploy", "docs", "examples", "proto",
       "python", "scripts", "server", "tests", "trainer", "worker")
# A path: a top-level folder, then path characters ({a,b} alternatives and
# * globs included), not preceded by a path character (so build/bench/...
# and $OUT/... are not repository paths).
PATH = re.compile(r"(?<![\w./$-])((?:%s)/[\w./{},*+-]*)" % "|".join(TOP))
LINK = re.compile(r"\]\(([^)\s]+)")
TRACKER = re.compile(r"\bissues? \d+", re.IGNORECASE)


def documents():
    """The documents checked, as paths relative to ROOT."""
    docs = ["README.md", *sorted(glob.glob("docs/*.md", root_dir=ROOT)),
            "bench/results/README.md", "bench/results/HISTORY.md",
            *sorted(glob.glob("bench/results/*/README.md", root_dir=ROOT))]
    return [d for d in docs if os.path.exists(os.path.join(ROOT, d))]


def read(doc):
    with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
        return f.read()


def expand(path):
    """server/core/tier/{ram,nvme}_tier.cc -> both names; trailing
    punctuation of the sentence taken off."""
    path = path.rstrip(".,:;")
    parts = re.split(r"\{([^{}]*)\}", path)
    choices = [p.split(",") if i % 2 else [p] for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def named_paths(text):
    """Every repository path the text names."""
    return [p for m in PATH.finditer(text) for p in expand(m.group(1))]


def missing_paths(text):
    return sorted({p for p in named_paths(text)
                   if not glob.glob(os.path.join(ROOT, p.rstrip("/")))})


def links_leaving(doc, text):
    """Markdown link targets that are URLs or resolve outside ROOT."""
    out = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            out.append(target)
            continue
        where = os.path.normpath(os.path.join(ROOT, os.path.dirname(doc), target.split("#")[0]))
        if not where.startswith(ROOT + os.sep):
            out.append(target)
    return out


def tree_bytes(folder):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs)


class CheckersTest(unittest.TestCase):
    """The checkers themselves, on made-up text."""

    def test_named_paths(self):
        text = ("see server/core/tier/{ram,nvme}_tier.cc, build/bench/step/step_bench and "
                "$OUT/all; docs/metrics.md.")
        self.assertEqual(named_paths(text), ["server/core/tier/ram_tier.cc",
                                             "server/core/tier/nvme_tier.cc", "docs/metrics.md"])
        self.assertEqual(missing_paths("worker/no_such_file.cc and worker/engine.cc"),
                         ["worker/no_such_file.cc"])

    def test_links(self):
        text = "[a](img/x.svg) [b](../../shared/DESIGN.md) [c](https://example.com) [d](#x)"
        self.assertEqual(links_leaving("docs/a.md", text),
                         ["../../shared/DESIGN.md", "https://example.com"])

    def test_tracker(self):
        self.assertTrue(TRACKER.search("as issue " + "19 asked"))
        self.assertFalse(TRACKER.search("the issues of a slow disk"))


class DocumentsTest(unittest.TestCase):
    def test_every_named_path_exists(self):
        for doc in documents():
            with self.subTest(doc=doc):
                self.assertEqual(missing_paths(read(doc)), [],
                                 f"{doc} names paths that are not there")

    def test_no_link_leaves_the_repository(self):
        for doc in documents():
            with self.subTest(doc=doc):
                text = read(doc)
                self.assertEqual(links_leaving(doc, text), [], doc)
                self.assertFalse("shared/DESIGN.md" in text, f"{doc} links shared/DESIGN.md")

    def test_no_tracker_numbers(self):
        for doc in documents():
            with self.subTest(doc=doc):
                found = [m.group(0) for m in TRACKER.finditer(read(doc))]
                self.assertEqual(found, [], f"{doc}: say what a thing is for, not its ticket")

    def test_line_limits(self):
        for doc, limit in LINE_LIMITS.items():
            with self.subTest(doc=doc):
                lines = read(doc).count("\n")
                self.assertLessEqual(lines, limit, f"{doc} has {lines} lines")


class ResultsTest(unittest.TestCase):
    def test_size_cap(self):
        size = tree_bytes(RESULTS)
        print(f"bench/results: {size} bytes")
        self.assertLess(size, RESULTS_MAX_BYTES)

    def test_cited_folders_exist(self):
        for doc in documents():
            for name in re.findall(r"bench/results/([\w.-]+)", read(doc)):
                with self.subTest(doc=doc, folder=name):
                    self.assertTrue(os.path.exists(os.path.join(RESULTS, name)),
                                    f"{doc} cites bench/results/{name}, which is not there")

    def test_every_folder_is_cited_and_has_a_readme(self):
        cited = "".join(read(d) for d in documents() if not d.startswith("bench/results/"))
        index = read("bench/results/README.md")
        for name in sorted(os.listdir(RESULTS)):
            if not os.path.isdir(os.path.join(RESULTS, name)):
                continue
            with self.subTest(folder=name):
                self.assertTrue(os.path.exists(os.path.join(RESULTS, name, "README.md")),
                                f"bench/results/{name} has no README.md (machine, commit, command)")
                self.assertIn(name, cited, f"no document cites bench/results/{name}")
                self.assertIn(name, index, f"bench/results/README.md does not list {name}")


if __name__ == "__main__":
    unittest.main(argv=sys.argv)
