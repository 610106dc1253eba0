#!/bin/bash
# ulimit_programs.sh LIB [LIMIT_KB...]: real programs under a tight `ulimit -v`.
#
# For each limit (default 100000 and 530000 KiB) runs /bin/echo, python3 -c 'print(1)'
# and sort on two lines, first with glibc's malloc and then with LD_PRELOAD=LIB; a program
# that starts and prints the right output under glibc must do so under uslub too, and
# must be seen to have loaded LIB (USLUB_VERBOSE=1 prints uslub's settings on stderr).
# Exit 0 when all agree, 1 otherwise, 77 (skipped) when none of the programs is here.
#
# ulimit_programs.sh --lowest LIB: the lowest limit (KiB, to 1000) at which each program
# still starts, with glibc and with uslub - the figures in the README.

set -u
unset USLUB_STATS USLUB_STATS_FILE

py=/usr/bin/python3
programs=(echo python3 sort)

# run NAME LIMIT [LIB]: the program's stdout, and its status, under `ulimit -v LIMIT`.
run() {
	local name=$1 limit=$2 lib=${3:-}
	local -a cmd
	case $name in
	echo) cmd=(/bin/echo hello) ;;
	python3) cmd=("$py" -c 'print(1)') ;;
	sort) cmd=(sort) ;;
	esac
	printf 'b\na\n' | bash -c 'ulimit -v "$1" || exit 99; shift
		if [ -n "$1" ]; then lib=$1; shift; LD_PRELOAD=$lib USLUB_VERBOSE=1 exec "$@"; fi
		shift; exec "$@"' _ "$limit" "$lib" "${cmd[@]}" 2>"$tmp/err"
}

expected() {
	case $1 in
	echo) echo hello ;;
	python3) echo 1 ;;
	sort) printf 'a\nb\n' ;;
	esac
}

# ok NAME LIMIT [LIB]: whether the program runs right under that limit.
ok() {
	local out
	out=$(run "$@") || return 1
	[ "$out" == "$(expected "$1")" ] || return 1
	[ -z "${3:-}" ] || grep -q 'USLUB_' "$tmp/err"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

available() {
	case $1 in
	python3) [ -x "$py" ] ;;
	*) command -v "$1" >/dev/null ;;
	esac
}

if [ "${1:-}" == "--lowest" ]; then
	lib=$2
	# Bisection between a limit no program starts under and one every program starts
	# under; the answer is the lowest that works, to 1000 KiB.
	for name in "${programs[@]}"; do
		available "$name" || continue
		for who in glibc uslub; do
			l=$([ "$who" == uslub ] && echo "$lib" || echo "")
			lo=1000 hi=2000000
			ok "$name" "$hi" "$l" || { echo "$name $who: fails at $hi"; continue; }
			while [ $((hi - lo)) -gt 1000 ]; do
				mid=$(((lo + hi) / 2))
				if ok "$name" "$mid" "$l"; then hi=$mid; else lo=$mid; fi
			done
			echo "$name $who: lowest ulimit -v $hi"
		done
	done
	exit 0
fi

lib=$1
shift
limits=("$@")
[ ${#limits[@]} -gt 0 ] || limits=(100000 530000)
ran=0 failed=0
for limit in "${limits[@]}"; do
	for name in "${programs[@]}"; do
		available "$name" || continue
		if ! ok "$name" "$limit"; then
			echo "ulimit -v $limit: $name fails with glibc too: not compared"
			continue
		fi
		ran=$((ran + 1))
		if ok "$name" "$limit" "$lib"; then
			echo "ulimit -v $limit: $name runs with glibc and with uslub"
		else
			echo "ulimit -v $limit: $name runs with glibc but NOT with uslub:"
			grep -v '^uslub: USLUB_' "$tmp/err" | sed 's/^/    /'
			failed=$((failed + 1))
		fi
	done
done
[ $ran -gt 0 ] || exit 77
[ $failed -eq 0 ] && echo ok || echo FAILED
[ $failed -eq 0 ]
