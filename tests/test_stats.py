#!/usr/bin/python3
"""test_stats.py: the statistics end to end (suite 'stats').

Runs build/tests/test_stats (linked with the engine: every event in uslub's caches is
the program's own, so counters compare for equality) in its modes, and real programs
under LD_PRELOAD, and checks what the dump, the live page and the tools show:

  counts       counters, active objects and the request estimate equal what the program
               did on its threads; the JSON parses and has the keys of DESIGN.md section
               5; tools/uslub stats prints from the JSON the table the library printed
  exit-thread  the dump appears, once, when a second thread calls exit()
  fork         parent and forked child each dump their own figures
  ls           coreutils closes stderr at exit: the table appears all the same
  nodes        each node's search_order on 4 simulated nodes, in the JSON and in the node
               lines of both tables
  mallinfo2    mallinfo2() and malloc_stats() under LD_PRELOAD report uslub's figures
  live         tools/uslub top --once reads the live page while threads come and go, its
               figures become exact once they stop, the page goes away at exit
  plot         tools/uslub plot writes a PNG

usage: test_stats.py TEST_STATS_EXE TOOLS_USLUB LIBUSLUB
"""

import json
import os
import subprocess
import sys
import tempfile
import time

EXE, TOOL, LIB = sys.argv[1:4]
TMP = tempfile.mkdtemp(prefix="uslub-stats-")
failures = 0
checks = 0

DOC_CACHE_KEYS = ["name", "object_size", "order", "min_order", "objects_per_slab", "slabs",
                  "active_objects", "total_objects", "partial_slabs", "counters"]
DOC_COUNTERS = ["alloc_fastpath", "alloc_slowpath", "free_fastpath", "free_slowpath",
                "alloc_slab", "free_slab", "alloc_from_partial", "order_fallback"]
DOC_TOTALS = ["mapped", "peak_mapped", "in_use", "peak_in_use", "returned", "resident",
              "anon_huge_ours"]
DOC_PAGE = ["free_blocks", "nowait_misses", "grows", "returned_bytes"]


def check(ok, what):
    global failures, checks
    checks += 1
    if not ok:
        failures += 1
        print("FAIL: " + what, flush=True)
    return ok


def section(what):
    print("  - " + what, flush=True)


def env(**kv):
    e = {k: v for k, v in os.environ.items() if not k.startswith("USLUB_")}
    e.update(kv)
    return e


def run(args, timeout=60, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)


def cache(d, name):
    return next(c for c in d["caches"] if c["name"] == name)


def check_counts(d, name, allocs, active, frees=None, what=""):
    c = cache(d, name)
    k = c["counters"]
    got_allocs = k["alloc_fastpath"] + k["alloc_slowpath"]
    got_frees = k["free_fastpath"] + k["free_slowpath"]
    check(got_allocs == allocs, "%s%s: allocs %d, expected %d" % (what, name, got_allocs, allocs))
    check(c["active_objects"] == active,
          "%s%s: active_objects %d, expected %d" % (what, name, c["active_objects"], active))
    if frees is not None:
        check(got_frees == frees, "%s%s: frees %d, expected %d" % (what, name, got_frees, frees))


def check_keys(d, what):
    check(d.get("version") == 1, "%s: version is %r" % (what, d.get("version")))
    for k in ["config", "totals", "caches", "nodes", "page_allocator"]:
        check(k in d, "%s: no key %s" % (what, k))
    for k in DOC_TOTALS:
        check(k in d["totals"], "%s: totals has no %s" % (what, k))
    for k in DOC_PAGE:
        check(k in d["page_allocator"], "%s: page_allocator has no %s" % (what, k))
    for c in d["caches"]:
        for k in DOC_CACHE_KEYS:
            check(k in c, "%s: cache %s has no %s" % (what, c.get("name"), k))
        for k in DOC_COUNTERS:
            check(k in c["counters"], "%s: cache %s has no counter %s" % (what, c["name"], k))
        check(sum(c["slabs_by_order"]) == c["slabs"], "%s: %s slabs_by_order" % (what, c["name"]))
    check(len(d["nodes"]) >= 1 and "partial_slabs" in d["nodes"][0], "%s: nodes" % what)
    # each node's get_any_partial order: every other node once, the node itself not
    ids = [n["node"] for n in d["nodes"]]
    for n in d["nodes"]:
        order = n.get("search_order")
        check(isinstance(order, list) and
              sorted(order) == sorted(i for i in ids if i != n["node"]),
              "%s: node %d search_order %r" % (what, n["node"], order))
        check(n.get("nodes_tried_again") == 0,
              "%s: node %d nodes_tried_again %r" % (what, n["node"], n.get("nodes_tried_again")))


