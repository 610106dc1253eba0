#!/usr/bin/python3
"""USLUB_HIGH_ORDER=wait against nowait (and nowait with the replenisher) on a fragmented heap under a memory cap.

Runs build/tools/bench/high_order_frag (a quarter of a 512 MiB heap held at random
positions, then a hackbench-like message load) under LD_PRELOAD=build/libuslub.so with
USLUB_MEM_LIMIT, alternating the two modes run by run, and reports elapsed time,
high-order stalls, order fallbacks and peak RSS as min / median / max.

Usage: tools/highorder/compare.py [RUNS] [LIMIT] [extra VAR=VALUE ...]
"""
import json, os, resource, statistics, subprocess, sys, tempfile, time

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
limit = sys.argv[2] if len(sys.argv) > 2 else "640M"
extra = dict(a.split("=", 1) for a in sys.argv[3:])
prog = os.path.join(root, "build/tools/bench/high_order_frag")
lib = os.path.join(root, "build/libuslub.so")


MODES = {"wait": {"USLUB_HIGH_ORDER": "wait"},
         "nowait": {"USLUB_HIGH_ORDER": "nowait"},
         "nowait+background": {"USLUB_HIGH_ORDER": "nowait", "USLUB_BACKGROUND": "1"}}


def one(mode):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    env = dict(os.environ, LD_PRELOAD=lib, USLUB_MEM_LIMIT=limit, USLUB_STATS="json",
               USLUB_STATS_FILE=out, **MODES[mode], **extra)
    start = time.monotonic()
    p = subprocess.Popen([prog], env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    elapsed = time.monotonic() - start
    if status != 0:
        sys.exit(f"{mode}: high_order_frag failed with status {status}")
    with open(out) as f:
        dump = json.load(f)
    os.unlink(out)
    counters = [c["counters"] for c in dump["caches"]]
    return {
        "time": elapsed,
        "stalls": sum(c.get("high_order_stall", 0) for c in counters),
        "fallbacks": sum(c.get("order_fallback", 0) for c in counters),
        "rss": usage.ru_maxrss / 1024.0,
    }


results = {m: [] for m in MODES}
order = list(MODES)
for r in range(runs):
    for mode in order[r % len(order):] + order[:r % len(order)]:
        results[mode].append(one(mode))


def mmm(values, fmt):
    return " / ".join(fmt.format(v) for v in (min(values), statistics.median(values), max(values)))


print(f"{runs} runs each, alternating, USLUB_MEM_LIMIT={limit} {' '.join(sys.argv[3:])}\n")
print("| USLUB_HIGH_ORDER | elapsed s | high_order_stall | order_fallback | peak RSS MiB |")
print("|---|---|---|---|---|")
for mode in MODES:
    rs = results[mode]
    print(f"| {mode} | {mmm([x['time'] for x in rs], '{:.2f}')} | "
          f"{mmm([x['stalls'] for x in rs], '{:.0f}')} | "
          f"{mmm([x['fallbacks'] for x in rs], '{:.0f}')} | "
          f"{mmm([x['rss'] for x in rs], '{:.0f}')} |")
