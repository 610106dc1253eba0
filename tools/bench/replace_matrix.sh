#!/bin/bash
# replace_matrix.sh: the replacement workload (tools/bench/replace.c) over bounds x threads x
# allocators, RUNS runs each, allocators alternated, one thread pinned to CPU 0 (this VM's CPU 1
# runs every allocator ~30% slower). From the repository root, after tools/uslub bench built
# build-bench/; BASE=LIB adds another uslub build; SCALE=N runs N times the steps (a run at
# 32 KiB is 25 ms otherwise, short against this VM's bursts of load). Output: "bound threads
# allocator run M/s peak-MiB". A bound in MiB (8M) keeps 16 buffers a thread, each filled
# (replace.c's REPLACE_LIVE and REPLACE_FILL).
B=${B:-build-bench}
RUNS=${RUNS:-3}
SCALE=${SCALE:-1}
declare -A LIB=(
 [glibc]=""
 [jemalloc]=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
 [tcmalloc]=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
 [mimalloc]=/usr/lib/x86_64-linux-gnu/libmimalloc.so.2
 [uslub]=$B/libuslub.so
)
declare -A STEPS=([1K]=5000000 [4K]=3000000 [8K]=3000000 [32K]=1000000 [128K]=1000000 [256K]=1000000
	[512K]=300000 [8M]=1000)
[ -n "$BASE" ] && LIB[base]=$BASE
ORDER="glibc jemalloc tcmalloc mimalloc uslub ${BASE:+base}"
for bound in ${BOUNDS:-1K 4K 8K 32K 128K 8M}; do
 for t in ${THREADS:-1 2 4 8}; do
  pin=""; [ $t = 1 ] && pin="taskset -c 0"
  mib=""; [[ $bound == *M ]] && mib="REPLACE_LIVE=16 REPLACE_FILL=1"
  for r in $(seq $RUNS); do
   for a in $ORDER; do
    err=$(mktemp)
    v=$($pin env LD_PRELOAD=${LIB[$a]} $mib $B/tools/bench/replace $t $bound $((${STEPS[$bound]} * SCALE)) 2>"$err" | tail -1)
    pk=$(sed -n 's/^replace: peak RSS \([0-9.]*\) MiB$/\1/p' "$err"); rm -f "$err"
    echo "$bound $t $a $r $v $pk"
   done
  done
 done
done