def cache_rows(lines):
    return [l for l in lines if l.startswith("kmalloc-")]


def test_counts():
    section("counts: exact counters on 4 threads, JSON keys, the same table from the JSON")
    text, js = os.path.join(TMP, "counts.txt"), os.path.join(TMP, "counts.json")
    r = run([EXE, "counts", text, js], env=env())
    sys.stdout.write(r.stderr)
    if not check(r.returncode == 0, "test_stats counts exited %d:\n%s" % (r.returncode, r.stdout)):
        return
    expected = json.loads([l for l in r.stdout.splitlines() if l.startswith("{")][-1])
    d = json.load(open(js))
    check_keys(d, "counts dump")
    for name, e in expected.items():
        check_counts(d, name, e["allocs"], e["active"], e["frees"], "counts dump: ")
        c = cache(d, name)
        check(c["requested_bytes"] == e["requested"],
              "%s: requested_bytes %d, expected %d" % (name, c["requested_bytes"], e["requested"]))
        check(c["handed_out_bytes"] == e["active"] * c["object_size"], "%s: handed_out" % name)
    # main only freed, which gives it a state (a free has a sheaf too); the workers' are gone
    check(d["totals"]["threads"] == 1, "threads %d after the workers exit" % d["totals"]["threads"])
    # every other cache saw nothing: glibc serves libc in the linked build
    others = [c["name"] for c in d["caches"] if c["name"] not in expected and
              c["counters"]["alloc_fastpath"] + c["counters"]["alloc_slowpath"]]
    check(not others, "unexpected allocations in %s" % others)
    c_lines = open(text).read().splitlines()
    p = run([TOOL, "stats", js])
    check(p.returncode == 0, "tools/uslub stats: %s" % p.stderr)
    py_lines = p.stdout.splitlines()
    check(c_lines[1] == py_lines[1], "table header differs:\n%s\n%s" % (c_lines[1], py_lines[1]))
    check(cache_rows(c_lines) == cache_rows(py_lines) and len(cache_rows(c_lines)) == 3,
          "cache rows differ:\n%s\n---\n%s" % ("\n".join(cache_rows(c_lines)),
                                             "\n".join(cache_rows(py_lines))))
    mem = [int(l.split()[9]) for l in cache_rows(c_lines)]
    check(mem == sorted(mem, reverse=True), "table not sorted by memory: %s" % mem)
    same = [l for l in c_lines if l.startswith("uslub: totals")]
    check(same and same == [l for l in py_lines if l.startswith("uslub: totals")],
          "totals line differs")


def test_exit_thread():
    section("exit() from a second thread: one dump, with the thread's counters")
    out = os.path.join(TMP, "exit.%p.json")
    r = run([EXE, "exit-thread"], env=env(USLUB_STATS="json", USLUB_STATS_FILE=out))
    check(r.returncode == 0, "exit-thread exited %d: %s" % (r.returncode, r.stderr))
    path = out.replace("%p", "*")
    files = [f for f in os.listdir(TMP) if f.startswith("exit.") and f.endswith(".json")]
    if not check(len(files) == 1, "dump files: %s (%s)" % (files, path)):
        return
    text = open(os.path.join(TMP, files[0])).read()
    try:
        d = json.loads(text)  # one document: a second dump would not parse
    except ValueError as e:
        check(False, "exit-thread dump does not parse (twice?): %s" % e)
        return
    check_keys(d, "exit-thread dump")
    check_counts(d, "kmalloc-1k", 777, 777, 0, "exit-thread: ")
    r = run([EXE, "exit-thread"], env=env(USLUB_STATS="1"))
    check(r.stderr.count("uslub: slabinfo") == 1,
          "text dump on stderr %d times:\n%s" % (r.stderr.count("uslub: slabinfo"), r.stderr))


