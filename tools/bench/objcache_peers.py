#!/usr/bin/env python3
"""Object caches against malloc/free under uslub and the four peers (issue 27), timed.

  tools/bench/objcache_peers.py BUILD [--size 64] [--n 5000000] [--runs 5] [--rcu 1000000]
                                [--also NAME=LIBUSLUB.so]

BUILD is a release build (meson setup BUILD --buildtype=release). Each run, in an order
rotated run by run: BUILD/tools/bench/objcache (linked with uslub: its caches and its
malloc) `pairs` and `bulk`, then BUILD/tools/bench/objcache_peer (the malloc sides alone)
under LD_PRELOAD of each allocator (none for glibc), then, with --rcu, `objcache rcu`.
Prints a Markdown table of min / median / max ns per object (the objects of a round of 64
counted one by one). --also runs the linked program again with another build of
libuslub.so preloaded (a base to compare with). Results: tools/bench/results/objcache.md.
"""
import argparse
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import PEERS  # noqa: E402


def run(argv, lib=None):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if lib:
        env["LD_PRELOAD"] = lib
    out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout
    values = {}
    for line in out.splitlines():
        f = line.split()
        values[f[0]] = float(f[1])
        for i in range(2, len(f) - 1, 2):  # "name value key value": rcu's peak
            values[f[0] + "_" + f[i]] = float(f[i + 1])
    return values


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--n", type=int, default=5000000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rcu", type=int, default=0)
    ap.add_argument("--also", action="append", default=[])
    args = ap.parse_args()
    bench = os.path.join(args.build, "tools", "bench")
    linked, peer = os.path.join(bench, "objcache"), os.path.join(bench, "objcache_peer")
    uslub_lib = os.path.join(args.build, "libuslub.so")
    variants = [("uslub caches", linked, None)]
    also = [a.split("=", 1) for a in args.also]
    variants += [("uslub caches (%s)" % name, linked, lib) for name, lib in also]
    for name, lib, _ in PEERS:
        variants.append((name, peer, uslub_lib if name == "uslub" else lib))
    samples = {}
    for r in range(args.runs):
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        for name, exe, lib in order:
            for mode in ("pairs", "bulk"):
                for key, v in run([exe, mode, str(args.size), str(args.n)], lib).items():
                    samples.setdefault((name, key), []).append(v)
        if args.rcu:
            for key, v in run([linked, "rcu", str(args.rcu)]).items():
                samples.setdefault(("rcu", key), []).append(v)

    def cell(name, key):
        v = samples.get((name, key))
        if not v:
            return "-"
        return "%.2f / %.2f / %.2f" % (min(v), statistics.median(v), max(v))

    print("| ns per object (%d B), min / median / max of %d | alloc+free pair | "
          "64 allocs, then 64 frees | bulk of 64 |" % (args.size, args.runs))
    print("|---|---|---|---|")
    print("| uslub `uslub_cache_alloc`/`_free` (linked) | %s | %s | %s |" % (
        cell("uslub caches", "cache_alloc_free"), cell("uslub caches", "cache_alloc_free_x64"),
        cell("uslub caches", "cache_bulk_x64")))
    print("| uslub `malloc`/`free` (linked) | %s | %s | - |" % (
        cell("uslub caches", "malloc_free"), cell("uslub caches", "malloc_free_x64")))
    for name, _ in also:
        v = "uslub caches (%s)" % name
        print("| %s `uslub_cache_alloc`/`_free` | %s | %s | %s |" % (
            name, cell(v, "cache_alloc_free"), cell(v, "cache_alloc_free_x64"),
            cell(v, "cache_bulk_x64")))
    for name, _, _ in variants[1 + len(also):]:
        print("| %s `malloc`/`free` (%s) | %s | %s | - |" % (
            name, "LD_PRELOAD" if name != "glibc" else "none preloaded",
            cell(name, "malloc_free"), cell(name, "malloc_free_x64")))
    if args.rcu:
        print()
        print("| %d objects of 64 B retired, min / median / max of %d | ns per object | "
              "peak resident KiB above the start |" % (args.rcu, args.runs))
        print("|---|---|---|")
        for key, what in (("call_rcu_free", "`call_rcu` + `free` per object (liburcu memb)"),
                          ("uslub_free_rcu", "`uslub_free_rcu`")):
            print("| %s | %s | %s |" % (what, cell("rcu", key), cell("rcu", key + "_peak_kib")))


if __name__ == "__main__":
    main()
