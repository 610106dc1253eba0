#!/bin/bash
# threads_vs_procs.sh: what sharing a process costs an allocator. The replacement workload
# (tools/bench/replace.c) as N processes of one thread each, pinned to CPUs 0..N-1 and run
# at once (their rates summed), against one process of N threads pinned the same way
# (REPLACE_PIN=1), alternated, ROUNDS rounds. Whatever the threads of one process lose
# against the processes is paid for what they share: the allocator's structures and the
# address space (page tables, TLB shootdowns, the faults' locks).
#
# Usage, from the repository root after build-bench/ is built (tools/uslub bench):
#   tools/bench/threads_vs_procs.sh LIB BOUND [STEPS_PER_THREAD] [ROUNDS] [N]
# LIB: a library to preload ("" for glibc). Prints each round's "procs M/s threads M/s
# ratio", then the medians and the ratio's median [min-max].
set -euo pipefail
LIB=${1?usage: threads_vs_procs.sh LIB BOUND [STEPS] [ROUNDS] [N]}
BOUND=${2?usage: threads_vs_procs.sh LIB BOUND [STEPS] [ROUNDS] [N]}
STEPS=${3:-4000000}
ROUNDS=${4:-5}
N=${5:-2}
EXE=${B:-build-bench}/tools/bench/replace
[ -x "$EXE" ] || {
	echo "threads_vs_procs.sh: $EXE not built (tools/uslub bench builds it)" >&2
	exit 2
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

procs() {
	local pids=() i
	for ((i = 0; i < N; i++)); do
		LD_PRELOAD=$LIB taskset -c "$i" "$EXE" 1 "$BOUND" "$STEPS" >"$tmp/p$i" 2>/dev/null &
		pids+=($!)
	done
	wait "${pids[@]}"
	cat "$tmp"/p* | awk '{ s += $1 } END { printf "%.1f", s }'
	rm -f "$tmp"/p*
}

threads() {
	LD_PRELOAD=$LIB REPLACE_PIN=1 "$EXE" "$N" "$BOUND" "$STEPS" 2>/dev/null | tail -1
}

for ((r = 0; r < ROUNDS; r++)); do
	if ((r % 2)); then
		t=$(threads)
		p=$(procs)
	else
		p=$(procs)
		t=$(threads)
	fi
	echo "procs $p threads $t ratio $(awk -v a="$t" -v b="$p" 'BEGIN { printf "%.3f", a / b }')"
done | tee "$tmp/rounds"
awk '
	{ p[NR] = $2; t[NR] = $4; q[NR] = $6 }
	function median(a, n,   i, j, x) {
		for (i = 2; i <= n; i++)
			for (j = i; j > 1 && a[j - 1] > a[j]; j--) { x = a[j]; a[j] = a[j - 1]; a[j - 1] = x }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	END {
		n = NR; pm = median(p, n); tm = median(t, n); qm = median(q, n)
		printf "median: procs %.1f threads %.1f M/s, threads/procs %.3f [%.3f-%.3f]\n", pm, tm, qm, q[1], q[n]
	}' "$tmp/rounds"
