/* thread_rounds: threads made in rounds, each round's states on the pages the round before
 * left (issue 24, a thread's cost; tools/bench/results/thread-state.md).
 *
 * Each round starts THREADS threads (argv[1], default 8); each allocates 16 blocks of
 * 8 B - 2 KiB, writes them, waits until all of the round's threads hold theirs, frees
 * them and exits; the main thread joins them. The resident set is read before the round,
 * while all its threads live and after the joins.
 *
 * Output: a line a round, "round R before B during D after A KiB (P per thread)", P the
 * growth while the threads live over THREADS. Usage: thread_rounds [THREADS] [ROUNDS] */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BLOCKS = 16, MAX_THREADS = 256 };

/* Through volatile pointers: the compiler may not drop or merge the calls. */
static void *(*volatile do_malloc)(size_t) = malloc;
static void (*volatile do_free)(void *) = free;

static pthread_barrier_t held, freed;

static long rss_kib(void)
{
	long pages = 0, resident = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (!f)
		return 0;
	if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
		resident = 0;
	fclose(f);
	return resident * 4;
}

static void *work(void *arg)
{
	uintptr_t id = (uintptr_t)arg;
	void *p[BLOCKS];
	for (unsigned i = 0; i < BLOCKS; i++) {
		size_t size = 8 + (id * 16 * i) % 2040;
		p[i] = do_malloc(size);
		if (!p[i])
			abort();
		memset(p[i], (int)id, size);
	}
	pthread_barrier_wait(&held);
	pthread_barrier_wait(&freed);
	for (unsigned i = 0; i < BLOCKS; i++)
		do_free(p[i]);
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 8, rounds = argc > 2 ? atoi(argv[2]) : 3;
	if (threads < 1 || threads > MAX_THREADS || rounds < 1) {
		fprintf(stderr, "usage: %s [THREADS 1-%d] [ROUNDS]\n", argv[0], MAX_THREADS);
		return 2;
	}
	pthread_t t[MAX_THREADS];
	for (int r = 0; r < rounds; r++) {
		pthread_barrier_init(&held, NULL, (unsigned)threads + 1);
		pthread_barrier_init(&freed, NULL, (unsigned)threads + 1);
		long before = rss_kib();
		for (int i = 0; i < threads; i++)
			if (pthread_create(&t[i], NULL, work, (void *)(uintptr_t)(i + 1)) != 0)
				return 1;
		pthread_barrier_wait(&held);
		long during = rss_kib();
		pthread_barrier_wait(&freed);
		for (int i = 0; i < threads; i++)
			pthread_join(t[i], NULL);
		printf("round %d before %ld during %ld after %ld KiB (%ld per thread)\n", r, before,
		       during, rss_kib(), (during - before) / threads);
		pthread_barrier_destroy(&held);
		pthread_barrier_destroy(&freed);
	}
	return 0;
}
