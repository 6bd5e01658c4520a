#!/usr/bin/env python3
"""Counts the instructions of the int8 step's vector loop (AdamW, bf16
copy, fp32 gradient: CompactLoop<...>::Int8Part) in a kernels object file:
from the loop's compare before its prefetches to the branch after the
division, both store paths of the copy counted; vector (v*) and mask (k*)
instructions apart.

    python3 count_instructions.py build/server/core/optimizer/CMakeFiles/zerostate_optimizer.dir/kernels_avx512.cc.o
"""
import re
import subprocess
import sys


def loop_counts(obj):
    syms = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout.split("\n")
    sym = next(l.split()[-1] for l in syms if "Int8Part" in l and "AdamRule" in l and
               "Lb1EEELNS1_4LowpE1ELNS0_12MomentFormatE2ELb0EE" in l)
    lines = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-M", "intel",
                            "--disassemble=" + sym, obj],
                           capture_output=True, text=True, check=True).stdout.split("\n")
    div = next(i for i, l in enumerate(lines) if "vdivps" in l)
    start = [i for i in range(div) if "prefetcht0" in lines[i]][-4]
    while "cmp" not in lines[start]:
        start -= 1
    end = div
    while end < len(lines) and not re.search(r"\tje +[0-9a-f]+", lines[end]):
        end += 1
    ops = [l.split("\t")[-1].split()[0] for l in lines[start:end + 1]
           if l.count("\t") >= 1 and l.split("\t")[-1].strip() and "nop" not in l]
    return len(ops), sum(1 for o in ops if o[0] in "vk")


if __name__ == "__main__":
    for path in sys.argv[1:]:
        total, vector = loop_counts(path)
        print(f"{path}: {total} instructions, {vector} vector or mask")
