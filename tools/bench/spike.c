/* spike: does resident memory follow the live set after a spike of small blocks?
 *
 * Allocates TOTAL bytes (default 1 GiB) in small blocks of random sizes 16-512, touches
 * each, frees them all, then keeps light traffic going - one malloc/free pair a
 * millisecond, a few blocks of a small live set replaced now and then - for SECONDS
 * (default 15), printing the resident set size (from /proc/self/statm) every 250 ms. A
 * program like this (a burst at start-up or per request, then quiet) is what issue 13
 * measures: the target is the live set plus 96 MiB within 10 s.
 *
 * The pointer table is mapped with mmap and unmapped after the frees, so it counts
 * against no allocator. The live set (LIVE blocks of the same sizes, allocated before
 * the spike) stays allocated throughout, so "the live set" is measured, not assumed.
 *
 *   spike [TOTAL_BYTES [SECONDS [IDLE]]]
 *
 * IDLE=1: no light traffic after the frees (a fully idle program; only a background
 * thread can give memory back then).
 *
 * Output, one line each: "base_kib N" (before anything), "live_kib N" (live set
 * allocated), "peak_kib N" (spike allocated), "freed_kib N" (just after the frees), then
 * "t_ms T rss_kib N" every 250 ms from the end of the frees, then "ok". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "rss.h"

#define TOTAL ((size_t)1 << 30)
#define LIVE  4096 /* blocks kept allocated all along: about 1 MiB */

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static unsigned next_size(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return 16 + (unsigned)(rng % (512 - 16 + 1));
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000 + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t)
{
	struct timespec ts = {(time_t)(t / 1000000000), (long)(t % 1000000000)};
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0)
		;
}

/* Through a volatile pointer, so the compiler cannot pair a malloc with its free and
 * drop both. */
static void *(*volatile do_malloc)(size_t) = malloc;
static void (*volatile do_free)(void *) = free;

int main(int argc, char **argv)
{
	size_t total = argc > 1 ? strtoull(argv[1], NULL, 0) : TOTAL;
	unsigned seconds = argc > 2 ? (unsigned)atoi(argv[2]) : 15;
	int idle = argc > 3 && atoi(argv[3]);

	printf("base_kib %ld\n", rss_kib());
	static void *live[LIVE];
	for (unsigned i = 0; i < LIVE; i++) {
		unsigned sz = next_size();
		live[i] = do_malloc(sz);
		if (!live[i])
			return 1;
		memset(live[i], 1, sz);
	}
	printf("live_kib %ld\n", rss_kib());

	size_t cap = total / 16 + 1, n = 0, bytes = 0;
	void **objs = mmap(NULL, cap * sizeof(void *), PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (objs == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	while (bytes < total && n < cap) {
		unsigned sz = next_size();
		objs[n] = do_malloc(sz);
		if (!objs[n]) {
			fprintf(stderr, "malloc failed after %zu blocks\n", n);
			return 1;
		}
		memset(objs[n], (int)(n & 0xff), sz);
		bytes += sz;
		n++;
	}
	printf("peak_kib %ld\n", rss_kib());
	for (size_t i = 0; i < n; i++) {
		if (((unsigned char *)objs[i])[0] != (i & 0xff)) {
			fprintf(stderr, "block %zu was overwritten\n", i);
			return 1;
		}
		do_free(objs[i]);
	}
	munmap(objs, cap * sizeof(void *));
	printf("freed_kib %ld\n", rss_kib());
	fflush(stdout);

	/* One tick a millisecond, on an absolute schedule; every 250th prints. */
	uint64_t start = now_ns(), t = start;
	for (unsigned tick = 0; tick < seconds * 1000; tick++) {
		if (tick % 250 == 0) {
			printf("t_ms %u rss_kib %ld\n", tick, rss_kib());
			fflush(stdout);
		}
		if (!idle) {
			unsigned sz = next_size();
			char *p = do_malloc(sz);
			if (!p)
				return 1;
			p[0] = 1;
			do_free(p);
			/* Now and then a block of the live set is replaced, as a program's
			 * state changes. */
			if (tick % 64 == 63) {
				unsigned i = (unsigned)(rng % LIVE);
				do_free(live[i]);
				live[i] = do_malloc(sz);
				if (!live[i])
					return 1;
				memset(live[i], 1, sz);
			}
		}
		sleep_until(start + (uint64_t)(tick + 1) * 1000000);
	}
	t = now_ns();
	printf("t_ms %llu rss_kib %ld\n", (unsigned long long)((t - start) / 1000000), rss_kib());
	for (unsigned i = 0; i < LIVE; i++)
		do_free(live[i]);
	printf("ok\n");
	return 0;
}
