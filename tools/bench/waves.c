/* waves: does the decay hand back memory that a program reallocates in waves?
 *
 * Allocates 300 MiB of 256-byte blocks, touches and frees them, waits GAP_MS, six times,
 * and prints the minor page faults of each wave: a wave that finds the last one's memory
 * still resident faults a few hundred times (its pointer table's pages aside), one whose
 * memory went back to the OS faults once per page (~77,000).
 *
 * BLOCK and WAVE_MIB change the shape: with 65536 and 64 the pointer table is 8 KiB, so
 * the live set collapses to almost nothing between waves - a batch at a time, where the
 * 300 MiB shape keeps its 9.4 MiB table live - and WAVES=N (environment) runs N waves.
 *
 *   waves GAP_MS [BLOCK [WAVE_MIB]]
 *
 * Output: "wave N faults F ms T" per wave (T: the wave's wall time), then "ok". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

/* Through volatile pointers, so the compiler cannot drop a malloc/free pair. */
static void *(*volatile do_malloc)(size_t) = malloc;
static void (*volatile do_free)(void *) = free;

int main(int argc, char **argv)
{
	unsigned gap_ms = argc > 1 ? (unsigned)atoi(argv[1]) : 1000;
	size_t block = argc > 2 ? (size_t)atol(argv[2]) : 256;
	size_t wave = (argc > 3 ? (size_t)atol(argv[3]) : 300) << 20;
	int waves = getenv("WAVES") ? atoi(getenv("WAVES")) : 6;
	if (block == 0 || wave < block || waves < 1) {
		fprintf(stderr, "usage: waves GAP_MS [BLOCK [WAVE_MIB]]\n");
		return 2;
	}
	size_t n = wave / block;
	void **p = do_malloc(n * sizeof(void *));
	if (!p)
		return 1;
	for (int w = 0; w < waves; w++) {
		struct rusage a, b;
		struct timespec t0, t1;
		getrusage(RUSAGE_SELF, &a);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (size_t i = 0; i < n; i++) {
			p[i] = do_malloc(block);
			if (!p[i])
				return 1;
			memset(p[i], w + 1, block);
		}
		for (size_t i = 0; i < n; i++)
			do_free(p[i]);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		getrusage(RUSAGE_SELF, &b);
		printf("wave %d faults %ld ms %.2f\n", w, b.ru_minflt - a.ru_minflt,
		       (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
		fflush(stdout);
		struct timespec ts = {gap_ms / 1000, (long)(gap_ms % 1000) * 1000000L};
		nanosleep(&ts, NULL);
	}
	do_free(p);
	printf("ok\n");
	return 0;
}
