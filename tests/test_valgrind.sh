#!/usr/bin/env bash
# test_valgrind.sh: programs run under memcheck through `tools/uslub valgrind`, with uslub
# as their malloc, get their bugs reported against their own source lines.
#   clean    threads that allocate, realloc and free each other's blocks, every size:
#            "ERROR SUMMARY: 0 errors", no leak
#   buggy    a use after free, a one-byte heap overflow and a leak, each on a known line:
#            "Invalid read" at buggy.c:READ, "Invalid write" at buggy.c:WRITE, and
#            "definitely lost" with the allocation at buggy.c:LEAK; then the same for
#            blocks above 8 KiB: a use after free of a large block and leaks of a large
#            and a huge one (memcheck sees them by whole pages)
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
line_of() { grep -n "/\* $1 \*/" "$work/buggy.c" | cut -d: -f1; }

"$CC" -g -O0 -fno-builtin -pthread "$work/clean.c" -o "$work/clean" || exit 1
"$CC" -g -O0 -fno-builtin "$work/buggy.c" -o "$work/buggy" || exit 1

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
expect "... inside the freed block" "$work/buggy.out" "bytes inside a block of size 102,400 free'd"
expect "large block: leak at its line" "$work/buggy.out" "main (buggy.c:$(line_of LARGE_LEAK))"
expect "... 50,000 bytes as 13 pages" "$work/buggy.out" "53,248 bytes in 1 blocks are definitely lost"
expect "huge block: leak at its line" "$work/buggy.out" "main (buggy.c:$(line_of HUGE_LEAK))"
expect "six errors" "$work/buggy.out" "ERROR SUMMARY: 6 errors"

if ((failures)); then
	echo "test_valgrind: $failures failures"
	exit 1
fi
echo "test_valgrind: all checks passed"