def test_fork():
    section("fork: the child dumps its own figures, the parent its own")
    out = os.path.join(TMP, "fork.%p.json")
    r = run([EXE, "fork"], env=env(USLUB_STATS="json", USLUB_STATS_FILE=out))
    if not check(r.returncode == 0, "fork exited %d: %s" % (r.returncode, r.stderr)):
        return
    e = json.loads(r.stdout.strip().splitlines()[-1])
    check(e["child_status"] == 0, "child status %d" % e["child_status"])
    for who in ["parent", "child"]:
        path = out.replace("%p", str(e[who]))
        if not check(os.path.exists(path), "no dump from the %s (%s)" % (who, path)):
            continue
        d = json.load(open(path))
        check(d["pid"] == e[who], "%s dump has pid %d" % (who, d["pid"]))
        check_counts(d, "kmalloc-192", e[who + "_active"], e[who + "_active"], 0, who + ": ")


def test_ls():
    section("ls closes stderr at exit (close_stdout): the table appears anyway")
    r = run(["ls", "/"], env=env(LD_PRELOAD=LIB, USLUB_STATS="1"))
    check(r.returncode == 0, "ls exited %d" % r.returncode)
    check("uslub: slabinfo" in r.stderr and "uslub: totals" in r.stderr,
          "no table from ls:\n%s" % r.stderr)
    r = run(["ls", "/"], env=env(LD_PRELOAD=LIB, USLUB_STATS="json"))
    try:
        check_keys(json.loads(r.stderr), "ls json")
    except ValueError as e:
        check(False, "ls JSON dump does not parse: %s\n%s" % (e, r.stderr[:500]))


def test_nodes():
    section("nodes: search_order on 4 simulated nodes, in the JSON and the text table")
    # fake:4 is a ring at distances 20 and 30; ties keep node number order
    want = {0: [1, 3, 2], 1: [0, 2, 3], 2: [1, 3, 0], 3: [0, 2, 1]}
    js, text = os.path.join(TMP, "nodes.json"), os.path.join(TMP, "nodes.txt")
    r = run(["ls", "/"], env=env(LD_PRELOAD=LIB, USLUB_NUMA="fake:4", USLUB_STATS="json",
                                 USLUB_STATS_FILE=js))
    check(r.returncode == 0, "ls exited %d" % r.returncode)
    try:
        d = json.load(open(js))
    except (OSError, ValueError) as e:
        check(False, "fake:4 JSON dump: %s" % e)
        return
    check_keys(d, "fake:4 json")
    got = {n["node"]: n["search_order"] for n in d["nodes"]}
    check(got == want, "fake:4 search orders %r, expected %r" % (got, want))
    r = run(["ls", "/"], env=env(LD_PRELOAD=LIB, USLUB_NUMA="fake:4", USLUB_STATS="1",
                                 USLUB_STATS_FILE=text))
    p = run([TOOL, "stats", js])
    check(p.returncode == 0, "tools/uslub stats: %s" % p.stderr)
    for name, lines in [("library", open(text).read().splitlines()),
                        ("tools/uslub stats", p.stdout.splitlines())]:
        orders = [l.split("; search order")[1] for l in lines
                  if l.startswith("uslub: node ") and "; search order" in l]
        check(orders == [" " + " ".join(map(str, want[n])) for n in range(4)],
              "%s: node lines' search orders %r" % (name, orders))


MALLINFO = r"""
import ctypes, sys
class MI(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MI
libc.malloc.restype = ctypes.c_void_p
keep = [libc.malloc(1000) for _ in range(2000)]
m = libc.mallinfo2()
print(m.arena, m.uordblks, m.fordblks, m.hblkhd, m.keepcost, m.usmblks)
sys.stdout.flush()
libc.malloc_stats()
"""


