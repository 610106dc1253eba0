#!/usr/bin/python3
"""bench.py: uslub side by side with glibc, jemalloc, tcmalloc and mimalloc.

Run by `tools/uslub bench`, which installs the peers and builds BUILD first.

  bench.py --build DIR --out DIR suite [--quick] [--runs N] [--only NAME,...]
  bench.py --build DIR --out DIR show [--runs N]
  bench.py --build DIR --out DIR opcount
  bench.py --build DIR --out DIR report

suite   every workload under every allocator, N rounds (default 5); in round r each
        allocator runs once, in an order rotated by r, so a burst of load from whatever
        else the machine is doing falls on all of them alike rather than on one. Wall time
        and peak RSS (wait4's ru_maxrss) per run; OUT/results.md and OUT/bench.png.
        Then the callgrind instruction counts (opcount). --quick: each workload once at a
        small size, checking only that it completes and is right.
show    the figures asked for when the allocator was first shown: instructions per
        operation, a stress program and two real programs (uslub, glibc, mimalloc), and
        the memory kept after everything is freed. OUT/allocator-show.md.
opcount callgrind instructions per malloc+free pair, OUT/opcount.md.
report  OUT/results.md and OUT/bench.png again from OUT/raw.json (every run's figures,
        which suite saves before it reports).

Every run is checked: a workload exits non-zero on a wrong result, and a real program's
output must match its output under glibc. A failed run is reported, never timed.
"""
import argparse
import datetime
import hashlib
import math
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LIBDIR = "/usr/lib/x86_64-linux-gnu"

