#!/usr/bin/python3
"""uslub statistics: read a JSON dump or a running process's live page, print the
slabinfo-style table, refresh it like slabtop, or plot it.

    uslub_stats.py stats FILE.json            the table of a dump (USLUB_STATS=json)
    uslub_stats.py top [--once] [--json] [--interval S] PID
                                              the live page of PID (USLUB_STATS=live)
    uslub_stats.py plot FILE.json -o OUT.png  memory per cache and slow-path counters

The table is the one the library prints at exit with USLUB_STATS=1 (core/stats/stats.c,
print_text): a change to one is made to the other.
"""

import argparse
import json
import os
import struct
import sys
import time

LIVE_MAGIC = b"USLUBLV\0"
# struct uslub_live_header (core/stats/live.h): magic, version, header_size, seq, pid, updates,
# time_ns, len, period_ms
LIVE_HEADER = struct.Struct("<8sIIQQQQQQ")


class StatsError(Exception):
    pass


def live_path(pid):
    return "/dev/shm/uslub.%d" % pid


def read_live(pid, timeout=5.0):
    """The JSON of PID's live page, read consistently (seqlock: the same even sequence
    number before and after the copy). The writer formats the figures inside its window
    (a fifth of the times with /proc/self/smaps), which on a loaded machine, or with the
    writer's thread preempted, lasts far longer than a read: the reader waits for up to
    `timeout` seconds, not a number of tries (50 tries of 2 ms failed so in CI)."""
    path = live_path(pid)
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise StatsError("no live statistics for pid %d (%s): run the program with "
                         "USLUB_STATS=live" % (pid, path)) from None
    if not os.path.exists("/proc/%d" % pid):
        f.close()
        raise StatsError("process %d is gone; %s is left from a process that was killed "
                         "(remove it)" % (pid, path))
    deadline = time.monotonic() + timeout
    with f:
        while time.monotonic() < deadline:
            f.seek(0)
            head = f.read(LIVE_HEADER.size)
            if len(head) < LIVE_HEADER.size:
                raise StatsError("%s is not a uslub live page (too short)" % path)
            magic, version, hsize, seq, _, _, _, length, _ = LIVE_HEADER.unpack(head)
            if magic != LIVE_MAGIC or version != 1:
                raise StatsError("%s is not a uslub live page (version 1)" % path)
            if seq & 1:
                time.sleep(0.002)
                continue
            f.seek(hsize)
            text = f.read(length)
            f.seek(0)
            seq2 = LIVE_HEADER.unpack(f.read(LIVE_HEADER.size))[3]
            if seq2 != seq:
                time.sleep(0.001)
                continue
            try:
                return json.loads(text.decode())
            except ValueError as e:
                raise StatsError("%s: bad JSON in the live page: %s" % (path, e)) from None
        raise StatsError("%s: the page kept changing while being read" % path)


def load_dump(path):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise StatsError("cannot read %s: %s" % (path, e.strerror)) from None
    except ValueError as e:
        raise StatsError("%s is not a JSON dump: %s" % (path, e)) from None


def kib(x):
    return x >> 10


def cache_allocs(c):
    k = c["counters"]
    return k["alloc_fastpath"] + k["alloc_slowpath"]


def cache_frees(c):
    k = c["counters"]
    return k["free_fastpath"] + k["free_slowpath"]