def test_mallinfo():
    section("mallinfo2() and malloc_stats() under LD_PRELOAD give uslub's figures")
    r = run(["/usr/bin/python3", "-c", MALLINFO], env=env(LD_PRELOAD=LIB))
    if not check(r.returncode == 0, "python mallinfo2 exited %d: %s" % (r.returncode, r.stderr)):
        return
    arena, used, free, hblkhd, keep, peak = [int(x) for x in r.stdout.split()[:6]]
    check(used >= 2000 * 1024, "uordblks %d below the 2000 KiB kept" % used)
    check(used + free <= arena, "uordblks %d + fordblks %d > arena %d" % (used, free, arena))
    check(peak >= arena, "usmblks %d below arena %d" % (peak, arena))
    check("uslub: slabinfo" in r.stderr and "kmalloc-1k" in r.stderr,
          "malloc_stats printed no table:\n%s" % r.stderr[:500])


def test_live():
    section("live: top --once while threads come and go; exact once they stop")
    p = subprocess.Popen([EXE, "live", "2.5"], env=env(USLUB_STATS="live"),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        pid = json.loads(p.stdout.readline())["pid"]
        page = "/dev/shm/uslub.%d" % pid
        frames = 0
        threads_seen = set()
        # Ten reads while the threads churn (2.5 s); on a loaded machine each start of
        # the tool takes longer, so the bound is ten reads, not a rate.
        deadline = time.time() + 10.0
        while frames < 10 and time.time() < deadline:
            r = run([TOOL, "top", "--once", "--json", str(pid)])
            if r.returncode == 0:
                d = json.loads(r.stdout)
                threads_seen.add(d["totals"]["threads"])
                frames += 1
            time.sleep(0.05)
        check(frames >= 10, "top --once succeeded %d times in 10 s" % frames)
        r = run([TOOL, "top", "--once", str(pid)])
        check(r.returncode == 0 and "uslub: slabinfo for pid %d" % pid in r.stdout,
              "top --once text:\n%s%s" % (r.stdout, r.stderr))
        ready = json.loads(p.stdout.readline())
        check(ready.get("ready") and ready["churn_threads"] > 8,
              "churn threads: %s" % ready)
        d = None
        for _ in range(40):  # the page is rewritten every 200 ms
            d = json.loads(run([TOOL, "top", "--once", "--json", str(pid)]).stdout)
            if cache(d, "kmalloc-256")["active_objects"] == ready["kmalloc-256"]:
                break
            time.sleep(0.1)
        check_keys(d, "live page")
        check_counts(d, "kmalloc-256", ready["kmalloc-256"], ready["kmalloc-256"], 0, "live: ")
        check_counts(d, "kmalloc-96", ready["kmalloc-96"], 0, ready["kmalloc-96"], "live: ")
        check(d["totals"]["threads"] == 1, "live: %d thread states after the churn"
              % d["totals"]["threads"])
        check(os.path.exists(page), "no %s while running" % page)
        p.stdin.write("done\n")
        p.stdin.close()
        check(p.wait(timeout=30) == 0, "live program exited %s" % p.returncode)
        check(not os.path.exists(page), "%s left behind at exit" % page)
        r = run([TOOL, "top", "--once", str(pid)])
        check(r.returncode != 0 and "USLUB_STATS=live" in r.stderr,
              "top on a finished pid: %d %s" % (r.returncode, r.stderr))
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_plot():
    section("plot: a PNG from a dump")
    js = os.path.join(TMP, "counts.json")
    png = os.path.join(TMP, "plot.png")
    if not os.path.exists(js):
        check(False, "no dump to plot")
        return
    r = run([TOOL, "plot", js, "-o", png], timeout=120)
    check(r.returncode == 0, "plot exited %d: %s" % (r.returncode, r.stderr))
    check(os.path.exists(png) and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n",
          "%s is not a PNG" % png)


for t in [test_counts, test_exit_thread, test_fork, test_ls, test_nodes, test_mallinfo, test_live,
          test_plot]:
    try:
        t()
    except Exception as e:  # a crash in one part is a failure, the others still run
        check(False, "%s raised %r" % (t.__name__, e))

if failures:
    print("test_stats.py: %d of %d checks FAILED (files in %s)" % (failures, checks, TMP))
    sys.exit(1)
print("test_stats.py: %d checks passed" % checks)
subprocess.run(["rm", "-rf", TMP])
