"""The container builds in deploy/docker, checked by reading them (there is
no Docker engine on the build machines):

  docker_test.py StaticTest               stages, base images, non-root
                                          user, no build tools at run time
  docker_test.py LddTest SERVER WORKER    every shared library the built
                                          binaries load comes from a package
                                          the runtime stage installs (or, for
                                          a worker built with CUDA, is copied
                                          from NVIDIA's image by the
                                          ZEROSTATE_CUDA=ON stages); exits
                                          77 (skip) when a binary is absent
"""
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import unittest

import deploylib as lib

DOCKER = os.path.join(lib.ROOT, "deploy", "docker")
IMAGES = {"server": "zerostate-server", "worker": "zerostate-worker"}
IN_SLIM = {"libc6", "libgcc-s1", "libstdc++6"}  # already in debian:12-slim
BUILD_TOOL = re.compile(r"(-dev$|^g\+\+|^gcc|^clang|^cmake$|^ninja-build$|^make$|"
                        r"^pkg-config$|^protobuf-compiler)")


CUDA_DIR = "/usr/local/cuda"


def parse(path, overrides=None):
    """Returns (ARGs, {stage: (base, [instructions])}, final stage): the ARGs'
    defaults, with `overrides` (build args) applied."""
    with open(path, encoding="utf-8") as f:
        text = re.sub(r"\\\n", " ", f.read())
    args, stages, current = {}, {}, None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        op, _, rest = line.partition(" ")
        if op == "ARG" and current is None and "=" in rest:
            k, v = rest.split("=", 1)
            args[k] = (overrides or {}).get(k, v)
        elif op == "FROM":
            m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", rest, re.I)
            base = re.sub(r"\$\{(\w+)\}", lambda g: args.get(g.group(1), ""), m.group(1))
            current = m.group(2) or f"stage{len(stages)}"
            stages[current] = (base, [])
        else:
            stages[current][1].append((op, rest))
    return args, stages, current


def chain(stages, name):
    """The stages `name` is built on, itself first, down to an image."""
    out = [name]
    while stages[out[-1]][0] in stages:
        out.append(stages[out[-1]][0])
    return out


def apt_packages(instructions):
    pkgs = []
    for op, rest in instructions:
        if op == "RUN":
            for seg in re.findall(r"apt-get install ([^&;]*)", rest):
                pkgs += [p for p in seg.split() if not p.startswith("-")]
    return pkgs


def copied_from_cuda(instructions):
    """File name patterns that COPY --from=cuda brings in."""
    names = []
    for op, rest in instructions:
        words = rest.split()
        if op == "COPY" and "--from=cuda" in words:
            names += [os.path.basename(w) for w in words[:-1] if not w.startswith("--")]
    return names


def runtime_packages(path, overrides=None):
    _, stages, final = parse(path, overrides)
    names = chain(stages, final)
    return [p for n in names for p in apt_packages(stages[n][1])], stages[names[-1]][0]


def runtime_cuda_files(path):
    """What the runtime stage built with ZEROSTATE_CUDA=ON copies from NVIDIA's image."""
    _, stages, final = parse(path, {"ZEROSTATE_CUDA": "ON"})
    return [f for n in chain(stages, final) for f in copied_from_cuda(stages[n][1])]


