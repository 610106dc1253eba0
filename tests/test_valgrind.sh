#!/usr/bin/env bash
# test_valgrind.sh: programs run under memcheck through `tools/uslub valgrind`, with uslub
# as their malloc, get their bugs reported against their own source lines.
#   clean    threads that allocate, realloc and free each other's blocks, every size:
#            "ERROR SUMMARY: 0 errors", no leak
#   buggy    a use after free, a one-byte heap overflow and a leak, each on a known line:
#            "Invalid read" at buggy.c:READ, "Invalid write" at buggy.c:WRITE, and
#            "definitely lost" with the allocation at buggy.c:LEAK; then the same for
#            blocks above 8 KiB: a use after free of a large block and leaks of a large
#            and a huge one, each block the size asked for
#   sizes    for requests of 1, 40, 100, 1000, 5000 (slab objects smaller than their
#            class), 20481 (a large block, not a page multiple), 5 MiB + 1 (huge) and
#            posix_memalign(64, 40): a read of a byte never written ("Conditional jump
#            ... uninitialised") and a write one byte past the end ("Invalid write ...
#            0 bytes after a block of size N"), each at the line in main that made it;
#            malloc_usable_size(malloc(40)) is 40 and all of it may be written; a block
#            grown in place by realloc (40 to 44) ends at 44; calloc'd large and huge
#            blocks are defined. The same error count as under valgrind's own allocator.
#   objcache a constructor's cache and a TYPESAFE_BY_RCU cache (uslub.h, linked): a
#            constructed object read before any write is defined, and so is one handed
#            out again with the state the program left; one byte past the 48-byte object
#            is "Invalid write ... 0 bytes after a block of size 48", a read after
#            uslub_cache_free an invalid read, an object never freed "definitely lost",
#            each at its line; a read of a freed RCU object is no error (type-safe)
#   programs python3 running a short script (PYTHONMALLOC=malloc, so every object is a
#            uslub block) and `git status` in this repository: no more errors than under
#            valgrind's own allocator
# Usage: test_valgrind.sh TOOLS_USLUB LIBUSLUB CC. Exit 77 (skipped) without valgrind.
set -uo pipefail