# name, library to preload (None: glibc's own malloc), Debian package
PEERS = [
    ("glibc", None, "libc6"),
    ("jemalloc", LIBDIR + "/libjemalloc.so.2", "libjemalloc2"),
    ("tcmalloc", LIBDIR + "/libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
    ("mimalloc", LIBDIR + "/libmimalloc.so.2", "libmimalloc2.0"),
    ("uslub", None, None),  # the library path is filled in from --build
]

QUICK_SCALE = "0.02"
USLUB_VERSION = None  # --uslub-version: what to call the uslub that was built


class Workload:
    """A program to time. `check` is 'self' (exit status and an 'ok' line: the C
    workloads), 'same' (stdout equal to glibc's) or 'rc' (exit status only)."""

    def __init__(self, name, argv, quick_argv=None, env=None, stdin=None, check="self",
                 prepare=None, what=""):
        self.name = name
        self.argv = argv
        self.quick_argv = quick_argv or argv
        self.env = env or {}
        self.stdin = stdin
        self.check = check
        self.prepare = prepare
        self.what = what


class Run:
    def __init__(self, wall, rss_kib, rc, out, err):
        self.wall = wall
        self.rss_kib = rss_kib
        self.rc = rc
        self.out = out
        self.err = err


def clean_env(preload, extra):
    env = dict(os.environ)
    for var in ("LD_PRELOAD", "USLUB_STATS", "USLUB_STATS_FILE", "MALLOC_CONF",
                "MIMALLOC_VERBOSE", "PYTHONMALLOC"):
        env.pop(var, None)
    if preload:
        env["LD_PRELOAD"] = preload
    env.update(extra)
    return env


def run_once(argv, preload, extra_env=None, stdin=None, limit=300, cwd=None):
    """Runs argv once: wall time from fork to reaping; peak RSS as GNU time reports it.
    wait4's ru_maxrss of our own child would not do: the child is a copy of this Python
    process until it execs, so every program would seem to need at least Python's RSS.
    /usr/bin/time is small, so the floor it puts under the figure is ~2 MiB, the same
    for every allocator."""
    env = clean_env(preload, extra_env or {})
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r") as rss, open(stdin or os.devnull, "rb") as inp:
        timed = ["/usr/bin/time", "-q", "-f", "%M", "-o", rss.name] + argv
        t0 = time.perf_counter()
        p = subprocess.Popen(timed, stdin=inp, stdout=out, stderr=err, env=env, cwd=cwd)
        timer = threading.Timer(limit, p.kill)
        timer.start()
        _, status, _ = os.wait4(p.pid, 0)
        t1 = time.perf_counter()
        timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        lines = rss.read().split()
        rss_kib = int(lines[-1]) if lines and lines[-1].isdigit() else 0
        return Run(t1 - t0, rss_kib, p.returncode, out.read(), err.read())


def say(msg):
    print(msg, file=sys.stderr, flush=True)


ALSO = []  # --also NAME=LIB: more allocators (another uslub build, before a change)


def allocators(build, names=None):
    result = []
    for name, lib, _ in PEERS + [(n, l, None) for n, l in ALSO]:
        if name == "uslub":
            lib = os.path.join(build, "libuslub.so")
        if names and name not in names:
            continue
        if lib and not os.path.exists(lib):
            sys.exit("bench: %s is missing (%s)" % (name, lib))
        result.append((name, lib))
    return result


def rotated(items, r):
    r %= len(items)
    return items[r:] + items[:r]


# ---- workloads ------------------------------------------------------------------------

def make_csv(path, rows):
    """The sqlite3 import: deterministic rows, written once per size."""
    if os.path.exists(path):
        return
    rng = random.Random(7)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("id,grp,score,name\n")
        for i in range(rows):
            f.write("%d,g%d,%.3f,%s%d\n" % (i, rng.randrange(500), rng.random() * 1000,
                                            "n" * rng.randrange(1, 20), rng.randrange(rows // 4)))
    os.rename(tmp, path)


def sqlite_script(out, rows):
    data = os.path.join(out, "data")
    os.makedirs(data, exist_ok=True)
    csv = os.path.join(data, "rows-%d.csv" % rows)
    script = os.path.join(data, "import-%d.sql" % rows)

    def prepare():
        make_csv(csv, rows)
        with open(os.path.join(HERE, "programs", "import_query.sql")) as f:
            body = f.read()
        with open(script, "w") as f:
            f.write(".mode csv\n.import %s t\n.mode list\n%s" % (csv, body))
    return script, prepare


def workloads(build, out):
    bindir = os.path.join(build, "tools", "bench")

    def c(name, what):
        exe = os.path.join(bindir, name)
        return Workload(name, [exe], [exe, QUICK_SCALE], what=what)

    ws = [
        c("larson", "server: 4 threads replace random objects (16 B-1 KiB) in tables "
                    "that rotate among them, so frees are by another thread"),
        c("stress", "tests/test_stress.c's pattern: 4 threads, 1 B-2 MiB, realloc, "
                    "objects sent to another thread's inbox"),
        c("prodcons", "producer/consumer: 2 producer and 2 consumer threads, messages "
                      "of 16 B-4 KiB through queues"),
        c("thread_local", "16 threads, each churning its own objects (16 B-2 KiB)"),
        c("realloc_mix", "random sizes 1 B-1 MiB, a third of operations realloc"),
        c("fragmented", "long-lived heap: millions of survivors, random frees, "
                        "new sizes into the holes"),
        c("thread_churn", "threads created and exiting, each allocating; parents free"),
        c("false_sharing", "small objects written by different threads: is each "
                           "thread's object on its own cache line?"),
        c("high_order_frag", "a quarter of a 512 MiB heap kept at random places, then "
                             "hackbench-like messages between thread groups"),
        c("glibc_thread1", "glibc's thread-benchmark pattern: 1024-block working set, "
                           "4 B-32 KiB with density 1/size^2, random replacement, 1 thread"),
        c("glibc_thread2", "the same, 2 threads"),
        c("random_replace1", "256 Ki live blocks of 16 B-1 KiB replaced at random positions, "
                             "1 thread"),
        c("random_replace2", "the same, 2 threads each with half the live set"),
        c("prodcons1", "one thread allocates messages of 16 B-4 KiB, another frees them"),
        c("larson_sized", "larson through C++ operator new and sized operator delete"),
        c("big_buffers", "buffers of 5-25 MiB, 4 live, replaced one at a time and each "
                         "filled once"),
        c("malloc_large", "mimalloc-bench's malloc-large: 20 live buffers of 5-25 MiB, a "
                          "random one replaced per step, zero-filled"),
    ]
    py = os.path.join(HERE, "programs", "alloc_heavy.py")
    ws.append(Workload("python3", ["/usr/bin/python3", py], ["/usr/bin/python3", py, "0.02"],
                       env={"PYTHONMALLOC": "malloc"}, check="same",
                       what="python3, PYTHONMALLOC=malloc: objects, strings, lists, json"))
    if shutil.which("sqlite3"):
        full, prep_full = sqlite_script(out, 400000)
        quick, prep_quick = sqlite_script(out, 5000)
        w = Workload("sqlite3", ["/usr/bin/sqlite3", ":memory:"], check="same",
                     stdin=full, prepare=prep_full,
                     what="sqlite3 :memory:, .import of 400,000 CSV rows, indexes, "
                          "join, GROUP BY")
        w.quick_stdin, w.quick_prepare = quick, prep_quick
        ws.append(w)
    lua = shutil.which("lua5.4")
    if lua:
        script = os.path.join(HERE, "programs", "tables.lua")
        ws.append(Workload("lua5.4", [lua, script], [lua, script, "0.02"], check="same",
                           what="lua5.4: hash tables and arrays built, emptied, sorted"))
    db_bench = shutil.which("db_bench")
    if db_bench:
        db = os.path.join(out, "data", "rocksdb")

        def wipe():
            shutil.rmtree(db, ignore_errors=True)
        args = [db_bench, "--benchmarks=fillrandom", "--db=" + db, "--threads=1",
                "--compression_type=none", "--value_size=100", "--histogram=0"]
        ws.append(Workload("db_bench", args + ["--num=400000"], args + ["--num=5000"],
                           check="rc", prepare=wipe,
                           what="rocksdb db_bench --benchmarks=fillrandom, 400,000 keys"))
    return ws


def check_run(w, alloc, run, reference):
    """None if the run is right, else why not."""
    if run.rc != 0:
        return "exit status %d: %s" % (run.rc, run.err.decode(errors="replace")[-500:])
    if w.check == "self" and b": ok:" not in run.out:
        return "no 'ok' line in its output"
    if w.check == "same" and reference is not None and run.out != reference:
        return "output differs from glibc's"
    return None


# ---- suite ----------------------------------------------------------------------------

def run_suite(args):
    allocs = allocators(args.build, args.allocators.split(",") if args.allocators else None)
    ws = workloads(args.build, args.out)
    if args.only:
        names = args.only.split(",")
        unknown = set(names) - {w.name for w in ws} - {"micro"}
        if unknown:
            sys.exit("bench: no workload named %s (have: %s)" %
                     (", ".join(sorted(unknown)), ", ".join(w.name for w in ws)))
        ws = [w for w in ws if w.name in names]
    runs = 1 if args.quick else args.runs
    results = {(w.name, a): [] for w in ws for a, _ in allocs}
    failures = []
    reference = {}
    started = time.time()
    load_start = os.getloadavg()
    # glibc's output is the reference, so glibc runs first the first time round.
    for w in ws:
        if w.check == "same":
            prep = getattr(w, "quick_prepare", None) if args.quick else w.prepare
            if prep:
                prep()
            stdin = getattr(w, "quick_stdin", None) if args.quick else w.stdin
            ref = run_once(w.quick_argv if args.quick else w.argv, None, w.env, stdin)
            if ref.rc != 0:
                failures.append((w.name, "glibc", "reference run: exit %d" % ref.rc))
            reference[w.name] = ref.out
    for r in range(runs):
        for w in ws:
            for name, lib in rotated(allocs, r):
                prep = getattr(w, "quick_prepare", None) if args.quick else w.prepare
                if prep:
                    prep()
                stdin = getattr(w, "quick_stdin", None) if args.quick else w.stdin
                argv = w.quick_argv if args.quick else w.argv
                run = run_once(argv, lib, w.env, stdin, limit=60 if args.quick else 300)
                why = check_run(w, name, run, reference.get(w.name))
                if why:
                    failures.append((w.name, name, why))
                    say("bench: round %d %-16s %-9s FAILED: %s" % (r + 1, w.name, name, why))
                    continue
                results[(w.name, name)].append(run)
                say("bench: round %d %-16s %-9s %7.3f s %8.1f MiB" %
                    (r + 1, w.name, name, run.wall, run.rss_kib / 1024))
    micro, micro_failures = run_micro(args.build, allocs, runs, args.quick) \
        if not args.only or "micro" in args.only.split(",") else (None, [])
    failures += micro_failures
    load_end = os.getloadavg()
    elapsed = time.time() - started
    if args.quick:
        for w in ws:
            if w.prepare and w.check == "rc":
                w.prepare()
        if failures:
            for f in failures:
                say("bench: FAILED %s under %s: %s" % f)
            return 1
        say("bench: quick run: %d workloads x %d allocators completed and checked in %.0f s"
            % (len(ws), len(allocs), elapsed))
        return 0
    counts = opcounts(args.build, allocs) if not args.no_opcount else None
    for w in ws:
        if w.check == "rc" and w.prepare:
            w.prepare()
    raw = {
        "machine": machine_lines(),
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "runs": runs,
        "load": [load_start[0], load_end[0], elapsed],
        "allocators": [a for a, _ in allocs],
        "workloads": [[w.name, w.what] for w in ws],
        "results": {"%s|%s" % k: [[r.wall, r.rss_kib] for r in v] for k, v in results.items()},
        "failures": failures,
        "micro": {"%s|%s" % k: v for k, v in (micro or {}).items()},
        "opcount": {"%s|%s|%d" % k: v for k, v in (counts or {}).items()},
    }
    os.makedirs(args.out, exist_ok=True)
    import json
    with open(os.path.join(args.out, "raw.json"), "w") as f:
        json.dump(raw, f, indent=1)
    return write_report(args.out)


class Named:
    def __init__(self, name, what):
        self.name = name
        self.what = what


def write_report(out):
    """results.md and bench.png from OUT/raw.json, which keeps every run's figures, so a
    report can be redone (`bench.py report`) without measuring again."""
    import json
    with open(os.path.join(out, "raw.json")) as f:
        raw = json.load(f)
    ws = [Named(n, w) for n, w in raw["workloads"]]
    allocs = [(a, None) for a in raw["allocators"]]
    results = {tuple(k.split("|")): [Run(w, r, 0, b"", b"") for w, r in v]
               for k, v in raw["results"].items()}
    micro = {tuple(k.split("|")): v for k, v in raw["micro"].items()}
    counts = {}
    for k, v in raw["opcount"].items():
        a, m, size = k.split("|")
        counts[(a, m, int(size))] = v
    failures = [tuple(f) for f in raw["failures"]]
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(report(raw, ws, allocs, results, failures, raw["runs"], counts, micro,
                       raw["load"]))
    plot(ws, allocs, results, os.path.join(out, "bench.png"))
    say("bench: wrote %s and %s" % (os.path.join(out, "results.md"),
                                     os.path.join(out, "bench.png")))
    return 1 if failures else 0


def spread(values):
    return min(values), statistics.median(values), max(values)


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def machine_lines():
    lines = []
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    lines.append("- machine: %d vCPU (`nproc`), %s, %.1f GiB memory, kernel %s (`uname -r`)"
                 % (os.cpu_count(), cpu, mem, platform.release()))
    versions = []
    for name, _, pkg in PEERS:
        if pkg is None:
            versions.append("uslub %s (release build)" % (USLUB_VERSION or git_describe()))
            continue
        v = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True,
                           text=True).stdout.strip() or "?"
        versions.append("%s %s (`%s`)" % (name, v, pkg))
    lines.append("- allocators: " + "; ".join(versions))
    return lines


def git_describe():
    r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                       capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "core",
                            "preload", "size_classes"], capture_output=True, text=True)
    return (r.stdout.strip() or "?") + ("+changes" if dirty.stdout.strip() else "")


def fmt_ratio(x):
    return "%.2f" % x


def report(raw, ws, allocs, results, failures, runs, counts, micro, load):
    names = [a for a, _ in allocs]
    out = []
    out.append("# uslub benchmarks")
    out.append("")
    out.append("- date: %s" % raw["date"])
    out.extend(raw["machine"])
    out.append("- method: %d rounds; in round r every allocator runs every workload once, in "
               "an order rotated by r. Wall time from fork to exit; peak RSS as GNU time's %%M "
               "reports it (the program's ru_maxrss; time's own ~1 MiB is the floor). Median of the runs, then [min-max]; ratio is to the best median "
               "of the row (1.00 = best). The machine was shared with other jobs (load "
               "average %.2f at the start, %.2f at the end, %.0f s in all), which is why runs "
               "alternate and spreads are shown." % (runs, load[0], load[1], load[2]))
    out.append("- reproduce: `tools/uslub bench` (`--runs N`, `--only NAME,...`)")
    out.append("")
    if failures:
        out.append("## Failed runs")
        out.append("")
        for w, a, why in failures:
            out.append("- %s under %s: %s" % (w, a, why.strip().replace("\n", " ")))
        out.append("")
    for title, key, unit, scale in (("Wall time", "wall", "s", 1.0),
                                    ("Peak RSS", "rss_kib", "MiB", 1 / 1024)):
        out.append("## %s (%s): median [min-max], ratio to best" % (title, unit))
        out.append("")
        out.append("| workload | " + " | ".join(names) + " |")
        out.append("|---|" + "---:|" * len(names))
        ratios = {a: [] for a in names}
        for w in ws:
            meds = {}
            cells = []
            for a in names:
                vals = [getattr(r, key) * scale for r in results[(w.name, a)]]
                if vals:
                    meds[a] = spread(vals)
            best = min(m[1] for m in meds.values()) if meds else None
            for a in names:
                if a not in meds:
                    cells.append("failed")
                    continue
                lo, med, hi = meds[a]
                ratio = med / best if best else float("nan")
                ratios[a].append(ratio)
                prec = "%.3f" if key == "wall" else "%.1f"
                cell = (prec % med) + " [" + (prec % lo) + "-" + (prec % hi) + "] " + \
                    ("**%s**" % fmt_ratio(ratio) if ratio == 1.0 else fmt_ratio(ratio))
                cells.append(cell)
            out.append("| %s | %s |" % (w.name, " | ".join(cells)))
        out.append("| **geometric mean of ratios** | " +
                   " | ".join("**%.2f**" % geomean(ratios[a]) for a in names) + " |")
        out.append("")
    out.append("## Workloads")
    out.append("")
    for w in ws:
        out.append("- `%s`: %s" % (w.name, w.what))
    out.append("")
    if micro:
        out.append(micro_table(micro, names))
    if counts:
        out.append(opcount_table(counts, names))
    return "\n".join(out) + "\n"


def plot(ws, allocs, results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    names = [a for a, _ in allocs]
    fig, axes = plt.subplots(2, 1, figsize=(14, 8.5), sharex=True)
    width = 0.8 / len(names)
    colours = ["#7f7f7f", "#1f77b4", "#2ca02c", "#ff7f0e", "#d62728"]
    for ax, key, label in ((axes[0], "wall", "wall time / best (lower is better)"),
                           (axes[1], "rss_kib", "peak RSS / best (lower is better)")):
        for i, a in enumerate(names):
            xs, ys, lo, hi = [], [], [], []
            for j, w in enumerate(ws):
                best = min((statistics.median(getattr(r, key) for r in results[(w.name, b)])
                            for b in names if results[(w.name, b)]), default=None)
                vals = [getattr(r, key) for r in results[(w.name, a)]]
                if not vals or not best:
                    continue
                med = statistics.median(vals)
                xs.append(j + (i - (len(names) - 1) / 2) * width)
                ys.append(med / best)
                lo.append((med - min(vals)) / best)
                hi.append((max(vals) - med) / best)
            ax.bar(xs, ys, width, yerr=[lo, hi], capsize=1.5, label=a,
                   color=colours[i % len(colours)], error_kw={"elinewidth": 0.7})
        ax.axhline(1.0, color="black", linewidth=0.6)
        # one pathological ratio (30x) would flatten every other bar on a linear axis
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(matplotlib.ticker.FixedLocator(
            [0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 20, 50, 100]))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: "%g" % v))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_ylabel(label + ", log scale")
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(ncol=len(names), loc="upper left", fontsize=9)
    axes[1].set_xticks(range(len(ws)))
    axes[1].set_xticklabels([w.name for w in ws], rotation=30, ha="right")
    fig.suptitle("median of runs relative to the best allocator per workload; "
                 "bars show min-max", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# ---- Google Benchmark micro-benchmarks ------------------------------------------------

def run_micro(build, allocs, runs, quick):
    """ns per item of each micro-benchmark case: {(case, allocator): [ns, ...]}, or None
    when uslub-micro was not built (no libbenchmark-dev). Rounds rotate as in the suite."""
    import json
    exe = os.path.join(build, "tools", "bench", "uslub-micro")
    if not os.path.exists(exe):
        say("bench: %s not built (libbenchmark-dev missing?): no micro-benchmarks" % exe)
        return None, []
    argv = [exe, "--benchmark_format=json"]
    argv += ["--benchmark_min_time=0.001", "--benchmark_filter=^(pair/64|cross_thread/64)"] \
        if quick else ["--benchmark_min_time=0.1"]
    times, failures = {}, []
    for r in range(runs):
        for name, lib in rotated(allocs, r):
            run = run_once(argv, lib, limit=600)
            if run.rc != 0:
                failures.append(("uslub-micro", name, "exit status %d: %s" % (
                    run.rc, run.err.decode(errors="replace")[-300:])))
                continue
            for b in json.loads(run.out)["benchmarks"]:
                if b.get("error_occurred"):
                    failures.append(("micro " + b["name"], name, b.get("error_message", "")))
                    continue
                case = b["name"].replace("/real_time", "")
                times.setdefault((case, name), []).append(1e9 / b["items_per_second"])
            say("bench: round %d micro-benchmarks %-9s done" % (r + 1, name))
    return times, failures


def micro_table(times, names):
    cases = []
    for case, _ in times:
        if case not in cases:
            cases.append(case)
    out = ["## Micro-benchmarks (Google Benchmark): ns per operation, median [min-max]", ""]
    out.append("`build-bench/tools/bench/uslub-micro --benchmark_min_time=0.1`, one process "
               "per allocator per round, rounds rotated as above; an operation is one call "
               "of the malloc family with its free (`realloc_grow`: one realloc). Cases: "
               "see `tools/bench/micro.c`. Ratio to the best median of the row.")
    out.append("")
    out.append("| case | " + " | ".join(names) + " |")
    out.append("|---|" + "---:|" * len(names))
    for case in cases:
        meds = {a: spread(times[(case, a)]) for a in names if (case, a) in times}
        best = min(m[1] for m in meds.values())
        cells = []
        for a in names:
            if a not in meds:
                cells.append("failed")
                continue
            lo, med, hi = meds[a]
            ratio = med / best
            cells.append("%.1f [%.1f-%.1f] %s" % (med, lo, hi, "**1.00**" if ratio == 1.0
                                                  else "%.2f" % ratio))
        out.append("| %s | %s |" % (case, " | ".join(cells)))
    out.append("")
    return "\n".join(out)


# ---- callgrind instruction counts -----------------------------------------------------

OP_SIZES = (16, 64, 256, 1024)
OP_N = {"pair": 100000, "batch": 100}  # batch: rounds of 1000
OP_PAIRS = {"pair": 1, "batch": 1000}


def callgrind_ir(exe, lib, mode, size, n, tmp):
    outfile = os.path.join(tmp, "cg.out")
    argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + outfile,
            exe, mode, str(size), str(n)]
    run = run_once(argv, lib, limit=600)
    if run.rc != 0:
        raise RuntimeError("callgrind %s %s %d under %s: exit %d: %s" %
                           (mode, size, n, lib, run.rc, run.err.decode()[-300:]))
    with open(outfile) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    raise RuntimeError("no totals in " + outfile)


