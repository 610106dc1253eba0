/* mixed_peak: issue 13's mixed workload. Two threads each keep 256 live blocks and, for
 * SECONDS, replace a random one by malloc, free or realloc, sizes log-uniform over
 * 1 B - 8 MiB, every block written when made and checked before it goes. Then everything
 * is freed, and one more malloc is made (where an allocator that hands memory back at
 * its next call would do so). Prints the peak resident memory (ru_maxrss), the resident
 * memory after everything was freed and after that next allocation, in MiB.
 *
 * Not in the suite (it measures memory, not time). Usage: mixed_peak [SECONDS]   (10) */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

enum { THREADS = 2, LIVE = 256 };

/* Through volatile pointers, so the compiler keeps every call. */
static void *(*volatile do_malloc)(size_t) = malloc;
static void *(*volatile do_realloc)(void *, size_t) = realloc;
static void (*volatile do_free)(void *) = free;

static double seconds;

static uint64_t next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Log-uniform over 1 B - 8 MiB: as many 1-2 B blocks as 4-8 MiB ones. */
static size_t rand_size(uint64_t *s)
{
	unsigned bits = (unsigned)(next(s) % 23); /* 2^0 .. 2^22 */
	size_t lo = (size_t)1 << bits;
	return lo + (size_t)(next(s) % lo) + 1;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long rss_mib(void)
{
	long pages = 0, resident = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (f) {
		if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
			resident = 0;
		fclose(f);
	}
	return resident * sysconf(_SC_PAGESIZE) >> 20;
}

struct block {
	unsigned char *p;
	size_t size;
	unsigned char tag;
};

static void fail(const char *what)
{
	fprintf(stderr, "mixed_peak: %s\n", what);
	exit(1);
}

static void check(const struct block *b)
{
	if (b->p && (b->p[0] != b->tag || b->p[b->size - 1] != b->tag))
		fail("a block changed under the program");
}

static void *work(void *arg)
{
	uint64_t s = (uintptr_t)arg * 0x9e3779b97f4a7c15ULL + 1;
	struct block *live = calloc(LIVE, sizeof(*live));
	double end = now() + seconds;
	for (unsigned long op = 0; (op & 255) || now() < end; op++) {
		struct block *b = &live[next(&s) % LIVE];
		check(b);
		unsigned what = (unsigned)(next(&s) % 3);
		if (what == 0 && b->p) {
			do_free(b->p);
			b->p = NULL;
			continue;
		}
		size_t size = rand_size(&s);
		unsigned char tag = (unsigned char)(next(&s) | 1);
		if (what == 1 && b->p) {
			unsigned char *q = do_realloc(b->p, size);
			if (!q)
				fail("realloc returned NULL");
			/* Growth keeps the old end; either way the first byte stays. */
			if (q[0] != b->tag || (size >= b->size && q[b->size - 1] != b->tag))
				fail("realloc lost the contents");
			b->p = q;
		} else {
			if (b->p)
				do_free(b->p);
			b->p = do_malloc(size);
			if (!b->p)
				fail("malloc returned NULL");
		}
		b->size = size;
		b->tag = tag;
		/* The ends, and a byte a page: what a program that fills its buffer touches,
		 * without making the run a memset benchmark. */
		for (size_t i = 0; i < size; i += 4096)
			b->p[i] = tag;
		b->p[size - 1] = tag;
	}
	for (unsigned i = 0; i < LIVE; i++) {
		check(&live[i]);
		do_free(live[i].p);
	}
	free(live);
	return NULL;
}

int main(int argc, char **argv)
{
	seconds = argc > 1 ? atof(argv[1]) : 10;
	pthread_t t[THREADS];
	for (uintptr_t i = 0; i < THREADS; i++)
		if (pthread_create(&t[i], NULL, work, (void *)(i + 1)))
			fail("pthread_create");
	for (unsigned i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	long freed = rss_mib();
	do_free(do_malloc(16));
	long next_alloc = rss_mib();
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	printf("mixed_peak: peak %ld MiB, after freeing everything %ld MiB, after the next "
	       "allocation %ld MiB\n",
	       ru.ru_maxrss >> 10, freed, next_alloc);
	return 0;
}
