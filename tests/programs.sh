#!/bin/bash
# programs.sh NAME: run a real program twice, with glibc's malloc and with
# LD_PRELOAD=$LIB (libuslub.so), each time in a fresh temporary directory, and require
# the same exit status and byte-identical stdout and stderr.
#
#   LIB=build/libuslub.so tests/programs.sh python
#
# NAME is one of: python perl bash sqlite3 git gcc sort. Exit status 0 when both runs
# agree, 1 when they differ (a diff is printed), 77 (meson's "skipped") when the
# program is not installed. Everything below the preloaded bash runs under uslub too:
# the interpreter, git's helpers, cc1/as/ld, sort's threads.
#
# Internal: programs.sh --case NAME runs the workload in the current directory.

set -u

self=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
here=$(dirname "$self")
unset USLUB_STATS USLUB_STATS_FILE

# ---- the workloads: each writes a deterministic report to stdout -----------------------

need_python() { [ -x /usr/bin/python3 ] || echo "/usr/bin/python3"; }
case_python() {
	# Debian's interpreter, not a shim on PATH; PYTHONMALLOC=malloc sends every object
	# through malloc instead of pymalloc's arenas
	PYTHONMALLOC=malloc PYTHONHASHSEED=0 /usr/bin/python3 "$here/programs_workload.py"
}

need_perl() { command -v perl >/dev/null || echo perl; }
case_perl() {
	PERL_HASH_SEED=0 PERL_PERTURB_KEYS=0 perl "$here/programs_workload.pl"
}

need_bash() { command -v bash >/dev/null || echo bash; }
case_bash() {
	bash "$here/programs_workload.bash"
}

need_sqlite3() { command -v sqlite3 >/dev/null || echo sqlite3; }
case_sqlite3() {
	sqlite3 rows.db <<'SQL'
CREATE TABLE t(id INTEGER PRIMARY KEY, grp INTEGER, name TEXT, val REAL);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000)
INSERT INTO t SELECT x, x % 97, printf('name-%06d', (x * 7919) % 200000),
                     (x * 37 % 1000) / 10.0 FROM c;
CREATE INDEX t_grp ON t(grp);
CREATE INDEX t_name ON t(name);
SELECT count(*), sum(val), count(DISTINCT name) FROM t;
SELECT grp, count(*), round(sum(val), 1), min(name), max(name), group_concat(id % 10, '')
  FROM (SELECT * FROM t WHERE id % 1000 < 40 ORDER BY id) GROUP BY grp ORDER BY grp;
SELECT grp, count(*), round(avg(val), 4) FROM t GROUP BY grp ORDER BY count(*) DESC, grp
  LIMIT 10;
SELECT name, id FROM t ORDER BY name DESC LIMIT 5;
DELETE FROM t WHERE grp % 3 = 0;
VACUUM;
SELECT count(*), sum(id) FROM t;
SQL
}

need_git() { command -v git >/dev/null || echo git; }
case_git() {
	export HOME=$PWD GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
	export GIT_AUTHOR_NAME=uslub GIT_AUTHOR_EMAIL=uslub@example.invalid
	export GIT_COMMITTER_NAME=uslub GIT_COMMITTER_EMAIL=uslub@example.invalid
	export GIT_AUTHOR_DATE='2024-01-01T00:00:00+0000'
	export GIT_COMMITTER_DATE='2024-01-01T00:00:00+0000'
	local g=(git -c init.defaultBranch=main -c gc.auto=0 -c core.autocrlf=false)
	"${g[@]}" init -q repo || return 1
	cd repo || return 1
	local i d
	for ((i = 0; i < 500; i++)); do
		d=dir$((i % 20))/sub$((i % 3))
		mkdir -p "$d"
		{
			printf 'file %d\n' "$i"
			printf 'line %d of %d\n' $(seq 1 $((i % 37 + 1))) | head -c $((i * 13 % 4000 + 50))
			printf '\n'
		} >"$d/file$i.txt"
	done
	"${g[@]}" add -A && "${g[@]}" commit -q -m "500 generated files" || return 1
	for ((i = 0; i < 500; i += 7)); do
		printf 'changed %d\n' "$i" >>"dir$((i % 20))/sub$((i % 3))/file$i.txt"
	done
	"${g[@]}" rm -q -r -f dir19 || return 1
	GIT_COMMITTER_DATE='2024-01-02T00:00:00+0000' GIT_AUTHOR_DATE='2024-01-02T00:00:00+0000' \
		"${g[@]}" commit -q -a -m "change every 7th file, drop dir19" || return 1
	"${g[@]}" log --format=%H
	"${g[@]}" ls-tree -r HEAD
	"${g[@]}" diff --stat HEAD~1 HEAD | tail -n 3
	"${g[@]}" repack -q -a -d && "${g[@]}" count-objects -v | grep -v size
	"${g[@]}" fsck --no-progress --full 2>&1
	"${g[@]}" grep -c 'changed' HEAD -- dir1 | head -n 5
}

