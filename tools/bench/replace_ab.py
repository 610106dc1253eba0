#!/usr/bin/python3
"""replace_ab.py: uslub builds (or any allocators) side by side on tools/bench/replace,
rounds alternated and the order reversed every other round, with each round's ratio to
the first library: on a shared VM, pairs taken in the same round cancel the slow drifts of
the host's load. One thread is pinned to CPU 0, as replace_matrix.sh pins it.

Usage: replace_ab.py BOUND THREADS STEPS ROUNDS LIB... (from the repository root, after
build-bench/ was built; B=DIR for another build folder)
"""
import os
import statistics
import subprocess
import sys

bound, threads, steps, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
libs = sys.argv[5:]
exe = os.path.join(os.environ.get("B", "build-bench"), "tools", "bench", "replace")
res = {lib: [] for lib in libs}
for i in range(rounds):
    for lib in libs if i % 2 == 0 else libs[::-1]:
        cmd = (["taskset", "-c", "0"] if threads == "1" else []) + [exe, threads, bound, steps]
        out = subprocess.run(cmd, env=dict(os.environ, LD_PRELOAD=lib), capture_output=True,
                             text=True, check=True).stdout.split()
        res[lib].append(float(out[-1]))
first = res[libs[0]]
for lib in libs:
    v = res[lib]
    r = [x / y for x, y in zip(v, first)]
    print("%s %s %-28s median %.4g [%.4g-%.4g]  paired ratio to the first: median %.3f "
          "[%.3f-%.3f]" % (bound, threads, os.path.basename(lib), statistics.median(v), min(v),
                           max(v), statistics.median(r), min(r), max(r)))