def table(d):
    """The lines of the table, as core/stats/stats.c print_text writes them."""
    if "error" in d:
        return ["uslub: %s" % d["error"]]
    out = ["uslub: slabinfo for pid %d, caches by memory" % d["pid"]]
    out.append("%-14s %9s %9s %4s %7s %6s %5s %7s %7s %9s %9s %10s %10s %9s %9s %8s" % (
        "# name", "active", "total", "use", "objsize", "objper", "order", "slabs",
        "partial", "mem_KiB", "waste_KiB", "allocs", "frees", "slow_al", "slow_fr",
        "fallback"))
    # stable sort: equal memory keeps the class order, as the insertion sort in C does
    caches = sorted(d["caches"], key=lambda c: -c["memory_bytes"])
    for c in caches:
        allocs, frees = cache_allocs(c), cache_frees(c)
        if not allocs and not c["slabs"]:
            continue
        k = c["counters"]
        waste = "-"
        if k["sample_requests"]:
            waste = "%d" % kib(c["handed_out_bytes"] - c["requested_bytes"])
        use = c["active_objects"] * 100 // c["total_objects"] if c["total_objects"] else 0
        out.append("%-14s %9d %9d %3d%% %7d %6d %5s %7d %7d %9d %9s %10d %10d %9d %9d %8d" % (
            c["name"], c["active_objects"], c["total_objects"], use, c["object_size"],
            c["objects_per_slab"], "%d/%d" % (c["order"], c["min_order"]), c["slabs"],
            c["partial_slabs"], kib(c["memory_bytes"]), waste, allocs, frees,
            k["alloc_slowpath"], k["free_slowpath"], k["order_fallback"]))
    norders = len(d["page_allocator"]["free_blocks"])
    by_order = [sum(c["slabs_by_order"][o] for c in d["caches"]) for o in range(norders)]
    out.append("uslub: slabs by order:" + "".join(" %d" % v for v in by_order))
    page = 1 << 12 if "page_size" not in d["config"] else d["config"]["page_size"]
    for n in d["nodes"]:
        out.append("uslub: page allocator node %d: free blocks by order:%s; free %d KiB "
                   "(warm %d KiB); grows %d, no-wait misses %d, returned %d KiB" % (
                       n["node"], "".join(" %d" % v for v in n["free_blocks"]),
                       kib(n["free_pages"] * page), kib(n["warm_free_pages"] * page),
                       n["grows"], n["nowait_misses"], kib(n["returned_bytes"])))
        if len(d["nodes"]) > 1:
            # dumps before the search order was added lack the last two fields
            out.append("uslub: node %d: local partial hits %d, get_any_partial calls %d, "
                       "nodes tried %d (again %d), remote slabs %d; search order%s" % (
                           n["node"], n["local_partial_hits"], n["get_any_partial_calls"],
                           n["nodes_tried"], n.get("nodes_tried_again", 0),
                           n["remote_slabs"],
                           "".join(" %d" % v for v in n.get("search_order", []))))
    if "locks" in d:  # dumps before lock_stat lack it
        out.append("uslub: lock contention (waits/trylock failures):" + ",".join(
            " %s %d/%d" % (k, v["waits"], v["trylock_failures"]) for k, v in d["locks"].items()))
    t = d["totals"]
    out.append("uslub: totals: mapped %d KiB (peak %d), in use %d KiB (peak %d), slabs %d "
               "KiB, large %d KiB, huge %d KiB, free pages %d KiB, returned %d KiB" % (
                   kib(t["mapped"]), kib(t["peak_mapped"]), kib(t["in_use"]),
                   kib(t["peak_in_use"]), kib(t["slab_bytes"]), kib(t["large_bytes"]),
                   kib(t["huge"]), kib(t["free_pages"]), kib(t["returned"])))
    out.append("uslub: requested ~%d KiB of %d KiB handed out from sampled caches; "
               "threads %d" % (kib(t["requested_estimate"]), kib(t["sampled_in_use"]),
                               t["threads"]))
    if "resident" in t:
        out.append("uslub: resident: process %d KiB, ours %d KiB; huge-page backed: ours "
                   "%d KiB, process %d KiB" % (kib(t["resident"]), kib(t["resident_ours"]),
                                               kib(t["anon_huge_ours"]),
                                               kib(t["anon_huge"])))
    return out


def cmd_stats(args):
    print("\n".join(table(load_dump(args.file))))


