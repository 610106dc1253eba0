/* test_churn.c: many short-lived threads must not leak memory.
 *
 * THREADS threads (argv[1], default 20,000) are started in waves of 4 to 8 and joined.
 * Each allocates a few hundred objects over the size classes (8 B .. 8 KiB, a few of
 * 16 .. 64 KiB), fills them, frees most in a shuffled order and hands HANDOFF of them to
 * the main thread, which checks and frees them one wave later, after their thread has
 * exited: the free of an object whose owning thread is gone.
 *
 * RSS (tu_rss_bytes) is taken after 1,000 threads, once every per-thread structure
 * had the chance to be recycled, and at the end; the end must not exceed it by more than
 * 16 MiB. uslub's in_use must also come back to where it was. Runs under LD_PRELOAD. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <pthread.h>
#include <stdatomic.h>

#include "test_util.h"

enum {
	OBJECTS = 300, /* per thread */
	HANDOFF = 4,   /* per thread, freed by main after the thread exited */
	MAX_WAVE = 8,
	BASELINE_AT = 1000,
	MAX_GROWTH_MIB = 16,
};

struct item {
	unsigned char *p;
	size_t size;
	uint64_t key;
};

struct job {
	pthread_t thread;
	unsigned long index;
	int failed;
	struct item handed[HANDOFF];
};

static atomic_ulong bad_objects;

static size_t churn_size(uint64_t *rng)
{
	uint64_t r = tu_rand(rng);
	unsigned pick = (unsigned)(r & 63);
	r >>= 6;
	if (pick == 0)
		return 16 * TU_KIB + (size_t)(r % (48 * TU_KIB)); /* 1 in 64: 16 .. 64 KiB */
	if (pick < 8)
		return 1 + (size_t)(r % (8 * TU_KIB));
	if (pick < 32)
		return 8 + (size_t)(r % 512);
	return 8 + (size_t)(r % 128);
}

static int item_ok(const struct item *it)
{
	return tu_verify(it->p, it->size, it->key) == (size_t)-1;
}

static void *thread_main(void *arg)
{
	struct job *job = arg;
	struct item items[OBJECTS];
	uint64_t rng = tu_mix(0xc4u + job->index) | 1;

	for (int i = 0; i < OBJECTS; i++) {
		items[i].size = churn_size(&rng);
		items[i].p = malloc(items[i].size);
		if (items[i].p == NULL) {
			job->failed = 1;
			continue;
		}
		items[i].key = tu_mix((uint64_t)(uintptr_t)items[i].p ^ job->index);
		tu_fill(items[i].p, 0, items[i].size, items[i].key);
	}
	for (int i = OBJECTS - 1; i > 0; i--) {
		int j = (int)(tu_rand(&rng) % (uint64_t)(i + 1));
		struct item t = items[i];
		items[i] = items[j];
		items[j] = t;
	}
	for (int i = 0; i < OBJECTS; i++) {
		if (items[i].p == NULL)
			continue;
		if (!item_ok(&items[i]))
			atomic_fetch_add(&bad_objects, 1);
		if (i < HANDOFF) {
			job->handed[i] = items[i];
			continue;
		}
		free(items[i].p);
	}
	return NULL;
}

/* Checks and frees what the threads of one finished wave handed over. */
static void free_handed(struct job *jobs, int n)
{
	for (int j = 0; j < n; j++)
		for (int i = 0; i < HANDOFF; i++) {
			struct item *it = &jobs[j].handed[i];
			if (it->p == NULL)
				continue;
			if (!item_ok(it))
				atomic_fetch_add(&bad_objects, 1);
			free(it->p);
			it->p = NULL;
		}
}

