/* replace: issue 24's shape. Each of THREADS threads keeps 1024 blocks of sizes uniform in
 * [16, BOUND] (or [REPLACE_MIN, BOUND], from the environment, to take a size range apart)
 * and replaces a random one per step (writing the new block's first byte);
 * throughput in millions of
 * replacements per second over all threads, measured on the steps alone.
 *
 * MiB buffers: REPLACE_LIVE=N keeps N blocks a thread instead (1024 at most), and
 * REPLACE_FILL=1 writes every byte of each new block, as a program fills a buffer it asked
 * for, so an allocator that hands back pages it must fault in again pays for it here.
 *
 * REPLACE_PIN=1 pins thread i to CPU i modulo the CPUs online, so two threads run on two
 * CPUs as two processes of one thread under `taskset -c 0` and `taskset -c 1` do
 * (tools/bench/threads_vs_procs.sh compares the two), and the scheduler's moves are out
 * of the figure.
 *
 * The process's peak resident memory goes to stderr ("replace: peak RSS N MiB").
 *
 * Usage: replace THREADS BOUND [STEPS_PER_THREAD]   (BOUND in bytes; K and M suffixes) */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

enum { LIVE = 1024 };

static size_t bound, lo = 16;
static unsigned live = LIVE;
static int fill, pin;
static uint64_t steps;
static pthread_barrier_t start;

/* Called through a volatile pointer: the compiler may not pair malloc with free. */
static void *(*volatile do_malloc)(size_t) = malloc;
static void (*volatile do_free)(void *) = free;

static uint64_t next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void *touch(size_t size)
{
	char *p = do_malloc(size);
	if (!p) {
		fprintf(stderr, "replace: malloc(%zu) failed\n", size);
		exit(1);
	}
	if (fill)
		memset(p, 1, size);
	else
		p[0] = 1;
	return p;
}

static void *work(void *arg)
{
	if (pin) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET((int)((uintptr_t)arg % (uintptr_t)(cpus > 0 ? cpus : 1)), &set);
		int err = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
		if (err) {
			fprintf(stderr, "replace: pinning thread %u failed (error %d)\n",
				(unsigned)(uintptr_t)arg, err);
			exit(1);
		}
	}
	uint64_t rng = 0x9e3779b97f4a7c15ULL * ((uintptr_t)arg + 1);
	void *block[LIVE];
	for (unsigned i = 0; i < live; i++)
		block[i] = touch(lo + next(&rng) % (bound - lo + 1));
	pthread_barrier_wait(&start);
	for (uint64_t s = 0; s < steps; s++) {
		unsigned i = (unsigned)(next(&rng) % live);
		do_free(block[i]);
		block[i] = touch(lo + next(&rng) % (bound - lo + 1));
	}
	pthread_barrier_wait(&start);
	for (unsigned i = 0; i < live; i++)
		do_free(block[i]);
	return NULL;
}

static size_t parse_size(const char *s)
{
	char *end;
	size_t v = strtoull(s, &end, 10);
	if (*end == 'K' || *end == 'k')
		v <<= 10;
	else if (*end == 'M' || *end == 'm')
		v <<= 20;
	return v;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: replace THREADS BOUND [STEPS_PER_THREAD]\n");
		return 2;
	}
	unsigned threads = (unsigned)atoi(argv[1]);
	bound = parse_size(argv[2]);
	steps = argc > 3 ? strtoull(argv[3], NULL, 10) : 2000000;
	const char *min = getenv("REPLACE_MIN");
	if (min)
		lo = parse_size(min);
	const char *n = getenv("REPLACE_LIVE");
	if (n)
		live = (unsigned)atoi(n);
	const char *f = getenv("REPLACE_FILL");
	fill = f && *f == '1';
	const char *pn = getenv("REPLACE_PIN");
	pin = pn && *pn == '1';
	if (threads < 1 || threads > 64 || bound < 16 || lo < 1 || lo > bound || live < 1 ||
	    live > LIVE) {
		fprintf(stderr,
			"replace: 1-64 threads, bound at least 16, REPLACE_MIN 1..bound, "
			"REPLACE_LIVE 1..%d\n",
			LIVE);
		return 2;
	}
	pthread_t t[64];
	pthread_barrier_init(&start, NULL, threads + 1);
	for (unsigned i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, work, (void *)(uintptr_t)i);
	pthread_barrier_wait(&start);
	double t0 = now();
	pthread_barrier_wait(&start);
	double t1 = now();
	for (unsigned i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	printf("%.4g\n", (double)steps * threads / (t1 - t0) / 1e6);
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	fprintf(stderr, "replace: peak RSS %.1f MiB\n", ru.ru_maxrss / 1024.0);
	return 0;
}
