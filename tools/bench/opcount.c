/* opcount: the fast paths, for counting instructions under callgrind.
 *
 * Usage: opcount pair|batch SIZE N
 *   pair   N times: p = malloc(SIZE); free(p)
 *   batch  N times: 1000 mallocs of SIZE, then the 1000 frees in the same order
 *
 * Start-up (the loader, the allocator's first-touch set-up, the first slab) costs far more
 * than one operation, so the driver runs each case with N and 2N and divides the
 * difference of the instruction totals by the extra operations; what is left is the
 * steady-state cost of one malloc plus one free. One warm-up round comes first so the
 * first slab is set up by both runs alike. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BATCH = 1000 };

static void *batch[BATCH];

/* The compiler must see each pointer escape, or it may pair and drop malloc/free. */
static inline void escape(void *p)
{
	__asm__ volatile("" : : "r"(p) : "memory");
}

static void pairs(size_t size, unsigned long n)
{
	for (unsigned long i = 0; i < n; i++) {
		void *p = malloc(size);
		if (p == NULL)
			exit(1);
		escape(p);
		free(p);
	}
}

static void batches(size_t size, unsigned long n)
{
	for (unsigned long r = 0; r < n; r++) {
		for (unsigned i = 0; i < BATCH; i++) {
			batch[i] = malloc(size);
			if (batch[i] == NULL)
				exit(1);
			escape(batch[i]);
		}
		for (unsigned i = 0; i < BATCH; i++)
			free(batch[i]);
	}
}

int main(int argc, char **argv)
{
	if (argc != 4 || (strcmp(argv[1], "pair") != 0 && strcmp(argv[1], "batch") != 0)) {
		fprintf(stderr, "usage: opcount pair|batch SIZE N\n");
		return 2;
	}
	size_t size = strtoul(argv[2], NULL, 0);
	unsigned long n = strtoul(argv[3], NULL, 0);
	void (*run)(size_t, unsigned long) = argv[1][0] == 'p' ? pairs : batches;
	run(size, 1);
	run(size, n);
	return 0;
}
