/* shared_lines: do two threads that allocate and free only their own blocks end up with
 * blocks in the same cache lines? Each of two threads keeps 1024 blocks of glibc's thread
 * benchmark's sizes (inverse-square, 4 B - 32 KiB; workloads/glibc_thread.c) and replaces
 * a random one per step, writing its first byte; no block passes between them. After the
 * first allocations and again after the steps, the 64-byte lines that hold bytes of live
 * blocks of both threads are counted. Every touch of such a line by one thread takes it
 * from the other's core while both run (tools/bench/results/barn-reserves.md).
 *
 * Usage: shared_lines [STEPS_PER_THREAD]   (default 3,000,000)
 * Prints "lines shared: start N, after S steps M". */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { LIVE = 1024, MIN_SIZE = 4, MAX_SIZE = 32768, LINE = 64 };

/* Called through volatile pointers: the compiler may not pair malloc with free. */
static void *(*volatile do_malloc)(size_t) = malloc;
static void (*volatile do_free)(void *) = free;

struct worker {
	unsigned id;
	void *block[LIVE];
	size_t size[LIVE];
};

static struct worker w[2];
static uint64_t steps;
static pthread_barrier_t phase;

static uint64_t next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static size_t inverse_square(uint64_t *rng)
{
	double u = (double)(next(rng) >> 11) / (double)(1ULL << 53);
	double a = 1.0 / MIN_SIZE, b = 1.0 / MAX_SIZE;
	size_t s = (size_t)(1.0 / (a - u * (a - b)));
	return s < MIN_SIZE ? MIN_SIZE : s > MAX_SIZE ? MAX_SIZE : s;
}

static void *alloc(size_t size)
{
	char *p = do_malloc(size);
	if (!p) {
		fprintf(stderr, "shared_lines: malloc(%zu) failed\n", size);
		exit(1);
	}
	p[0] = 1;
	return p;
}

static void *work(void *arg)
{
	struct worker *me = arg;
	uint64_t rng = 0x9e3779b97f4a7c15ULL * (me->id + 3);
	for (unsigned i = 0; i < LIVE; i++) {
		me->size[i] = inverse_square(&rng);
		me->block[i] = alloc(me->size[i]);
	}
	pthread_barrier_wait(&phase); /* main counts */
	pthread_barrier_wait(&phase);
	for (uint64_t s = 0; s < steps; s++) {
		unsigned i = (unsigned)(next(&rng) % LIVE);
		do_free(me->block[i]);
		me->size[i] = inverse_square(&rng);
		me->block[i] = alloc(me->size[i]);
	}
	pthread_barrier_wait(&phase); /* main counts */
	pthread_barrier_wait(&phase);
	for (unsigned i = 0; i < LIVE; i++)
		do_free(me->block[i]);
	return NULL;
}

static int by_line(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Lines holding bytes of both workers' live blocks: every (line << 1 | worker) sorted, a
 * line counted when both of its entries are there. */
static unsigned long shared(void)
{
	size_t n = 0, cap = 0;
	uint64_t *e = NULL;
	for (unsigned t = 0; t < 2; t++)
		for (unsigned i = 0; i < LIVE; i++)
			cap += w[t].size[i] / LINE + 2;
	/* The count's own table: from mmap-backed calloc while both workers wait. */
	e = calloc(cap, sizeof(*e));
	if (!e) {
		fprintf(stderr, "shared_lines: no memory for the count\n");
		exit(1);
	}
	for (unsigned t = 0; t < 2; t++)
		for (unsigned i = 0; i < LIVE; i++) {
			uintptr_t p = (uintptr_t)w[t].block[i];
			for (uintptr_t l = p / LINE; l <= (p + w[t].size[i] - 1) / LINE; l++)
				e[n++] = (uint64_t)l << 1 | t;
		}
	qsort(e, n, sizeof(*e), by_line);
	unsigned long both = 0;
	for (size_t i = 1; i < n; i++)
		if (e[i] >> 1 == e[i - 1] >> 1 && e[i] != e[i - 1])
			both++;
	free(e);
	return both;
}

int main(int argc, char **argv)
{
	steps = argc > 1 ? strtoull(argv[1], NULL, 10) : 3000000;
	pthread_t t[2];
	pthread_barrier_init(&phase, NULL, 3);
	for (unsigned i = 0; i < 2; i++) {
		w[i].id = i;
		if (pthread_create(&t[i], NULL, work, &w[i])) {
			fprintf(stderr, "shared_lines: pthread_create failed\n");
			return 1;
		}
	}
	pthread_barrier_wait(&phase);
	unsigned long start = shared();
	pthread_barrier_wait(&phase);
	pthread_barrier_wait(&phase);
	unsigned long end = shared();
	pthread_barrier_wait(&phase);
	for (unsigned i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	printf("lines shared: start %lu, after %llu steps %lu\n", start, (unsigned long long)steps,
	       end);
	return 0;
}
