#!/bin/sh
# Instructions per object of the object caches' calls beside malloc's, counted by
# callgrind as tools/bench/opcount is (bench.py, opcounts): (Ir(2N) - Ir(N)) / N per
# round, divided by the objects in a round, so start-up cancels. Results:
# tools/bench/results/objcache.md.
#
#   tools/bench/objcache_ops.sh BUILD [SIZE [N]]
#     BUILD: a release build directory (meson setup BUILD --buildtype=release)
set -eu
build=$1
size=${2:-64}
n=${3:-100000}
exe=$build/tools/bench/objcache
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
ir() {
	valgrind --tool=callgrind --callgrind-out-file="$out/cg" "$exe" count "$1" "$size" "$2" \
		>/dev/null 2>&1
	awk '/^(summary|totals):/ { print $2; exit }' "$out/cg"
}
for mode in malloc cache batch cbatch bulk; do
	objects=1
	case $mode in batch | cbatch | bulk) objects=64 ;; esac
	one=$(ir $mode "$n")
	two=$(ir $mode $((2 * n)))
	awk -v m=$mode -v a="$one" -v b="$two" -v n="$n" -v k=$objects -v s="$size" \
		'BEGIN { printf "%-7s %d B: %.2f instructions per alloc+free\n", m, s, (b - a) / n / k }'
done
