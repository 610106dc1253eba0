#!/usr/bin/env python3
# replace_table.py OUT: the markdown table of replace_matrix.sh's output, median [min-max] per
# cell, uslub in bold where its median is at or above every peer's; bounds in MiB also give the
# median peak RSS (MiB) after a slash, and their rate is in replacements a second.
import sys, statistics, collections
d=collections.defaultdict(list)
peak=collections.defaultdict(list)
for line in open(sys.argv[1]):
    p=line.split()
    if len(p) not in (5,6): continue
    try: d[(p[0],int(p[1]),p[2])].append(float(p[4]))
    except: continue
    if len(p)==6: peak[(p[0],int(p[1]),p[2])].append(float(p[5]))
allocs=[a for a in ["glibc","jemalloc","tcmalloc","mimalloc","uslub","base"] if any(k[2]==a for k in d)]
bounds=[]; threads=[]
for k in d:
    if k[0] not in bounds: bounds.append(k[0])
    if k[1] not in threads: threads.append(k[1])
threads.sort()
print("| bound | threads | "+" | ".join(allocs)+" |")
print("|---|---|"+"---|"*len(allocs))
for b in bounds:
    for t in threads:
        cells=[]
        meds={a:statistics.median(d[(b,t,a)]) for a in allocs if d[(b,t,a)]}
        if not any(a not in ("uslub","base") for a in meds):
            continue  # a thread count this bound was not run at
        best=max(v for a,v in meds.items() if a not in ("uslub","base"))
        for a in allocs:
            v=d[(b,t,a)]
            if not v: cells.append("-"); continue
            m=statistics.median(v)
            if b.endswith("M"):
                s="%.0f/s [%.0f-%.0f]"%(m*1e6,min(v)*1e6,max(v)*1e6)
                if peak[(b,t,a)]: s+=" / %.0f MiB"%statistics.median(peak[(b,t,a)])
            else:
                s="%.1f [%.1f-%.1f]"%(m,min(v),max(v))
            if a=="uslub" and m>=best: s="**"+s+"**"
            cells.append(s)
        print("| %s | %d | "%(b,t)+" | ".join(cells)+" |")