need_gcc() { command -v gcc >/dev/null || echo gcc; command -v objdump >/dev/null || echo objdump; }
case_gcc() {
	# a generated C file big enough to make cc1 work: 300 functions and a table
	{
		echo '#include <stdio.h>'
		echo '#include <string.h>'
		local i
		for ((i = 0; i < 300; i++)); do
			cat <<EOF
static unsigned long f$i(unsigned long x)
{
	char buf[64];
	unsigned long acc = x * $((i * 2 + 1))u;
	for (int k = 0; k < $((i % 13 + 3)); k++) {
		acc = (acc << 3) ^ (acc >> 7) ^ (unsigned long)k * $((i + 11))u;
		if (acc % $((i % 7 + 2)) == 0)
			acc += $i;
	}
	snprintf(buf, sizeof(buf), "%lu-$i", acc);
	return acc + strlen(buf);
}
EOF
		done
		echo 'static unsigned long (*const table[])(unsigned long) = {'
		for ((i = 0; i < 300; i++)); do printf '\tf%d,\n' "$i"; done
		echo '};'
		cat <<'EOF'
int main(void)
{
	unsigned long h = 14695981039346656037ul;
	for (unsigned i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		h = (h ^ table[i](i)) * 1099511628211ul;
		if (i % 50 == 0)
			printf("%u %lx\n", i, h);
	}
	printf("final %lx\n", h);
	return 0;
}
EOF
	} >prog.c
	gcc -O2 -Wall -c prog.c -o prog.o || return 1
	objdump -d prog.o | sha256sum
	objdump -d prog.o | grep -c '>:$'
	gcc prog.o -o prog || return 1
	./prog
}

need_sort() { command -v sort >/dev/null || echo sort; command -v awk >/dev/null || echo awk; }
case_sort() {
	# about 50 MB of lines, generated the same way in both runs
	awk 'BEGIN {
		x = 12345
		for (i = 0; i < 1500000; i++) {
			x = (x * 69069 + 1) % 4294967296
			printf "%010d %03d line-%07d %s\n", x, i % 997, i, substr("abcdefghijklmnopqrstuvwxyz", i % 26 + 1, 5)
		}
	}' >in.txt || return 1
	wc -c <in.txt
	export LC_ALL=C TMPDIR=$PWD
	sort in.txt | sha256sum
	sort -k2,2n -k1,1r in.txt | sha256sum
	sort -S 8M --parallel=4 -t' ' -k4,4 -k3,3 in.txt | sha256sum
	sort -u -k2,2 in.txt | wc -l
}

# ---- the runner ---------------------------------------------------------------------

cases="python perl bash sqlite3 git gcc sort"

if [ "${1:-}" = "--case" ]; then
	name=$2
	if [ -n "${LD_PRELOAD:-}" ] && ! grep -q "$(basename "$LD_PRELOAD")" /proc/$$/maps; then
		echo "programs.sh: $LD_PRELOAD is not mapped into the preloaded shell" >&2
		exit 3
	fi
	"case_$name"
	exit $?
fi

name=${1:-}
if [ -z "$name" ] || ! [[ " $cases " == *" $name "* ]]; then
	echo "usage: LIB=path/to/libuslub.so $0 {${cases// /|}}" >&2
	exit 2
fi
lib=${LIB:-}
if [ -z "$lib" ] || [ ! -f "$lib" ]; then
	echo "programs.sh: LIB must name libuslub.so (LIB='$lib')" >&2
	exit 1
fi
lib=$(readlink -f "$lib")
missing=$("need_$name")
if [ -n "$missing" ]; then
	echo "programs.sh $name: SKIP, not installed: $missing"
	exit 77
fi

results=$(mktemp -d "${TMPDIR:-/tmp}/uslub-programs.XXXXXX") || exit 1
trap 'rm -rf "$results"' EXIT

# run LABEL PRELOAD: the workload in a fresh directory, output into $results/LABEL.*
run() {
	local label=$1 preload=$2 dir start end
	dir=$(mktemp -d "${TMPDIR:-/tmp}/uslub-$name-$label.XXXXXX") || return 1
	start=$(date +%s.%N)
	(
		cd "$dir" || exit 1
		unset LD_PRELOAD
		if [ -n "$preload" ]; then
			export LD_PRELOAD=$preload
		fi
		exec bash "$self" --case "$name"
	) >"$results/$label.out" 2>"$results/$label.err" </dev/null
	echo $? >"$results/$label.rc"
	end=$(date +%s.%N)
	awk -v s="$start" -v e="$end" 'BEGIN { printf "%.2f", e - s }' >"$results/$label.time"
	rm -rf "$dir"
}

run glibc ""
run uslub "$lib"

rc_glibc=$(cat "$results/glibc.rc")
rc_uslub=$(cat "$results/uslub.rc")
status=0
echo "programs.sh $name: glibc run $(cat "$results/glibc.time") s (exit $rc_glibc)," \
	"LD_PRELOAD run $(cat "$results/uslub.time") s (exit $rc_uslub)," \
	"$(wc -c <"$results/glibc.out") bytes of output"
if [ "$rc_glibc" != 0 ]; then
	echo "FAIL: the workload itself fails without LD_PRELOAD (exit $rc_glibc):"
	head -c 2000 "$results/glibc.err"
	status=1
fi
if [ ! -s "$results/glibc.out" ]; then
	echo "FAIL: the workload printed nothing"
	status=1
fi
if [ "$rc_glibc" != "$rc_uslub" ]; then
	echo "FAIL: exit status $rc_glibc with glibc, $rc_uslub with LD_PRELOAD=$lib"
	status=1
fi
for stream in out err; do
	if ! cmp -s "$results/glibc.$stream" "$results/uslub.$stream"; then
		echo "FAIL: std$stream differs (--- glibc, +++ LD_PRELOAD):"
		diff -u "$results/glibc.$stream" "$results/uslub.$stream" | head -n 40
		status=1
	fi
done
if [ $status = 0 ]; then
	echo "programs.sh $name: identical stdout, stderr and exit status" \
		"(stdout sha256 $(sha256sum <"$results/glibc.out" | cut -c1-16))"
fi
exit $status
