/* mib_mix: MiB buffers of which a program fills only some. 16 live buffers of 1-12 MiB
 * (uniform) replaced at random; FILLPCT% of the new ones are written whole, the rest at
 * their first byte only (a buffer sized for the most a program may need). Prints
 * replacements a second and the peak resident memory (ru_maxrss) in MiB.
 *
 * Usage: mib_mix [STEPS [FILLPCT [SEED]]]   (5000, 50, 0) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

/* Through volatile pointers, so the compiler keeps every call. */
static void *(*volatile do_malloc)(size_t) = malloc;
static void (*volatile do_free)(void *) = free;

static uint64_t state = 88172645463325252ULL;

static uint64_t next(void)
{
	state ^= state << 13;
	state ^= state >> 7;
	state ^= state << 17;
	return state;
}

int main(int argc, char **argv)
{
	int steps = argc > 1 ? atoi(argv[1]) : 5000, pct = argc > 2 ? atoi(argv[2]) : 50;
	if (argc > 3)
		state += 0x9e3779b97f4a7c15ULL * (uint64_t)atoi(argv[3]);
	do_free(do_malloc(16)); /* the thread's state, as any program has it */
	char *buf[16] = {0};
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < steps; i++) {
		unsigned k = (unsigned)(next() % 16);
		do_free(buf[k]);
		size_t n = (1UL << 20) + next() % (11UL << 20);
		buf[k] = do_malloc(n);
		if (!buf[k]) {
			fprintf(stderr, "mib_mix: malloc(%zu) failed\n", n);
			return 1;
		}
		if ((int)(next() % 100) < pct)
			memset(buf[k], i, n);
		else
			buf[k][0] = 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
	printf("%.0f %ld\n", steps / s, ru.ru_maxrss >> 10);
	for (int k = 0; k < 16; k++)
		do_free(buf[k]);
	return 0;
}
