/* thread_local: many threads, each churning its own objects; nothing crosses threads.
 *
 * THREADS (more than this machine has CPUs, as in a thread-per-request server) each keep
 * a working set of SLOTS objects of 16 B .. 2 KiB and replace a random one at a time. It
 * measures the allocator's per-thread fast paths and how its thread caches scale with the
 * thread count, and its memory: each thread's caches hold memory of their own.
 *
 * Usage: thread_local [SCALE]   (operations per thread scale; 16 threads) */
#include "workload.h"

enum {
	THREADS = 16,
	SLOTS = 1000,
	OPS = 2000000,
	MIN_SIZE = 16,
	MAX_SIZE = 2048,
};

struct worker {
	unsigned id;
	pthread_t tid;
	void *p[SLOTS];
	size_t size[SLOTS];
	uint64_t key[SLOTS];
};

static struct worker workers[THREADS];
static uint64_t ops;

static void *work(void *arg)
{
	struct worker *w = arg;
	uint64_t rng = wl_seed(w->id), serial = 0;
	for (unsigned i = 0; i < SLOTS; i++) {
		w->size[i] = wl_log_range(&rng, MIN_SIZE, MAX_SIZE);
		w->key[i] = serial++;
		w->p[i] = wl_malloc(w->size[i]);
		wl_fill(w->p[i], w->size[i], w->key[i]);
	}
	for (uint64_t n = 0; n < ops; n++) {
		unsigned i = (unsigned)(wl_rand(&rng) % SLOTS);
		wl_check(w->p[i], w->size[i], w->key[i]);
		free(w->p[i]);
		w->size[i] = wl_log_range(&rng, MIN_SIZE, MAX_SIZE);
		w->key[i] = serial++;
		w->p[i] = wl_malloc(w->size[i]);
		wl_check_aligned(w->p[i], w->size[i]);
		wl_fill(w->p[i], w->size[i], w->key[i]);
	}
	for (unsigned i = 0; i < SLOTS; i++) {
		wl_check(w->p[i], w->size[i], w->key[i]);
		free(w->p[i]);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	ops = wl_scaled(OPS, wl_scale(argc, argv));
	for (unsigned t = 0; t < THREADS; t++) {
		workers[t].id = t;
		workers[t].tid = wl_spawn(work, &workers[t]);
	}
	for (unsigned t = 0; t < THREADS; t++)
		wl_join(workers[t].tid);
	return wl_done("%d threads x %" PRIu64 " replacements", THREADS, ops);
}