def opcounts(build, allocs):
    """Instructions per malloc+free pair: (Ir(2N) - Ir(N)) / N, which cancels start-up."""
    if not shutil.which("valgrind"):
        say("bench: no valgrind, no instruction counts")
        return None
    exe = os.path.join(build, "tools", "bench", "opcount")
    counts = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, lib in allocs:
            for mode in ("pair", "batch"):
                for size in OP_SIZES:
                    n = OP_N[mode]
                    one = callgrind_ir(exe, lib, mode, size, n, tmp)
                    two = callgrind_ir(exe, lib, mode, size, 2 * n, tmp)
                    counts[(name, mode, size)] = (two - one) / (n * OP_PAIRS[mode])
            say("bench: callgrind %-9s %s" % (name, " ".join(
                "%.1f" % counts[(name, m, s)] for m in ("pair", "batch") for s in OP_SIZES)))
    return counts


def opcount_table(counts, names):
    out = ["## Instructions per malloc+free pair (callgrind)", ""]
    out.append("Counted by callgrind (`valgrind --tool=callgrind`, which leaves a preloaded "
               "malloc in place) on `tools/bench/opcount`: (Ir(2N) - Ir(N)) / N, so start-up "
               "cancels. *pair*: malloc then free, repeated (N = %d). *batch*: 1000 mallocs "
               "then the 1000 frees in the same order, repeated (N = %d x 1000). "
               "Instructions, not time: deterministic, but a cache miss costs no more than "
               "an add here." % (OP_N["pair"], OP_N["batch"]))
    out.append("")
    out.append("| allocator | " + " | ".join("pair %d B" % s for s in OP_SIZES) + " | " +
               " | ".join("batch %d B" % s for s in OP_SIZES) + " |")
    out.append("|---|" + "---:|" * (2 * len(OP_SIZES)))
    for a in names:
        if (a, "pair", OP_SIZES[0]) not in counts:
            continue
        out.append("| %s | " % a + " | ".join(
            "%.1f" % counts[(a, m, s)] for m in ("pair", "batch") for s in OP_SIZES) + " |")
    out.append("")
    return "\n".join(out)


