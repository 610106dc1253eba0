/* false_sharing: does the allocator put different threads' small objects on one cache
 * line?
 *
 * After Hoard's cache-thrash and cache-scratch. Two phases, THREADS threads each:
 *  active   each thread allocates its own 8-byte object, writes it WRITES times, frees
 *           it, and again: an allocator that carves neighbouring objects for different
 *           threads out of one line makes every write a cache-line transfer;
 *  passive  the main thread allocates one 8-byte object per thread, back to back, and
 *           hands them out; each thread frees its object and then does as above. An
 *           allocator that gives a freed object back to the thread that freed it puts
 *           the threads on the lines the main thread's objects shared.
 * Both phases only write each thread's own object; the final counts are checked. On a
 * machine with one CPU there is nothing to share and this measures the fast path.
 *
 * Usage: false_sharing [SCALE]   (rounds scale; 4 threads) */
#include "workload.h"

enum {
	THREADS = 4,
	ROUNDS = 300000,
	WRITES = 2000,
	OBJ_SIZE = 8,
};

struct worker {
	unsigned id;
	pthread_t tid;
	uint64_t *handed; /* passive phase: the main thread's object, freed first */
	uint64_t total;
};

static struct worker workers[THREADS];
static uint64_t rounds;

static void *work(void *arg)
{
	struct worker *w = arg;
	if (w->handed != NULL) {
		if (*w->handed != w->id)
			wl_fail("handed object of thread %u holds %" PRIu64, w->id, *w->handed);
		free(w->handed);
	}
	for (uint64_t r = 0; r < rounds; r++) {
		volatile uint64_t *p = wl_malloc(OBJ_SIZE);
		*p = 0;
		for (unsigned i = 0; i < WRITES; i++)
			*p = *p + 1;
		if (*p != WRITES)
			wl_fail("thread %u: object %p holds %" PRIu64 ", expected %d", w->id,
				(void *)p, *p, WRITES);
		w->total += *p;
		free((void *)p);
	}
	return NULL;
}

static void phase(int passive)
{
	for (unsigned t = 0; t < THREADS; t++) {
		workers[t] = (struct worker){.id = t};
		if (passive) {
			workers[t].handed = wl_malloc(OBJ_SIZE);
			*workers[t].handed = t;
		}
	}
	for (unsigned t = 0; t < THREADS; t++)
		workers[t].tid = wl_spawn(work, &workers[t]);
	for (unsigned t = 0; t < THREADS; t++) {
		wl_join(workers[t].tid);
		if (workers[t].total != rounds * WRITES)
			wl_fail("thread %u counted %" PRIu64, t, workers[t].total);
	}
}

int main(int argc, char **argv)
{
	rounds = wl_scaled(ROUNDS, wl_scale(argc, argv));
	phase(0);
	phase(1);
	return wl_done("2 phases x %d threads x %" PRIu64 " objects x %d writes", THREADS, rounds,
		       WRITES);
}
