#!/bin/bash
# ab.sh: one program under several allocators, alternating run by run.
#
# Usage: tools/bench/ab.sh ROUNDS PROGRAM [ARGS...] -- LIB [LIB...]
#   Each round runs PROGRAM once under each LIB (LD_PRELOAD; "glibc" for none), in the
#   order given. Prints, per LIB, the median and [min-max] of the wall time and of the
#   CPU time (user + system) in milliseconds. On a shared machine the CPU time moves less
#   than the wall time when other jobs take the cores.
set -euo pipefail
rounds=$1
shift
cmd=()
while [[ $1 != -- ]]; do
	cmd+=("$1")
	shift
done
shift
libs=("$@")
out=$(mktemp)
times=$(mktemp)
trap 'rm -f "$out" "$times"' EXIT
for ((r = 0; r < rounds; r++)); do
	for l in "${libs[@]}"; do
		pre=$l
		[[ $l == glibc ]] && pre=
		s=$(date +%s%N)
		LD_PRELOAD=$pre /usr/bin/time -f "%U %S" -o "$times" "${cmd[@]}" >/dev/null 2>&1
		e=$(date +%s%N)
		echo "$l $(((e - s) / 1000000)) $(awk '{printf "%d", ($1 + $2) * 1000}' "$times")" >>"$out"
	done
done
stat() { sort -n | awk '{a[NR] = $1} END {printf "%5d [%d-%d]", a[int((NR + 1) / 2)], a[1], a[NR]}'; }
for l in "${libs[@]}"; do
	w=$(grep "^$l " "$out" | awk '{print $2}' | stat)
	c=$(grep "^$l " "$out" | awk '{print $3}' | stat)
	printf "%-50s wall %s  cpu %s\n" "$l" "$w" "$c"
done