def run_opcount(args):
    allocs = allocators(args.build)
    counts = opcounts(args.build, allocs)
    if counts is None:
        return 1
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "opcount.md"), "w") as f:
        f.write(opcount_table(counts, [a for a, _ in allocs]))
    return 0


# ---- show: the figures for the allocator's first presentation --------------------------

SHOW_COMMANDS = """## Commands

`tools/uslub bench --show` builds `build-bench/` (release) and runs, with `LD_PRELOAD`
set to each allocator's library (unset for glibc):

```
valgrind --tool=callgrind --callgrind-out-file=OUT build-bench/tools/bench/opcount pair SIZE N
valgrind --tool=callgrind --callgrind-out-file=OUT build-bench/tools/bench/opcount batch SIZE N
    # SIZE 16, 64, 256, 1024; each with N and 2N; Ir from OUT's totals line
/usr/bin/time -f %M build-bench/tools/bench/stress
PYTHONMALLOC=malloc /usr/bin/time -f %M /usr/bin/python3 tools/bench/programs/alloc_heavy.py
/usr/bin/time -f %M sqlite3 :memory: < bench-results/data/import-400000.sql
    # .import of bench-results/data/rows-400000.csv, then tools/bench/programs/import_query.sql
build-bench/tools/bench/rss_after_free
```
"""


