/* class_turns: one thread, two sizes in two caches (1000 and 800 bytes), 8 live blocks of
 * each; every step frees one of each and allocates one of each, in one of three orders:
 *
 *   same   - free a 1000, allocate a 1000, free an 800, allocate an 800: each malloc
 *            takes the block the free before it gave back
 *   turns  - free a 1000, allocate an 800, free an 800, allocate a 1000: each malloc is
 *            of the other cache than the free before it
 *   swap   - free two 1000s, allocate two 1000s: one cache, the blocks trade places
 *
 * Every block stays in L1 (16 live), so the rates differ in how the fast paths follow
 * one another, not in cache misses. Millions of mallocs a second (each with its free).
 *
 * Usage: class_turns same|turns|swap [STEPS] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Called through volatile pointers: the compiler may not pair malloc with free. */
static void *(*volatile do_malloc)(size_t) = malloc;
static void (*volatile do_free)(void *) = free;

static uint64_t next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static char *get(size_t size)
{
	char *p = do_malloc(size);
	if (!p) {
		fprintf(stderr, "class_turns: malloc(%zu) failed\n", size);
		exit(1);
	}
	p[0] = 1;
	return p;
}

int main(int argc, char **argv)
{
	enum { LIVE = 8, BIG = 1000, SMALL = 800 };
	if (argc < 2 ||
	    (strcmp(argv[1], "same") && strcmp(argv[1], "turns") && strcmp(argv[1], "swap"))) {
		fprintf(stderr, "usage: class_turns same|turns|swap [STEPS]\n");
		return 2;
	}
	char mode = argv[1][1]; /* 'a', 'u', 'w' */
	long steps = argc > 2 ? atol(argv[2]) : 20000000;
	void *a[LIVE], *b[LIVE];
	for (int i = 0; i < LIVE; i++) {
		a[i] = get(BIG);
		b[i] = get(mode == 'w' ? BIG : SMALL);
	}
	uint64_t rng = 88172645463325252ULL;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long s = 0; s < steps; s++) {
		uint64_t r = next(&rng);
		unsigned i = (unsigned)(r % LIVE), j = (unsigned)((r >> 20) % LIVE);
		if (mode == 'a') {
			do_free(a[i]);
			a[i] = get(BIG);
			do_free(b[j]);
			b[j] = get(SMALL);
		} else if (mode == 'u') {
			do_free(a[i]);
			char *p = get(SMALL);
			do_free(b[j]);
			b[j] = p;
			a[i] = get(BIG);
		} else {
			do_free(a[i]);
			do_free(b[j]);
			a[i] = get(BIG);
			b[j] = get(BIG);
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double sec = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
	printf("%.1f\n", 2.0 * (double)steps / sec / 1e6);
	for (int i = 0; i < LIVE; i++) {
		do_free(a[i]);
		do_free(b[i]);
	}
	return 0;
}
