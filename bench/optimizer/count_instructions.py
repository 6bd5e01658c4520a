#!/usr/bin/env python3
"""Counts the instructions a 16-element vector of the compact-moment step
(AdamW, bf16 copy, fp32 gradient; int8 moments, or bf16 with --bf16) takes,
in the disassembly of a kernels object file: the loop of
CompactLoop<...>::Int8Loop<kStream> (Bf16Loop; or, in an object built
before those existed, Int8Part, Run): the innermost loop that holds the
most divisions,
from its head to its backward branch, taken as straight-line code (a
branch out of it, such as the denormal fallback of the copy, not
followed), divided by its vdivps (one per 16 elements). Vector (v*) and
mask (k*) instructions apart.

    python3 bench/optimizer/count_instructions.py [--bf16] \\
        build/server/core/optimizer/CMakeFiles/zerostate_optimizer.dir/kernels_avx512*.cc.o
"""
import re
import subprocess
import sys

# AdamRule<_, true> (AdamW), Lowp 1 (bf16 copy), MomentFormat 2 (int8) or
# 1 (bf16), fp32 gradient; the functions that hold the loop.
KEYS = {"int8": ("Lb1EEELNS1_4LowpE1ELNS0_12MomentFormatE2ELb0EE", ("Int8Loop", "Int8Part")),
        "bf16": ("Lb1EEELNS1_4LowpE1ELNS0_12MomentFormatE1ELb0EE", ("Bf16Loop", "3Run"))}


def disassemble(obj, sym):
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-M", "intel",
                          "--disassemble=" + sym, obj],
                         capture_output=True, text=True, check=True).stdout
    insns = []
    for line in out.split("\n"):
        m = re.match(r"\s*([0-9a-f]+):\t(\S+)\s*(.*)", line)
        if m:
            insns.append((int(m.group(1), 16), m.group(2), m.group(3)))
    return insns


def loops(insns):
    """(head, latch) index pairs of the backward branches."""
    at = {addr: k for k, (addr, _, _) in enumerate(insns)}
    for k, (addr, op, args) in enumerate(insns):
        m = re.match(r"([0-9a-f]+)", args)
        if op.startswith("j") and m and int(m.group(1), 16) <= addr and int(m.group(1), 16) in at:
            yield at[int(m.group(1), 16)], k


def per_vector(obj, fmt):
    key, funcs = KEYS[fmt]
    syms = subprocess.run(["nm", obj], capture_output=True, text=True,
                          check=True).stdout.split("\n")
    names = [l.split()[-1] for l in syms if "AdamRule" in l and key in l and
             any(f in l for f in funcs) and "lambda" not in l]
    best = None
    for sym in names:
        insns = disassemble(obj, sym)
        spans = list(loops(insns))
        for head, latch in spans:
            if any(head <= h and l < latch for h, l in spans if (h, l) != (head, latch)):
                continue  # not innermost
            body = [op for _, op, _ in insns[head:latch + 1] if not op.startswith("nop")]
            divs = sum(op == "vdivps" for op in body)
            if divs and (best is None or divs > best[0] or
                         (divs == best[0] and len(body) < len(best[1]))):
                best = (divs, body)
    divs, body = best
    vector = sum(op[0] in "vk" for op in body)
    return len(body) / divs, vector / divs, divs


if __name__ == "__main__":
    fmt = "bf16" if "--bf16" in sys.argv else "int8"
    for path in [a for a in sys.argv[1:] if a != "--bf16"]:
        total, vector, divs = per_vector(path, fmt)
        print(f"{path} ({fmt} moments): {total:.1f} instructions, {vector:.1f} vector or mask "
              f"per 16 elements (a loop of {divs} vectors)")