def run_show(args):
    allocs = allocators(args.build)
    counts = opcounts(args.build, allocs)
    trio = [a for a in allocs if a[0] in ("glibc", "mimalloc", "uslub")]
    ws = {w.name: w for w in workloads(args.build, args.out)}
    chosen = [ws["stress"], ws["python3"], ws["sqlite3"]]
    results = {(w.name, a): [] for w in chosen for a, _ in trio}
    failures = []
    reference = {}
    load_start = os.getloadavg()
    started = time.time()
    for w in chosen:
        if w.prepare:
            w.prepare()
        if w.check == "same":
            reference[w.name] = run_once(w.argv, None, w.env, w.stdin).out
    for r in range(args.runs):
        for w in chosen:
            for name, lib in rotated(trio, r):
                run = run_once(w.argv, lib, w.env, w.stdin)
                why = check_run(w, name, run, reference.get(w.name))
                if why:
                    failures.append((w.name, name, why))
                    say("bench: %s under %s FAILED: %s" % (w.name, name, why))
                    results[(w.name, name)].append(None)
                    continue
                results[(w.name, name)].append(run)
                say("bench: round %d %-8s %-9s %7.3f s %8.1f MiB" %
                    (r + 1, w.name, name, run.wall, run.rss_kib / 1024))
    elapsed = time.time() - started
    load_end = os.getloadavg()
    trims = {}
    exe = os.path.join(args.build, "tools", "bench", "rss_after_free")
    for r in range(3):
        for name, lib in rotated(allocs, r):
            run = run_once([exe], lib)
            if run.rc != 0:
                failures.append(("rss_after_free", name, run.err.decode()))
                continue
            f = run.out.split()
            trims.setdefault(name, []).append(
                (int(f[1]), int(f[3]), int(f[5])))

    out = ["# uslub: the figures for the allocator's first presentation", ""]
    out.append("- date: %s" % datetime.datetime.now().strftime("%Y-%m-%d %H:%M"))
    out.extend(machine_lines())
    out.append("- reproduce: `tools/uslub bench --show` (runs `tools/bench/bench.py show` on "
               "a release build in `build-bench/`)")
    out.append("- the machine was shared with other jobs running tests (load average %.2f at "
               "the start of the timed runs, %.2f at the end); runs alternate allocators for "
               "that reason" % (load_start[0], load_end[0]))
    out.append("")
    out.append(SHOW_COMMANDS)
    if failures:
        out.append("## Failed runs")
        out.append("")
        for w, a, why in failures:
            out.append("- %s under %s: %s" % (w, a, why.strip().replace("\n", " ")))
        out.append("")
    if counts:
        out.append(opcount_table(counts, [a for a, _ in allocs]))
    out.append("## Wall time and peak RSS: uslub, glibc, mimalloc")
    out.append("")
    out.append("%d rounds; in round r each allocator runs each program once, in an order "
               "rotated by r (%.0f s in all). Per allocator: min / median / max. Ratios are "
               "uslub's run divided by the other allocator's run of the same round, then "
               "min / median / max over the rounds (below 1: uslub faster or smaller)."
               % (args.runs, elapsed))
    out.append("")
    out.append("| program | measure | glibc | mimalloc | uslub | uslub / glibc | "
               "uslub / mimalloc |")
    out.append("|---|---|---:|---:|---:|---:|---:|")
    for w in chosen:
        for key, label, scale, prec in (("wall", "time (s)", 1.0, "%.3f"),
                                        ("rss_kib", "peak RSS (MiB)", 1 / 1024, "%.1f")):
            cells = []
            for a in ("glibc", "mimalloc", "uslub"):
                vals = [getattr(x, key) * scale for x in results[(w.name, a)] if x]
                cells.append(" / ".join(prec % v for v in spread(vals)) if vals else "failed")
            for other in ("glibc", "mimalloc"):
                pairs = [getattr(u, key) / getattr(o, key)
                         for u, o in zip(results[(w.name, "uslub")], results[(w.name, other)])
                         if u and o]
                cells.append(" / ".join("%.2f" % v for v in spread(pairs)) if pairs else "-")
            out.append("| %s | %s | %s |" % (w.name, label, " | ".join(cells)))
    out.append("")
    out.append("Programs: `stress` is `build-bench/tools/bench/stress` (%s); `python3` is "
               "`PYTHONMALLOC=malloc /usr/bin/python3 tools/bench/programs/alloc_heavy.py`; "
               "`sqlite3` is `sqlite3 :memory:` reading an `.import` of 400,000 CSV rows and "
               "`tools/bench/programs/import_query.sql`." % ws["stress"].what)
    out.append("")
    out.append("## Resident memory after everything is freed")
    out.append("")
    out.append("`build-bench/tools/bench/rss_after_free`: 1 GiB in 64-byte objects allocated "
               "and touched, all freed, `malloc_trim(0)` called (only glibc and uslub export "
               "it; under the others the call reaches glibc's, which has nothing to trim), "
               "RSS read from `/proc/self/statm` at once and 2 s later. 3 runs each; "
               "min / median / max in MiB.")
    out.append("")
    out.append("| allocator | peak | after free + trim | 2 s later |")
    out.append("|---|---:|---:|---:|")
    for name, _ in allocs:
        if name not in trims:
            out.append("| %s | failed | | |" % name)
            continue
        cols = []
        for i in range(3):
            cols.append(" / ".join("%.1f" % (v / 1024)
                                   for v in spread([t[i] for t in trims[name]])))
        out.append("| %s | %s |" % (name, " | ".join(cols)))
    out.append("")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "allocator-show.md")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    say("bench: wrote " + path)
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True, help="build directory holding libuslub.so")
    ap.add_argument("--out", required=True, help="where results go")
    ap.add_argument("--uslub-version", help="how the report names the uslub measured "
                    "(default: this tree's git commit)")
    ap.add_argument("--also", action="append", default=[], metavar="NAME=LIB",
                    help="one more allocator to preload, side by side with the others "
                    "(e.g. uslub-before=../old/build-bench/libuslub.so)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("suite")
    s.add_argument("--quick", action="store_true")
    s.add_argument("--runs", type=int, default=5)
    s.add_argument("--only")
    s.add_argument("--no-opcount", action="store_true")
    s.add_argument("--allocators", help="only these (comma-separated names), e.g. to compare "
                   "two uslub builds with --also")
    s = sub.add_parser("show")
    s.add_argument("--runs", type=int, default=5)
    sub.add_parser("opcount")
    sub.add_parser("report", help="redo OUT/results.md and OUT/bench.png from OUT/raw.json")
    args = ap.parse_args()
    global USLUB_VERSION
    USLUB_VERSION = args.uslub_version
    for spec in args.also:
        name, sep, lib = spec.partition("=")
        if not sep or not name or not lib:
            sys.exit("bench: --also takes NAME=LIB, not %r" % spec)
        ALSO.append((name, os.path.abspath(lib)))
    args.build = os.path.abspath(args.build)
    args.out = os.path.abspath(args.out)
    if getattr(args, "runs", 1) < 1:
        sys.exit("bench: --runs must be at least 1")
    if args.cmd == "report":
        return write_report(args.out)
    return {"suite": run_suite, "show": run_show, "opcount": run_opcount}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