USLUB=$1 LIB=$2 CC=$3
command -v valgrind >/dev/null || { echo "valgrind is not installed: skipped"; exit 77; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

fail() {
	echo "FAIL: $*"
	failures=$((failures + 1))
}

expect() { # name file pattern
	if grep -q -e "$3" "$2"; then
		echo "  ok: $1"
	else
		fail "$1: no match for '$3' in $2:"
		sed 's/^/    /' "$2"
	fi
}

cat >"$work/clean.c" <<'C'
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
static void *blocks[4][300];
static void *worker(void *arg) {
	long id = (long)arg;
	for (int i = 0; i < 300; i++) { /* free the previous thread's, allocate ours */
		free(blocks[(id + 3) % 4][i]);
		size_t n = (size_t)(i * 29 + id * 7) % 9000 + 1;
		blocks[id][i] = malloc(n);
		memset(blocks[id][i], (int)id, n);
	}
	return NULL;
}
int main(void) {
	pthread_t t[4];
	for (long round = 0; round < 3; round++)
		for (long id = 0; id < 4; id++) {
			pthread_create(&t[id], NULL, worker, (void *)id);
			pthread_join(t[id], NULL);
		}
	char *p = calloc(10, 10);
	p = realloc(p, 500);
	p = realloc(p, 20000);
	memset(p, 7, 20000);
	p = realloc(p, 60000);      /* large, in place or moved */
	p = realloc(p, 6 << 20);    /* huge */
	p = realloc(p, 12 << 20);   /* mremap */
	if (p[19999] != 7)          /* kept bytes stay defined */
		return 1;
	free(p);
	char *z = calloc(1, 100000); /* large and zeroed */
	if (z[99999] != 0)
		return 1;
	free(z);
	for (int i = 0; i < 300; i++) /* the last thread's; the others freed theirs */
		free(blocks[3][i]);
	return 0;
}
C

cat >"$work/buggy.c" <<'C'
#include <stdlib.h>
#include <string.h>
int main(void) {
	char *p = malloc(40);
	strcpy(p, "hello");
	free(p);
	volatile char c = p[1];                         /* READ */
	char *q = malloc(64);
	q[64] = 'x';                                    /* WRITE */
	free(q);
	char *leak = malloc(100);                       /* LEAK */
	leak[0] = c;
	leak = NULL;
	char *big = malloc(100000);
	memset(big, 1, 100000);
	free(big);
	c = big[50000];                                 /* LARGE_READ */
	char *bigleak = malloc(50000);                  /* LARGE_LEAK */
	bigleak[0] = c;
	bigleak = NULL;
	char *hugeleak = malloc(6 << 20);               /* HUGE_LEAK */
	hugeleak[0] = c;
	hugeleak = NULL;
	return 0;
}
C
line_of() { grep -n "/\* $1 \*/" "$work/${2:-buggy}.c" | cut -d: -f1; }

cat >"$work/sizes.c" <<'C'
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
static volatile int sink;
static void probe(char *p, size_t n) {
	if (p[n - 1] == 42) /* never written: undefined */
		sink = 1;
	memset(p, 1, n);
	p[n] = 'x'; /* one past the request */
	free(p);
}
static char *aligned(size_t n) {
	void *p;
	return posix_memalign(&p, 64, n) ? NULL : p;
}
int main(void) {
	probe(malloc(1), 1);                              /* SIZE_1 */
	probe(malloc(40), 40);                            /* SIZE_40 */
	probe(malloc(100), 100);                          /* SIZE_100 */
	probe(malloc(1000), 1000);                        /* SIZE_1000 */
	probe(malloc(5000), 5000);                        /* SIZE_5000 */
	probe(malloc(20481), 20481);                      /* SIZE_20481 */
	probe(malloc((5 << 20) + 1), (5 << 20) + 1);      /* SIZE_5242881 */
	probe(aligned(40), 40);                           /* ALIGNED_40 */
	char *q = malloc(40);
	size_t usable = malloc_usable_size(q);
	memset(q, 2, usable);                             /* clean: usable is the request */
	q = realloc(q, 44);
	memset(q, 3, 44);
	q[44] = 'y';                                      /* REALLOC_44 */
	free(q);
	char *z = calloc(1, (5 << 20) + 1);               /* zeroed: defined */
	char *y = calloc(1, 20481);
	if (z[5 << 20] != 0 || y[20480] != 0)
		return 1;
	free(z);
	free(y);
	return usable == 40 ? 0 : 3;
}
C

"$CC" -g -O0 -fno-builtin -pthread "$work/clean.c" -o "$work/clean" || exit 1
"$CC" -g -O0 -fno-builtin "$work/buggy.c" -o "$work/buggy" || exit 1
cat >"$work/objcache.c" <<'C'
#include <stdint.h>
#include <string.h>
#include "uslub.h"
struct conn { uint64_t tag; char buf[40]; };
static void ctor(void *p) { struct conn *c = p; c->tag = 7; memset(c->buf, 0, sizeof(c->buf)); }
static volatile int sink;
int main(void) {
	struct uslub_cache *cc = uslub_cache_create("vg-conn", sizeof(struct conn), 0, 0, ctor);
	struct uslub_cache *rc = uslub_cache_create("vg-rcu", 48, 0, USLUB_CACHE_TYPESAFE_BY_RCU, 0);
	struct conn *a = uslub_cache_alloc(cc);
	if (a->tag == 7 && a->buf[39] == 0)                 /* CTOR_DEFINED */
		sink = 1;
	a->buf[39] = 'x';
	((char *)a)[48] = 'y';                              /* OC_WRITE */
	uslub_cache_free(cc, a);
	sink = a->buf[0];                                   /* OC_READ */
	struct conn *b = uslub_cache_alloc(cc);
	if (b->buf[39] == 'x' || b->tag == 7)               /* KEPT_DEFINED */
		sink = 2;
	struct conn *leak = uslub_cache_alloc(cc);          /* OC_LEAK */
	leak->tag = 8;
	leak = NULL;
	char *r = uslub_cache_alloc(rc);
	memset(r, 1, 48);
	uslub_cache_free(rc, r);
	sink = r[10];                                       /* RCU_READ */
	uslub_cache_free(cc, b);
	return 0;
}
C
"$CC" -g -O0 -fno-builtin "$work/sizes.c" -o "$work/sizes" || exit 1
inc=$(cd "$(dirname "$USLUB")/../include" && pwd)
"$CC" -g -O0 -fno-builtin -I"$inc" "$work/objcache.c" "$LIB" -Wl,-rpath,"$(dirname "$LIB")" \
	-o "$work/objcache" || exit 1

# The error records of a memcheck log (blank-line separated, prefixes gone) that name
# `main (FILE:LINE)` in their stack.
records_at() { # log file line
	sed 's/^==[0-9]*== \{0,1\}//' "$1" | awk -v at="main ($2:$3)" 'BEGIN { RS = "" } index($0, at)'
}
expect_record() { # name log file line pattern...
	local name=$1 log=$2 file=$3 line=$4 recs
	shift 4
	recs=$(records_at "$log" "$file" "$line")
	for pattern in "$@"; do
		if ! grep -q -e "$pattern" <<<"$recs"; then
			fail "$name: no error at $file:$line with '$pattern'; errors there:"
			sed 's/^/    /' <<<"${recs:-(none)}"
			return
		fi
	done
	echo "  ok: $name"
}
errors_of() { sed -n 's/.*ERROR SUMMARY: \([0-9,]*\) errors.*/\1/p' "$1" | tr -d ,; }

echo "clean program, 4 threads freeing each other's blocks"
USLUB_LIB=$LIB "$USLUB" valgrind -- "$work/clean" >"$work/clean.out" 2>&1
expect "kept in place" "$work/clean.out" "uslub kept in place"
expect "no errors" "$work/clean.out" "ERROR SUMMARY: 0 errors from 0 contexts"
expect "no leak" "$work/clean.out" "All heap blocks were freed"
expect "memcheck saw uslub's blocks" "$work/clean.out" "total heap usage: [1-9][0-9,]* allocs"

echo "use after free, heap overflow, leak"
USLUB_LIB=$LIB "$USLUB" valgrind -- "$work/buggy" >"$work/buggy.out" 2>&1
expect "use after free" "$work/buggy.out" "Invalid read of size 1"
expect "... at its line" "$work/buggy.out" "main (buggy.c:$(line_of READ))"
expect "heap overflow" "$work/buggy.out" "Invalid write of size 1"
expect "... at its line" "$work/buggy.out" "main (buggy.c:$(line_of WRITE))"
expect "... past a 64-byte block" "$work/buggy.out" "0 bytes after a block of size 64"
expect "leak" "$work/buggy.out" "definitely lost"
expect "... allocated at its line" "$work/buggy.out" "main (buggy.c:$(line_of LEAK))"
expect "large block: use after free" "$work/buggy.out" "main (buggy.c:$(line_of LARGE_READ))"
expect "... inside the freed block" "$work/buggy.out" "bytes inside a block of size 100,000 free'd"
expect "large block: leak at its line" "$work/buggy.out" "main (buggy.c:$(line_of LARGE_LEAK))"
expect "... of the 50,000 bytes asked for" "$work/buggy.out" "50,000 bytes in 1 blocks are definitely lost"
expect "huge block: leak at its line" "$work/buggy.out" "main (buggy.c:$(line_of HUGE_LEAK))"
expect "six errors" "$work/buggy.out" "ERROR SUMMARY: 6 errors"

echo "each request exactly: overflow by one byte and uninitialised read, every size"
USLUB_LIB=$LIB "$USLUB" valgrind -- "$work/sizes" >"$work/sizes.out" 2>&1
status=$?
valgrind --leak-check=full "$work/sizes" >"$work/sizes-own.out" 2>&1
for tag in SIZE_1:1 SIZE_40:40 SIZE_100:100 SIZE_1000:1,000 SIZE_5000:5,000 \
	SIZE_20481:20,481 SIZE_5242881:5,242,881 ALIGNED_40:40; do
	line=$(line_of "${tag%%:*}" sizes)
	expect_record "${tag%%:*}: overflow" "$work/sizes.out" sizes.c "$line" \
		"Invalid write of size 1" \
		"0 bytes after a \(recently re-allocated \)\?block of size ${tag#*:} alloc'd"
	expect_record "${tag%%:*}: uninitialised read" "$work/sizes.out" sizes.c "$line" \
		"Conditional jump or move depends on uninitialised value"
done
expect_record "realloc in place: overflow past 44" "$work/sizes.out" sizes.c \
	"$(line_of REALLOC_44 sizes)" "Invalid write of size 1" \
	"0 bytes after a \(recently re-allocated \)\?block of size 44 alloc'd"
if ((status == 0)); then
	echo "  ok: malloc_usable_size is the request, calloc'd blocks are zero"
else
	fail "sizes exited $status (3: malloc_usable_size(malloc(40)) was not 40)"
fi
mine=$(errors_of "$work/sizes.out") own=$(errors_of "$work/sizes-own.out")
if [[ -n $mine && $mine == "$own" ]]; then
	echo "  ok: $mine errors, as under valgrind's own allocator"
else
	fail "sizes: ${mine:-no} errors under uslub, ${own:-no} under valgrind's own allocator"
	grep -A3 -e "Invalid\|uninitialised" "$work/sizes.out" | sed 's/^/    /'
fi

echo "object caches: constructed state defined, overflow, use after free, leak, RCU reads"
USLUB_LIB=$LIB "$USLUB" valgrind -- "$work/objcache" >"$work/objcache.out" 2>&1
for tag in CTOR_DEFINED KEPT_DEFINED RCU_READ; do
	recs=$(records_at "$work/objcache.out" objcache.c "$(line_of $tag objcache)")
	if [[ -z $recs ]]; then
		echo "  ok: $tag: no error"
	else
		fail "$tag: an error at its line:"
		sed 's/^/    /' <<<"$recs"
	fi
done
expect_record "cache object: overflow" "$work/objcache.out" objcache.c \
	"$(line_of OC_WRITE objcache)" "Invalid write of size 1" "0 bytes after a block of size 48"
expect_record "cache object: use after free" "$work/objcache.out" objcache.c \
	"$(line_of OC_READ objcache)" "Invalid read of size 1" "inside a block of size 48 free'd"
expect_record "cache object: leak" "$work/objcache.out" objcache.c "$(line_of OC_LEAK objcache)" \
	"48 bytes in 1 blocks are definitely lost"
expect "three errors" "$work/objcache.out" "ERROR SUMMARY: 3 errors"
# Debian's interpreter rather than a shim on PATH, which would run a shell under memcheck.
echo "real programs: no error that valgrind's own allocator does not report"
root=$(cd "$(dirname "$USLUB")/.." && pwd)
cat >"$work/short.py" <<'PY'
import collections, json, re
d = {str(i): [i] * (i % 7) for i in range(2000)}
s = json.dumps(d)
assert json.loads(s) == d
c = collections.Counter(re.findall(r"\d+", s))
print(len(s), c.most_common(1)[0][1])
PY
compare() { # name command...
	local name=$1 mine own
	shift
	USLUB_LIB=$LIB "$USLUB" valgrind -- "$@" >"$work/$name.out" 2>&1
	valgrind --leak-check=full "$@" >"$work/$name-own.out" 2>&1
	mine=$(errors_of "$work/$name.out") own=$(errors_of "$work/$name-own.out")
	if [[ -z $mine || -z $own ]]; then
		fail "$name: no error summary (uslub: ${mine:-none}, own: ${own:-none})"
		tail -5 "$work/$name.out" | sed 's/^/    /'
	elif ((mine > own)); then
		fail "$name: $mine errors under uslub, $own under valgrind's own allocator:"
		sed 's/^/    /' "$work/$name.out"
	else
		echo "  ok: $name: $mine errors, $own under valgrind's own allocator"
	fi
}
if [[ -x /usr/bin/python3 ]]; then
	PYTHONMALLOC=malloc compare python /usr/bin/python3 "$work/short.py"
else
	echo "  skipped: python (no /usr/bin/python3)"
fi
if command -v git >/dev/null && git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
	(cd "$root" && compare git git status --short)
else
	echo "  skipped: git status (no git, or $root is not a work tree)"
fi

if ((failures)); then
	echo "test_valgrind: $failures failures"
	exit 1
fi
echo "test_valgrind: all checks passed"
