#!/bin/bash
# The README's get_any_partial table (tools/numa/partial_search.c) on the emulated
# machines of numa_emu.c, through uslub's real discovery path (USLUB_NUMA=auto):
#   4 nodes  calls happen, no search looks at a node twice (the local one included), and
#            none looks at more than the 3 other nodes
#   2 nodes  each call looks at the one other node, once
#   4 nodes, auto,noskip  each call looks at the local node again, once: the count the
#            first two checks read as 0 does count
# usage: numa_emu_search.sh USLUB_PARTIAL_SEARCH LIBNUMAEMU
set -u
tool=$1 emu=$2
failures=0

fail() {
	echo "FAIL: $*"
	failures=$((failures + 1))
}

# Sets nodes, calls, tried, again from the tool's one line.
run() {
	local line
	line=$(env -u USLUB_STATS -u USLUB_STATS_FILE LD_PRELOAD="$emu" NUMA_EMU=$1 \
		USLUB_NUMA=$2 "$tool") || fail "NUMA_EMU=$1 USLUB_NUMA=$2: exit status $?"
	echo "NUMA_EMU=$1 USLUB_NUMA=$2: $line"
	read -r _ nodes _ calls _ tried _ _ _ again _ <<<"$line"
	if [[ ! $nodes =~ ^[0-9]+$ || ! $calls =~ ^[0-9]+$ || ! $tried =~ ^[0-9]+$ ||
		! $again =~ ^[0-9]+$ ]]; then
		fail "cannot read the tool's line"
		nodes=0 calls=0 tried=0 again=0
	fi
}

run 4 auto
((nodes == 4)) || fail "4 emulated nodes, uslub found $nodes"
((calls > 0)) || fail "no get_any_partial call on 4 nodes"
((again == 0)) || fail "$again nodes tried again on 4 nodes"
((tried <= 3 * calls)) || fail "$tried nodes tried in $calls calls: more than 3 per call"

run 2 auto
((nodes == 2)) || fail "2 emulated nodes, uslub found $nodes"
((calls > 0)) || fail "no get_any_partial call on 2 nodes"
((again == 0)) || fail "$again nodes tried again on 2 nodes"
((tried == calls)) || fail "$tried nodes tried in $calls calls on 2 nodes"

run 4 auto,noskip
((calls > 0 && again == calls)) || fail "noskip: $again local nodes tried again in $calls calls"

((failures == 0)) && echo "numa_emu_search: all checks passed"
((failures == 0))
