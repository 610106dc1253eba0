#!/usr/bin/python3
"""replace_cachesim.py: instructions and simulated cache misses per replacement of
tools/bench/replace under cachegrind, (X(2N) - X(N)) / N per thread, N = 200,000: the
L1 of this VM (48 KiB, 12-way) and an LL of 2 MiB, 16-way, standing for its L2. Counts
that a busy machine does not change.

Usage: replace_cachesim.py BOUND THREADS LIB... (from the repository root, after
build-bench/ was built; B=DIR for another build folder)
"""
import os
import re
import subprocess
import sys

bound, threads = sys.argv[1], sys.argv[2]
exe = os.path.join(os.environ.get("B", "build-bench"), "tools", "bench", "replace")


def counts(lib, n):
    err = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=yes",
                          "--D1=49152,12,64", "--LL=2097152,16,64",
                          "--cachegrind-out-file=/dev/null", exe, threads, bound, str(n)],
                         env=dict(os.environ, LD_PRELOAD=lib), capture_output=True,
                         text=True).stderr

    def num(s):
        return int(s.replace(",", ""))

    def rw(key):
        m = re.search(key + r":\s+[\d,]+\s+\(\s*([\d,]+) rd\s+\+\s+([\d,]+) wr", err)
        return [num(m.group(1)), num(m.group(2))]
    ir = num(re.search(r"I\s+refs:\s+([\d,]+)", err).group(1))
    return [ir] + rw("D1  misses") + rw("LLd misses")


for lib in sys.argv[3:]:
    a, b = counts(lib, 200000), counts(lib, 400000)
    d = [(y - x) / 200000 / int(threads) for x, y in zip(a, b)]
    print("%s %sT %-26s instructions %.0f  L1 misses read %.2f write %.2f  "
          "L2 (simulated) misses read %.2f write %.2f" % ((bound, threads, os.path.basename(lib))
                                                           + tuple(d)))
