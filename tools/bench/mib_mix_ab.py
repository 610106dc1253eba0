#!/usr/bin/python3
"""mib_mix_ab.py: allocators side by side on tools/bench/mib_mix, for each seed every
library once, the order reversed every other seed (a shared VM's drift falls on all
alike): replacements a second and peak resident MiB, median [min-max] over the seeds.

Usage: mib_mix_ab.py FILLPCT SEEDS STEPS LIB... (from the repository root, after
build-bench/ was built; B=DIR for another build folder)
"""
import os
import statistics
import subprocess
import sys

pct, seeds, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3]
libs = sys.argv[4:]
exe = os.path.join(os.environ.get("B", "build-bench"), "tools", "bench", "mib_mix")
rate = {lib: [] for lib in libs}
peak = {lib: [] for lib in libs}
for seed in range(1, seeds + 1):
    for lib in libs if seed % 2 else libs[::-1]:
        out = subprocess.run([exe, steps, pct, str(seed)], env=dict(os.environ, LD_PRELOAD=lib),
                             capture_output=True, text=True, check=True).stdout.split()
        rate[lib].append(float(out[0]))
        peak[lib].append(float(out[1]))


def fmt(v, f):
    return f % statistics.median(v) + " [" + f % min(v) + "-" + f % max(v) + "]"


for lib in libs:
    name = os.path.basename(os.path.dirname(lib)) + "/" + os.path.basename(lib)
    print("%s%% filled %-36s %s thousand/s  peak %s MiB" %
          (pct, name, fmt([r / 1000 for r in rate[lib]], "%.1f"), fmt(peak[lib], "%.0f")))