def cmd_top(args):
    if args.once:
        d = read_live(args.pid)
        if args.json:
            json.dump(d, sys.stdout)
            print()
        else:
            print("\n".join(table(d)))
        return
    tty = sys.stdout.isatty()
    try:
        while True:
            try:
                lines = table(read_live(args.pid))
            except StatsError:
                if not os.path.exists("/proc/%d" % args.pid):
                    print("uslub top: process %d has exited" % args.pid)
                    return
                raise
            rows = os.get_terminal_size().lines - 1 if tty else len(lines)
            head = "uslub top: pid %d, every %.1f s (Ctrl-C quits) %s" % (
                args.pid, args.interval, time.strftime("%H:%M:%S"))
            # clear and redraw: no curses needed
            sys.stdout.write(("\x1b[H\x1b[2J" if tty else "") + head + "\n" +
                             "\n".join(lines[:max(rows - 1, 3)]) + "\n")
            sys.stdout.flush()
            time.sleep(args.interval)
    except KeyboardInterrupt:
        pass


def cmd_plot(args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = load_dump(args.file)
    caches = [c for c in d["caches"] if c["slabs"] or cache_allocs(c)]
    caches.sort(key=lambda c: c["memory_bytes"])
    if not caches:
        raise StatsError("%s: no cache was used" % args.file)
    names = [c["name"] for c in caches]
    requested, waste, free = [], [], []
    for c in caches:
        handed = c["handed_out_bytes"]
        # without samples the split of what was handed out is unknown: all of it counts
        # as asked for
        req = c["requested_bytes"] if c["counters"]["sample_requests"] else handed
        requested.append(req / 1024)
        waste.append((handed - req) / 1024)
        free.append((c["memory_bytes"] - handed) / 1024)

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, max(4, 0.32 * len(caches) + 2)))
    y = range(len(caches))
    ax1.barh(y, requested, color="#3b7dd8", label="in use (requested)")
    ax1.barh(y, waste, left=requested, color="#e8a33d", label="internal waste (estimated)")
    left = [a + b for a, b in zip(requested, waste)]
    ax1.barh(y, free, left=left, color="#cccccc", label="free in slabs (and slab tails)")
    ax1.set_yticks(list(y))
    ax1.set_yticklabels(names, fontsize=8)
    ax1.set_xlabel("KiB")
    ax1.set_title("Memory per cache")
    ax1.legend(loc="lower right", fontsize=8)

    keys = [("alloc_slowpath", "#3b7dd8"), ("free_slowpath", "#8bb8f0"),
            ("alloc_slab", "#5aa05a"), ("order_fallback", "#d84b3b"),
            ("cpu_partial_alloc", "#9b59b6")]
    h = 0.8 / len(keys)
    for i, (k, color) in enumerate(keys):
        ax2.barh([v + (i - len(keys) / 2) * h + h / 2 for v in y],
                 [c["counters"][k] for c in caches], height=h, color=color, label=k)
    ax2.set_yticks(list(y))
    ax2.set_yticklabels(names, fontsize=8)
    ax2.set_xscale("symlog")
    ax2.set_xlabel("events")
    ax2.set_title("Slow paths and fallbacks")
    ax2.legend(loc="lower right", fontsize=8)
    t = d["totals"]
    fig.suptitle("uslub, pid %d: mapped %.1f MiB, in use %.1f MiB, %d thread(s)" % (
        d["pid"], t["mapped"] / 2**20, t["in_use"] / 2**20, t["threads"]))
    fig.tight_layout()
    fig.savefig(args.output, dpi=100)
    print("uslub plot: wrote %s" % args.output)


def main(argv=None):
    p = argparse.ArgumentParser(prog="uslub", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("stats", help="print the table of a JSON dump")
    s.add_argument("file")
    s.set_defaults(fn=cmd_stats)
    s = sub.add_parser("top", help="show a running process's live statistics")
    s.add_argument("--once", action="store_true", help="print one frame and exit")
    s.add_argument("--json", action="store_true", help="with --once: the page's JSON")
    s.add_argument("--interval", type=float, default=1.0, help="seconds between frames")
    s.add_argument("pid", type=int)
    s.set_defaults(fn=cmd_top)
    s = sub.add_parser("plot", help="plot a JSON dump")
    s.add_argument("file")
    s.add_argument("-o", "--output", required=True, help="the PNG to write")
    s.set_defaults(fn=cmd_plot)
    args = p.parse_args(argv)
    try:
        args.fn(args)
    except StatsError as e:
        print("uslub %s: %s" % (args.cmd, e), file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
