#!/usr/bin/python3
"""The kernel maintainers' question, with data: which USLUB_MAX_ORDER?

Runs each workload of tools/bench/workloads under LD_PRELOAD=build/libuslub.so with
USLUB_MAX_ORDER = 0..4, alternating the settings run by run, and reports the median
elapsed time, median peak RSS, order fallbacks and huge-page-backed heap (AnonHugePages of
uslub's regions at exit, from the statistics dump) per setting, with each workload's time
and RSS as a ratio to max order 3 (the default).

Usage: tools/highorder/max_order.py [RUNS] [WORKLOAD ...]
"""
import json, math, os, statistics, subprocess, sys, tempfile, time

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
names = sys.argv[2:] or ["larson", "prodcons", "thread_local", "realloc_mix", "fragmented",
                         "thread_churn", "false_sharing", "high_order_frag"]
orders = [0, 1, 2, 3, 4]
lib = os.path.join(root, "build/libuslub.so")


def one(name, order):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    env = dict(os.environ, LD_PRELOAD=lib, USLUB_MAX_ORDER=str(order), USLUB_STATS="json",
               USLUB_STATS_FILE=out)
    start = time.monotonic()
    p = subprocess.Popen([os.path.join(root, "build/tools/bench", name)], env=env,
                         stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    elapsed = time.monotonic() - start
    if status != 0:
        sys.exit(f"{name} with max order {order} failed: status {status}")
    with open(out) as f:
        dump = json.load(f)
    os.unlink(out)
    return {"time": elapsed, "rss": usage.ru_maxrss / 1024.0,
            "fallbacks": sum(c["counters"].get("order_fallback", 0) for c in dump["caches"]),
            "huge": dump["totals"].get("anon_huge_ours", 0) / 2**20}


res = {(n, o): [] for n in names for o in orders}
for r in range(runs):
    for n in names:
        for o in orders[r % 5:] + orders[:r % 5]:
            res[(n, o)].append(one(n, o))

med = lambda xs: statistics.median(xs)
print(f"{runs} runs per cell, settings alternating; time and peak RSS as ratios to max order 3\n")
print("| workload | " + " | ".join(f"order {o}: time / RSS" for o in orders) + " |")
print("|---|" + "---|" * len(orders))
geo = {o: [[], []] for o in orders}
for n in names:
    base_t = med([x["time"] for x in res[(n, 3)]])
    base_r = med([x["rss"] for x in res[(n, 3)]])
    cells = []
    for o in orders:
        t = med([x["time"] for x in res[(n, o)]]) / base_t
        m = med([x["rss"] for x in res[(n, o)]]) / base_r
        geo[o][0].append(t)
        geo[o][1].append(m)
        cells.append(f"{t:.2f} / {m:.2f}")
    print(f"| {n} (order 3: {base_t:.2f} s, {base_r:.0f} MiB) | " + " | ".join(cells) + " |")
gm = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs))
print("| **geometric mean** | " +
      " | ".join(f"**{gm(geo[o][0]):.3f} / {gm(geo[o][1]):.3f}**" for o in orders) + " |")
print("\n| max order | order fallbacks (median, all workloads) | huge-page backed at exit, MiB (median, all workloads) |")
print("|---|---|---|")
for o in orders:
    fb = sum(med([x["fallbacks"] for x in res[(n, o)]]) for n in names)
    hp = sum(med([x["huge"] for x in res[(n, o)]]) for n in names)
    print(f"| {o} | {fb:.0f} | {hp:.1f} |")
