/* waves: does the decay hand back memory that a program reallocates in waves?
 *
 * Allocates 300 MiB of 256-byte blocks, touches and frees them, waits GAP_MS, six times,
 * and prints the minor page faults of each wave: a wave that finds the last one's memory
 * still resident faults a few hundred times (its pointer table's pages aside), one whose
 * memory went back to the OS faults once per page (~77,000).
 *
 *   waves GAP_MS
 *
 * Output: "wave N faults F" per wave, then "ok". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define WAVE  ((size_t)300 << 20)
#define BLOCK 256
#define WAVES 6

/* Through volatile pointers, so the compiler cannot drop a malloc/free pair. */
static void *(*volatile do_malloc)(size_t) = malloc;
static void (*volatile do_free)(void *) = free;

int main(int argc, char **argv)
{
	unsigned gap_ms = argc > 1 ? (unsigned)atoi(argv[1]) : 1000;
	size_t n = WAVE / BLOCK;
	void **p = do_malloc(n * sizeof(void *));
	if (!p)
		return 1;
	for (int w = 0; w < WAVES; w++) {
		struct rusage a, b;
		getrusage(RUSAGE_SELF, &a);
		for (size_t i = 0; i < n; i++) {
			p[i] = do_malloc(BLOCK);
			if (!p[i])
				return 1;
			memset(p[i], w + 1, BLOCK);
		}
		for (size_t i = 0; i < n; i++)
			do_free(p[i]);
		getrusage(RUSAGE_SELF, &b);
		printf("wave %d faults %ld\n", w, b.ru_minflt - a.ru_minflt);
		fflush(stdout);
		struct timespec ts = {gap_ms / 1000, (long)(gap_ms % 1000) * 1000000L};
		nanosleep(&ts, NULL);
	}
	do_free(p);
	printf("ok\n");
	return 0;
}
