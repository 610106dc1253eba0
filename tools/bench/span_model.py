#!/usr/bin/env python3
"""A model of big buffers in the large zone (core/page/run.c, decay.c section 9).

Buffers of 5-25 MiB, LIVE of them, replaced at random one at a time (the new one
allocated before the old is freed, as tools/bench/workloads/big_buffers.c does), cut
from free memory or from fresh pages at the top, placed by PLACE:

  low      the lowest free range that holds the buffer, at its start
  warm     where the most warm units are, the lowest on a tie (what uslub does): at
           the start of a free range that holds it, at its end (a range shorter than
           twice the buffer), or at the start of warm units in it

Free memory that was used is warm (resident); when a buffer takes fresh pages, warm
free memory beyond KEEP MiB goes back, as much as was taken fresh, chosen by POLICY:

  none     nothing goes back (before section 9)
  high     the highest addresses first (what uslub does)
  low      the lowest addresses first
  small    the smallest free pieces first

KEEP "q" is a quarter of the live buffers (uslub's keep, at least M_TRIM_THRESHOLD).
Prints, per seed, the peak resident memory and the memory faulted in (MiB), the
model's stand-ins for GNU time's %M and the page faults.

Usage: span_model.py [LIVE [STEPS]]      (defaults: 4 600, big_buffers' shape)
"""
import random
import sys

U = 16  # units per MiB (64 KiB units)


def run(live_n, steps, place, policy, keep, seed):
    r = random.Random(seed)
    free = []      # free ranges (start, end), sorted, coalesced
    warm = set()   # warm free units
    top = 0
    rss = peak = faults = 0
    bufs = []

    def warm_fit(n):
        best = None
        for s, e in free:
            if e - s < n:
                continue
            starts = {s}
            if e - s < 2 * n:
                starts.add(e - n)
            starts.update(u for u in range(s + 1, e - n + 1)
                          if u in warm and u - 1 not in warm)
            for st in starts:
                w = sum(1 for u in range(st, st + n) if u in warm)
                if best is None or (w, -st) > (best[0], -best[1]):
                    best = (w, st)
        return best

    def alloc(n):
        nonlocal top, rss, faults
        best = warm_fit(n) if place == "warm" else None
        if best:
            st = best[1]
            i = next(i for i, (s, e) in enumerate(free) if s <= st < e)
            s, e = free.pop(i)
            free[i:i] = [r for r in ((s, st), (st + n, e)) if r[0] < r[1]]
            return take(range(st, st + n))
        for i, (s, e) in enumerate(free):
            if e - s >= n:
                free[i] = (s + n, e)
                if s + n == e:
                    free.pop(i)
                got = range(s, s + n)
                break
        else:
            if free and free[-1][1] == top:
                s, e = free.pop()
                top += n - (e - s)
            else:
                s = top
                top += n
            got = range(s, s + n)
        return take(got)

    def take(got):
        nonlocal rss, faults
        fresh = 0
        for u in got:
            if u in warm:
                warm.discard(u)
            else:
                fresh += 1
        rss += fresh
        faults += fresh
        if policy != "none" and fresh:
            pay(fresh)
        return got.start

    def pay(fresh):
        nonlocal rss
        k = sum(n for _, n in bufs) // 4 if keep == "q" else keep
        give = min(fresh, len(warm) - k)
        if give <= 0:
            return
        holes = list(free)
        if policy == "high":
            holes.sort(key=lambda h: -h[0])
        elif policy == "small":
            holes.sort(key=lambda h: h[1] - h[0])
        for s, e in holes:
            for u in range(s, e):
                if give == 0:
                    return
                if u in warm:
                    warm.discard(u)
                    rss -= 1
                    give -= 1

    def release(s, n):
        free.append((s, s + n))
        warm.update(range(s, s + n))
        free.sort()
        out = []
        for a, b in free:
            if out and out[-1][1] == a:
                out[-1] = (out[-1][0], b)
            else:
                out.append((a, b))
        free[:] = out

    for _ in range(live_n):
        n = r.randint(5 * U, 25 * U)
        bufs.append((alloc(n), n))
        peak = max(peak, rss)
    for _ in range(steps):
        i = r.randrange(live_n)
        n = r.randint(5 * U, 25 * U)
        s = alloc(n)
        peak = max(peak, rss)
        release(*bufs[i])
        bufs[i] = (s, n)
    return peak / U, faults / U


def main():
    live_n = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 600
    print("place policy keep(MiB): peak/faulted-in MiB for seeds 1-4")
    for place in ("low", "warm"):
        for policy in ("none", "high", "low", "small"):
            for keep in ([0] if policy == "none" else ["q", 16, 32]):
                k = keep if keep == "q" else keep * U
                res = [run(live_n, steps, place, policy, k, seed) for seed in (1, 2, 3, 4)]
                print("%-4s %-6s %3s: %s" % (place, policy, keep,
                                             "  ".join("%.0f/%.0f" % x for x in res)))


if __name__ == "__main__":
    main()
