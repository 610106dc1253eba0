#!/usr/bin/python3
"""spike.py: resident memory over time after a spike of small blocks, uslub beside its peers.

Runs tools/bench/spike (built by meson) under glibc, jemalloc (with and without its
background thread), tcmalloc, mimalloc and uslub (default settings, and with
USLUB_BACKGROUND=1 and =0), plus any --also NAME=LIB (e.g. the uslub before a change),
RUNS times each, in an order rotated every round so that load from elsewhere on the
machine falls on all alike. Writes OUT/spike.md (a table of resident memory at the
spike, just after the frees and at 5, 10 and 15 s: min / median / max over the runs) and
OUT/spike.png (the median run of each over time).

  spike.py --build DIR --out DIR [--runs N] [--bytes B] [--seconds S] [--idle]
           [--also NAME=LIB ...] [--only NAME,...]

--idle: no light traffic after the frees (a program gone quiet).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

LIBDIR = "/usr/lib/x86_64-linux-gnu"


def configs(build, also):
    lib = os.path.join(build, "libuslub.so")
    out = [
        ("glibc", None, {}),
        ("jemalloc", LIBDIR + "/libjemalloc.so.2", {}),
        ("jemalloc+bg", LIBDIR + "/libjemalloc.so.2", {"MALLOC_CONF": "background_thread:true"}),
        ("tcmalloc", LIBDIR + "/libtcmalloc_minimal.so.4", {}),
        ("mimalloc", LIBDIR + "/libmimalloc.so.2", {}),
        ("uslub", lib, {}),
        ("uslub bg=1", lib, {"USLUB_BACKGROUND": "1"}),
        ("uslub bg=0", lib, {"USLUB_BACKGROUND": "0"}),
    ]
    for spec in also:
        name, _, path = spec.partition("=")
        out.append((name, os.path.abspath(path), {}))
    return out


def run_one(exe, lib, env_extra, nbytes, seconds, idle):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("USLUB_", "MALLOC_CONF", "LD_PRELOAD"))}
    if lib:
        env["LD_PRELOAD"] = lib
    env.update(env_extra)
    p = subprocess.run([exe, str(nbytes), str(seconds), "1" if idle else "0"], env=env,
                       capture_output=True, text=True, timeout=seconds + 300)
    if p.returncode != 0 or "ok" not in p.stdout.split():
        raise RuntimeError("spike failed (%d): %s" % (p.returncode, p.stderr[-500:]))
    r = {"series": []}
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) == 2 and f[0].endswith("_kib"):
            r[f[0]] = int(f[1])
        elif len(f) == 4 and f[0] == "t_ms":
            r["series"].append((int(f[1]), int(f[3])))
    return r


def at(run, t_ms):
    """Resident KiB at the last sample at or before t_ms."""
    best = None
    for t, kib in run["series"]:
        if t <= t_ms:
            best = kib
    return best


def mib(kib):
    return kib / 1024.0


def spread(values):
    v = sorted(values)
    return "%.0f / %.0f / %.0f" % (mib(v[0]), mib(statistics.median(v)), mib(v[-1]))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bytes", type=int, default=1 << 30)
    ap.add_argument("--seconds", type=int, default=15)
    ap.add_argument("--idle", action="store_true")
    ap.add_argument("--also", action="append", default=[])
    ap.add_argument("--only")
    args = ap.parse_args()
    exe = os.path.join(os.path.abspath(args.build), "tools", "bench", "spike")
    cfgs = configs(os.path.abspath(args.build), args.also)
    if args.only:
        keep = args.only.split(",")
        cfgs = [c for c in cfgs if c[0] in keep]
    os.makedirs(args.out, exist_ok=True)
    runs = {c[0]: [] for c in cfgs}
    for r in range(args.runs):
        order = cfgs[r % len(cfgs):] + cfgs[:r % len(cfgs)]
        for name, lib, env in order:
            res = run_one(exe, lib, env, args.bytes, args.seconds, args.idle)
            runs[name].append(res)
            print("round %d %-12s peak %6.0f MiB, freed %6.0f, 5 s %6.0f, 10 s %6.0f, "
                  "end %6.0f" % (r + 1, name, mib(res["peak_kib"]), mib(res["freed_kib"]),
                                 mib(at(res, 5000)), mib(at(res, 10000)),
                                 mib(res["series"][-1][1])), flush=True)
    tag = "spike-idle" if args.idle else "spike"
    with open(os.path.join(args.out, tag + ".json"), "w") as f:
        json.dump(runs, f)
    t_end = args.seconds * 1000
    lines = ["| allocator | live | peak | just freed | 2.5 s | 5 s | 10 s | %d s | live + 96 MiB at 10 s |"
             % args.seconds, "|---|---|---|---|---|---|---|---|---|"]
    for name, _, _ in cfgs:
        rs = runs[name]
        ten = [at(x, 10000) - x["live_kib"] for x in rs]
        ok = sum(1 for d in ten if d <= 96 * 1024)
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %d of %d |" % (
            name, spread([x["live_kib"] for x in rs]), spread([x["peak_kib"] for x in rs]),
            spread([x["freed_kib"] for x in rs]), spread([at(x, 2500) for x in rs]),
            spread([at(x, 5000) for x in rs]), spread([at(x, 10000) for x in rs]),
            spread([at(x, t_end) for x in rs]), ok, len(rs)))
    what = ("no traffic after the frees" if args.idle
            else "one malloc/free pair a millisecond after the frees")
    head = ["Resident MiB (min / median / max of %d runs, rounds rotated) after %d MiB of "
            "16-512 B blocks were freed, %s; times from the end of the frees." %
            (args.runs, args.bytes >> 20, what),
            "Command: `/usr/bin/python3 tools/bench/spike.py --build %s --out %s --runs %d%s`" %
            (args.build, args.out, args.runs, " --idle" if args.idle else ""), ""]
    with open(os.path.join(args.out, tag + ".md"), "w") as f:
        f.write("\n".join(head + lines) + "\n")
    print("\n".join(head + lines))
    plot(cfgs, runs, os.path.join(args.out, tag + ".png"), what, args.bytes)


def plot(cfgs, runs, path, what, nbytes):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 5))
    for name, _, _ in cfgs:
        rs = runs[name]
        # the run whose resident memory at 10 s is the median one
        rs = sorted(rs, key=lambda x: at(x, 10000))
        x = rs[len(rs) // 2]
        ts = [t / 1000.0 for t, _ in x["series"]]
        ys = [mib(k) for _, k in x["series"]]
        style = "-" if name.startswith("uslub") else "--"
        ax.plot(ts, ys, style, label=name, linewidth=2 if name == "uslub" else 1.2)
    ax.axvline(10, color="grey", linewidth=0.8)
    ax.set_xlabel("seconds after the frees")
    ax.set_ylabel("resident MiB")
    ax.set_title("After a %d MiB spike of small blocks: %s" % (nbytes >> 20, what), fontsize=10)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