int main(int argc, char **argv)
{
	tu_clean_env(argv);
	unsigned long total = argc > 1 ? strtoul(argv[1], NULL, 10) : 20000;
	if (total < 2 * BASELINE_AT)
		total = 2 * BASELINE_AT;
	printf("test_churn: %lu threads in waves of 4..%d, %d objects each, %d handed to the "
	       "main thread and freed after their thread exited; RSS at the end <= RSS after "
	       "%d threads + %d MiB\n",
	       total, MAX_WAVE, OBJECTS, HANDOFF, BASELINE_AT, MAX_GROWTH_MIB);
	fflush(stdout);

	tu_get_totals_fn totals = tu_totals_fn();
	CHECKF(totals != NULL, "uslub_get_totals not found: libuslub.so is not preloaded");
	uint64_t in_use_start = tu_in_use();

	/* two sets of jobs: the previous wave's handed objects are freed while the next
	 * wave runs, so the frees meet both exited and running threads */
	static struct job waves[2][MAX_WAVE];
	int prev_n = 0, cur = 0;
	unsigned long started = 0, create_failures = 0, failed_threads = 0;
	size_t rss_base = 0;
	struct uslub_totals base_totals, end_totals;
	memset(&base_totals, 0, sizeof(base_totals));
	memset(&end_totals, 0, sizeof(end_totals));
	uint64_t rng = 0xabcdef;
	double t0 = tu_now(), t_base = 0;

	while (started < total) {
		int n = 4 + (int)(tu_rand(&rng) % (MAX_WAVE - 3));
		if ((unsigned long)n > total - started)
			n = (int)(total - started);
		struct job *jobs = waves[cur];
		int launched = 0;
		for (int j = 0; j < n; j++) {
			memset(&jobs[j], 0, sizeof(jobs[j]));
			jobs[j].index = started + (unsigned long)j;
			int rc = pthread_create(&jobs[j].thread, NULL, thread_main, &jobs[j]);
			if (rc != 0) {
				create_failures++;
				break;
			}
			launched++;
		}
		free_handed(waves[cur ^ 1], prev_n);
		for (int j = 0; j < launched; j++) {
			pthread_join(jobs[j].thread, NULL);
			if (jobs[j].failed)
				failed_threads++;
		}
		if (launched == 0)
			break;
		/* the crossing of BASELINE_AT is the baseline, taken once */
		if (started < BASELINE_AT && started + (unsigned long)launched >= BASELINE_AT) {
			rss_base = tu_rss_bytes();
			if (totals != NULL)
				totals(&base_totals);
			t_base = tu_now() - t0;
		}
		started += (unsigned long)launched;
		prev_n = launched;
		cur ^= 1;
	}
	free_handed(waves[cur ^ 1], prev_n);
	double elapsed = tu_now() - t0;
	size_t rss_end = tu_rss_bytes();
	if (totals != NULL)
		totals(&end_totals);

	printf("  %lu threads in %.2f s (%.1f us each); first %d in %.2f s\n", started, elapsed,
	       elapsed * 1e6 / (double)(started ? started : 1), BASELINE_AT, t_base);
	printf("  RSS after %d threads: %.1f MiB, at the end: %.1f MiB (growth %+.1f MiB, "
	       "limit %d MiB)\n",
	       BASELINE_AT, (double)rss_base / TU_MIB, (double)rss_end / TU_MIB,
	       ((double)rss_end - (double)rss_base) / TU_MIB, MAX_GROWTH_MIB);
	if (totals != NULL)
		printf("  uslub mapped: %.1f MiB -> %.1f MiB; in_use: %" PRIu64
		       " B at start, %" PRIu64 " B after %d threads, %" PRIu64 " B at the end\n",
		       (double)base_totals.mapped / TU_MIB, (double)end_totals.mapped / TU_MIB,
		       in_use_start, base_totals.in_use, BASELINE_AT, end_totals.in_use);

	CHECKF(create_failures == 0, "pthread_create failed %lu times", create_failures);
	CHECK_EQ(started, total);
	CHECKF(failed_threads == 0, "%lu threads saw malloc return NULL", failed_threads);
	unsigned long bad = atomic_load(&bad_objects);
	CHECKF(bad == 0, "%lu objects lost their pattern", bad);
	CHECKF(rss_base > 0 && rss_end > 0, "RSS unreadable: %zu, %zu", rss_base, rss_end);
	CHECKF(rss_end <= rss_base + (size_t)MAX_GROWTH_MIB * TU_MIB,
	       "RSS grew from %zu to %zu bytes between thread %d and thread %lu: threads leak",
	       rss_base, rss_end, BASELINE_AT, started);
	if (totals != NULL) {
		CHECKF(end_totals.in_use <= in_use_start + TU_MIB,
		       "in_use %" PRIu64 " at start, %" PRIu64 " after every thread's objects "
		       "were freed",
		       in_use_start, end_totals.in_use);
		CHECKF(end_totals.mapped <= base_totals.mapped + (uint64_t)MAX_GROWTH_MIB * TU_MIB,
		       "mapped grew from %" PRIu64 " to %" PRIu64 " bytes after thread %d",
		       base_totals.mapped, end_totals.mapped, BASELINE_AT);
	}
	return tu_summary("test_churn");
}
