#!/bin/bash
# waves_rounds.sh: tools/bench/waves under every allocator, RUNS rounds, the order rotated each
# round. From the repository root, after tools/uslub bench built build-bench/; BASE=LIB adds
# another uslub build (as "uslub-base"); WAVES=N waves a run (8). Arguments: those of waves
# (GAP_MS [BLOCK [WAVE_MIB]]). Output: a line a run, "allocator faults/ms ..." for each wave.
#   tools/bench/waves_rounds.sh 0 65536 64
B=${B:-build-bench}
L=/usr/lib/x86_64-linux-gnu
libs=("glibc:" "jemalloc:$L/libjemalloc.so.2" "tcmalloc:$L/libtcmalloc_minimal.so.4"
      "mimalloc:$L/libmimalloc.so.2" "uslub:$B/libuslub.so")
[ -n "$BASE" ] && libs+=("uslub-base:$BASE")
n=${#libs[@]}
for r in $(seq "${RUNS:-3}"); do
  for k in $(seq 0 $((n - 1))); do
    e=${libs[$(((k + r) % n))]}
    out=$(WAVES=${WAVES:-8} LD_PRELOAD=${e#*:} "$B/tools/bench/waves" "$@") || exit 1
    echo "${e%%:*} $(echo "$out" | awk '/^wave/ { printf "%s/%s ", $4, $6 }')"
  done
done