class StaticTest(unittest.TestCase):
    def test_runtime_is_debian_slim_without_build_tools(self):
        for image in IMAGES:
            with self.subTest(image=image):
                pkgs, base = runtime_packages(os.path.join(DOCKER, f"{image}.Dockerfile"))
                self.assertEqual(base, "debian:12-slim")
                self.assertGreater(len(pkgs), 5)
                self.assertEqual([p for p in pkgs if BUILD_TOOL.search(p)], [])

    def test_build_stage_compiles_from_debian_12(self):
        for image, target in IMAGES.items():
            with self.subTest(image=image):
                _, stages, _ = parse(os.path.join(DOCKER, f"{image}.Dockerfile"))
                build = chain(stages, "build")
                self.assertEqual(stages[build[-1]][0], "debian:12")
                runs = " ".join(r for n in build for op, r in stages[n][1] if op == "RUN")
                self.assertIn(f"--target {target}", runs)
                self.assertIn("libgrpc++-dev", apt_packages(stages[build[-1]][1]))

    def test_final_stage_runs_as_non_root(self):
        for image in IMAGES:
            with self.subTest(image=image):
                _, stages, final = parse(os.path.join(DOCKER, f"{image}.Dockerfile"))
                users = [r for op, r in stages[final][1] if op == "USER"]
                self.assertEqual(len(users), 1)
                uid = users[0].split(":")[0]
                self.assertTrue(uid.isdigit() and int(uid) > 0, users)

    def test_entrypoint_is_copied_from_the_build(self):
        for image, entry in {"server": "zerostate-server", "worker": "zerostate-launch"}.items():
            with self.subTest(image=image):
                _, stages, final = parse(os.path.join(DOCKER, f"{image}.Dockerfile"))
                ops = dict((op, r) for op, r in stages[final][1])
                self.assertIn(f"/usr/local/bin/{entry}", ops["ENTRYPOINT"])
                copies = [r for op, r in stages[final][1] if op == "COPY"]
                self.assertTrue(any("--from=build" in c and f"/out/{entry}" in c.split() for c in copies),
                                copies)

    def test_server_image_has_the_health_probe(self):
        # The Kubernetes probes exec `zerostate health` (deploy/k8s/base).
        _, stages, final = parse(os.path.join(DOCKER, "server.Dockerfile"))
        copies = [r.split() for op, r in stages[final][1] if op == "COPY"]
        self.assertIn(["--from=build", "/out/zerostate", "/usr/local/bin/zerostate"], copies)

    def test_a_build_tool_in_the_runtime_is_caught(self):
        self.assertTrue(BUILD_TOOL.search("libgrpc++-dev"))
        self.assertTrue(BUILD_TOOL.search("g++"))
        self.assertFalse(BUILD_TOOL.search("libgrpc++1.51"))


def ldd_libraries(binary):
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    return re.findall(r"=> (/\S+)", out)


def ldd_packages(binary, libs=None):
    """Debian packages of the shared libraries `binary` loads (or of `libs`)."""
    libs = ldd_libraries(binary) if libs is None else libs
    # Debian 12 is usr-merged: dpkg may know a library by either prefix.
    names = {c: lib for lib in libs for c in (lib, os.path.realpath(lib),
                                              re.sub(r"^/usr", "", lib), "/usr" + lib)}
    q = subprocess.run(["dpkg", "-S"] + sorted(names), capture_output=True, text=True)
    owned = {}
    for line in q.stdout.splitlines():
        pkg, _, path = line.partition(": ")
        if path in names:
            owned[names[path]] = pkg.split(":")[0]
    return {owned.get(lib, f"(no package owns {lib})") for lib in libs}


class LddTest(unittest.TestCase):
    binaries = {}

    def test_runtime_stage_installs_every_loaded_library(self):
        for image, binary in self.binaries.items():
            with self.subTest(image=image):
                dockerfile = os.path.join(DOCKER, f"{image}.Dockerfile")
                libs = ldd_libraries(binary)
                cuda = [lib for lib in libs if os.path.realpath(lib).startswith(CUDA_DIR)
                        or lib.startswith(CUDA_DIR)]
                # A binary built with the CUDA backend is what the
                # ZEROSTATE_CUDA=ON build of the image holds.
                overrides = {"ZEROSTATE_CUDA": "ON"} if cuda else None
                have = set(runtime_packages(dockerfile, overrides)[0])
                copied = runtime_cuda_files(dockerfile) if cuda else []
                not_copied = [lib for lib in cuda
                              if not any(fnmatch.fnmatch(os.path.basename(lib), pattern)
                                         for pattern in copied)]
                self.assertEqual(not_copied, [], f"{binary} loads CUDA libraries that "
                                 f"{image}.Dockerfile's ZEROSTATE_CUDA=ON runtime does not copy")
                others = [lib for lib in libs if lib not in cuda]
                missing = sorted(ldd_packages(binary, others) - have - IN_SLIM)
                self.assertEqual(missing, [], f"{binary} loads libraries of these packages, "
                                 f"not installed by {image}.Dockerfile's runtime stage")

    def test_libraries_are_traced_to_packages(self):
        pkgs = ldd_packages(self.binaries["server"])
        self.assertIn("libgrpc++1.51", pkgs)
        self.assertEqual([p for p in pkgs if p.startswith("(no package")], [])


if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv[:1] == ["LddTest"]:
        bins = argv[1:3]
        if len(bins) < 2 or not all(os.access(b, os.X_OK) for b in bins) or not shutil.which("dpkg"):
            print(f"SKIP: binaries not built or no dpkg: {bins}")
            sys.exit(lib.SKIP)
        LddTest.binaries = dict(zip(IMAGES, bins))
        argv = ["LddTest"]
    unittest.main(argv=[sys.argv[0], "-v"] + argv)
