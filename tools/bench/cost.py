#!/usr/bin/python3
"""cost.py: what a change to memory return costs the bench's workloads, in figures that a
busy machine disturbs less than wall time: CPU time (user + system) and page faults
(minor: a page handed back and touched again is one), beside wall time.

  cost.py --build DIR --runs N --only NAME,... NAME=LIB ...

Runs each workload of tools/bench (built in DIR) under each NAME=LIB preloaded, N
rounds, the order rotated every round; prints min / median / max per figure and the
ratio of medians to the first allocator named.
"""
import argparse
import os
import statistics
import subprocess
import time


def run(exe, lib):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("USLUB_", "LD_PRELOAD", "MALLOC_CONF"))}
    env["LD_PRELOAD"] = lib
    t0 = time.perf_counter()
    p = subprocess.Popen([exe], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError("%s under %s failed: %s" % (exe, lib, p.stderr.read()[-300:]))
    p.stderr.close()
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_minflt


def fmt(v, unit):
    v = sorted(v)
    f = "%.0f" if unit == "faults" else "%.2f"
    return " / ".join(f % x for x in (v[0], statistics.median(v), v[-1]))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--only", required=True)
    ap.add_argument("allocs", nargs="+", metavar="NAME=LIB")
    args = ap.parse_args()
    allocs = [a.split("=", 1) for a in args.allocs]
    names = [a[0] for a in allocs]
    bindir = os.path.join(args.build, "tools", "bench")
    print("| workload | allocator | wall s | CPU s | minor faults (K) | CPU / %s | faults / %s |"
          % (names[0], names[0]))
    print("|---|---|---|---|---|---|---|")
    for w in args.only.split(","):
        res = {n: [] for n in names}
        for r in range(args.runs):
            k = r % len(allocs)
            for name, lib in allocs[k:] + allocs[:k]:
                res[name].append(run(os.path.join(bindir, w), os.path.abspath(lib)))
        base_cpu = statistics.median(x[1] for x in res[names[0]])
        base_flt = statistics.median(x[2] for x in res[names[0]])
        for n in names:
            walls = [x[0] for x in res[n]]
            cpus = [x[1] for x in res[n]]
            flts = [x[2] / 1000.0 for x in res[n]]
            print("| %s | %s | %s | %s | %s | %.3f | %.3f |" % (
                w, n, fmt(walls, "s"), fmt(cpus, "s"), fmt(flts, "faults"),
                statistics.median(cpus) / base_cpu,
                statistics.median(flts) * 1000.0 / base_flt), flush=True)


if __name__ == "__main__":
    main()
