/* random_replace: a large live set of small blocks, replaced at random positions - the
 * long-lived objects of a cache or an index, freed in an order unrelated to their
 * allocation. Each thread owns LIVE / THREADS blocks of 16 B .. 1 KiB (log-uniform) and
 * replaces a random one per step with a block of a new size; every block is checked
 * before it is freed.
 *
 * THREADS is 1 or 2, set at build time (random_replace1, random_replace2); the live set is
 * 256 Ki blocks in all either way.
 *
 * Usage: random_replace1|random_replace2 [SCALE]   (steps scale) */
#include "workload.h"

#ifndef THREADS
#define THREADS 1
#endif

enum { LIVE = 256 * 1024, STEPS = 4000000, MIN_SIZE = 16, MAX_SIZE = 1024 };

struct worker {
	unsigned id;
	void **block;
	uint32_t *size;
	uint64_t *key;
};

static uint64_t steps;

static void *work(void *arg)
{
	struct worker *w = arg;
	const unsigned n = LIVE / THREADS;
	uint64_t rng = wl_seed(200 + w->id), serial = (uint64_t)w->id << 40;
	for (unsigned i = 0; i < n; i++) {
		w->size[i] = (uint32_t)wl_log_range(&rng, MIN_SIZE, MAX_SIZE);
		w->key[i] = serial++;
		w->block[i] = wl_malloc(w->size[i]);
		wl_fill(w->block[i], w->size[i], w->key[i]);
	}
	for (uint64_t s = 0; s < steps / THREADS; s++) {
		unsigned i = (unsigned)(wl_rand(&rng) % n);
		wl_check(w->block[i], w->size[i], w->key[i]);
		free(w->block[i]);
		w->size[i] = (uint32_t)wl_log_range(&rng, MIN_SIZE, MAX_SIZE);
		w->key[i] = serial++;
		w->block[i] = wl_malloc(w->size[i]);
		wl_fill(w->block[i], w->size[i], w->key[i]);
	}
	for (unsigned i = 0; i < n; i++) {
		wl_check(w->block[i], w->size[i], w->key[i]);
		free(w->block[i]);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	steps = wl_scaled(STEPS, wl_scale(argc, argv));
	struct worker w[THREADS];
	pthread_t t[THREADS];
	for (unsigned i = 0; i < THREADS; i++) {
		w[i].id = i;
		/* The tables are the program's, not the measured allocator's concern: from
		 * mmap-backed calloc like any other block, allocated before the clock matters. */
		w[i].block = wl_malloc(sizeof(void *) * (LIVE / THREADS));
		w[i].size = wl_malloc(sizeof(uint32_t) * (LIVE / THREADS));
		w[i].key = wl_malloc(sizeof(uint64_t) * (LIVE / THREADS));
	}
	for (unsigned i = 0; i < THREADS; i++)
		t[i] = wl_spawn(work, &w[i]);
	for (unsigned i = 0; i < THREADS; i++) {
		wl_join(t[i]);
		free(w[i].block);
		free(w[i].size);
		free(w[i].key);
	}
	return wl_done("%u threads, %u live blocks, %" PRIu64 " replacements", THREADS,
		       (unsigned)LIVE, steps / THREADS * THREADS);
}
