/* idle_pool: a thread pool most of whose threads wait while two work (issue 24, the
 * medium sheaves' bound shared among the threads that use them: medium-users.md).
 *
 * IDLE threads (argv[1]) each allocate 8 small blocks, write them and wait on a condition
 * variable; meanwhile two workers each keep 1024 blocks of 16 B - 128 KiB and replace a
 * random one per step (STEPS a worker, argv[2], default 5,000,000), writing the new
 * block's first byte, as tools/bench/replace does. When the workers are done the idle
 * threads wake, check and free their blocks and exit. A state per thread is what uslub's
 * shares were divided by: 100 idle threads left the workers' medium sheaves closed.
 *
 * Output: one line, "idle N workers 2 mops N peak_mib N" (replacements a second over the
 * workers' run, in millions; the process's peak resident set). Usage: idle_pool IDLE [STEPS] */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

enum { LIVE = 1024, WORKERS = 2, SMALL = 8, MAX_IDLE = 1000 };

/* Through volatile pointers: the compiler may not drop or merge the calls. */
static void *(*volatile do_malloc)(size_t) = malloc;
static void (*volatile do_free)(void *) = free;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int done;
static long steps = 5000000;
static _Atomic unsigned bad;

static void *idle(void *arg)
{
	unsigned char *p[SMALL];
	unsigned tag = (unsigned)(uintptr_t)arg;
	for (unsigned i = 0; i < SMALL; i++) {
		p[i] = do_malloc(16 + i * 40);
		if (!p[i])
			exit(1);
		memset(p[i], (int)(tag + i), 16 + i * 40);
	}
	pthread_mutex_lock(&lock);
	while (!done)
		pthread_cond_wait(&cv, &lock);
	pthread_mutex_unlock(&lock);
	for (unsigned i = 0; i < SMALL; i++) {
		if (p[i][0] != (unsigned char)(tag + i) ||
		    p[i][15 + i * 40] != (unsigned char)(tag + i))
			bad++;
		do_free(p[i]);
	}
	return NULL;
}

static void *work(void *arg)
{
	uint64_t s = (uintptr_t)arg * 0x9e3779b97f4a7c15ULL + 1;
	unsigned char **b = calloc(LIVE, sizeof(*b));
	if (!b)
		exit(1);
	for (unsigned i = 0; i < LIVE; i++)
		b[i] = do_malloc(16);
	for (long n = 0; n < steps; n++) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		unsigned i = (unsigned)(s % LIVE);
		do_free(b[i]);
		b[i] = do_malloc(16 + (size_t)((s >> 20) % (128 * 1024 - 16)));
		if (!b[i])
			exit(1);
		b[i][0] = 1;
	}
	for (unsigned i = 0; i < LIVE; i++)
		do_free(b[i]);
	free(b);
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 100;
	if (argc > 2)
		steps = atol(argv[2]);
	if (n < 0 || n > MAX_IDLE || steps <= 0) {
		fprintf(stderr, "usage: idle_pool IDLE(0..%d) [STEPS]\n", MAX_IDLE);
		return 2;
	}
	static pthread_t it[MAX_IDLE];
	pthread_t wt[WORKERS];
	for (int i = 0; i < n; i++)
		if (pthread_create(&it[i], NULL, idle, (void *)(uintptr_t)i) != 0)
			return 1;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (uintptr_t i = 0; i < WORKERS; i++)
		if (pthread_create(&wt[i], NULL, work, (void *)(i + 1)) != 0)
			return 1;
	for (int i = 0; i < WORKERS; i++)
		pthread_join(wt[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	pthread_mutex_lock(&lock);
	done = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&lock);
	for (int i = 0; i < n; i++)
		pthread_join(it[i], NULL);
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("idle %d workers %d mops %.1f peak_mib %ld\n", n, WORKERS,
	       (double)WORKERS * (double)steps / secs / 1e6, ru.ru_maxrss / 1024);
	return bad ? 1 : 0;
}
