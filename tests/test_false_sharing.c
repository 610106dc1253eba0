/* Threads that each allocate and free one small object in a loop - a counter, a per-thread
 * record - write it at every turn: two threads whose objects share a cache line pass the
 * line between their cores at every write (Hoard's cache-thrash and cache-scratch;
 * tools/bench/workloads/false_sharing.c took 9-17 s instead of 0.8 in one run of 6 to 24).
 * A thread's first objects of a cache come from slabs every thread takes from (sheaf.c,
 * early objects), and an object another thread made and handed over lies beside that
 * thread's others; so the free that opens a thread's sheaf sends its object back to its
 * slab, and the sheaf's first refill takes a slab of the thread's own.
 *
 * Active: four threads, one after another, each allocate an 8-byte object, free it, and
 * allocate and free again; the object each settles on lies in a cache line of its own.
 * Passive: the main thread allocates four 8-byte objects back to back and hands one to
 * each thread, which frees it and does the same. Run with USLUB_HARDEN=off, where
 * objects go out in address order, so the first objects of the four threads lie side by
 * side and the test fails whenever a thread keeps one. */
#include "thread/thread.h"
#include "test_util.h"

#include <pthread.h>
#include <semaphore.h>

#define THREADS 4
#define TURNS	100
#define LINE	64

struct worker {
	unsigned id;
	void *handed;  /* passive: the main thread's object, freed first */
	void *settled; /* the object the loop ends on */
	int own_slab;  /* it lies in a slab no other thread has handed objects from */
	sem_t go, done;
};

static struct worker w[THREADS];
static pthread_barrier_t leave;

static void *work(void *arg)
{
	struct worker *me = arg;
	sem_wait(&me->go);
	if (me->handed)
		FREE(me->handed);
	else
		FREE(MALLOC(8));
	void *p = NULL;
	for (unsigned i = 0; i < TURNS; i++) {
		p = MALLOC(8);
		*(volatile uint64_t *)p = i;
		FREE(p);
	}
	me->settled = p;
	me->own_slab = page_desc_of(p)->head->owner == uslub_tls_thread;
	sem_post(&me->done);
	/* Alive until every thread has settled: a state gone gives its objects back. */
	pthread_barrier_wait(&leave);
	return NULL;
}

static void phase(const char *name, bool passive)
{
	pthread_t t[THREADS];
	pthread_barrier_init(&leave, NULL, THREADS);
	for (unsigned i = 0; i < THREADS; i++) {
		w[i] = (struct worker){.id = i};
		sem_init(&w[i].go, 0, 0);
		sem_init(&w[i].done, 0, 0);
		if (passive)
			w[i].handed = MALLOC(8);
	}
	if (passive)
		for (unsigned i = 1; i < THREADS; i++)
			CHECKF((uintptr_t)w[i].handed / LINE == (uintptr_t)w[0].handed / LINE ||
				   (uintptr_t)w[i].handed / LINE ==
				       (uintptr_t)w[0].handed / LINE + 1,
			       "%s: the main thread's objects lie side by side (%p, %p)", name,
			       w[0].handed, w[i].handed);
	for (unsigned i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, work, &w[i]);
	/* One after another: the threads' first objects come from one slab in turn. */
	for (unsigned i = 0; i < THREADS; i++) {
		sem_post(&w[i].go);
		sem_wait(&w[i].done);
	}
	for (unsigned i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	for (unsigned i = 0; i < THREADS; i++) {
		CHECKF(w[i].own_slab, "%s: thread %u settles on %p, in a slab of its own", name, i,
		       w[i].settled);
		for (unsigned j = 0; j < i; j++)
			CHECKF((uintptr_t)w[i].settled / LINE != (uintptr_t)w[j].settled / LINE,
			       "%s: threads %u and %u settle on %p and %p, in one cache line", name,
			       j, i, w[j].settled, w[i].settled);
	}
	for (unsigned i = 0; i < THREADS; i++) {
		sem_destroy(&w[i].go);
		sem_destroy(&w[i].done);
	}
	pthread_barrier_destroy(&leave);
}

int main(void)
{
	FREE(MALLOC(1)); /* start-up */
	const struct uslub_cache *c = &uslub_caches[uslub_size_to_class(8)];
	if (c->debug || !c->sheaf_capacity) {
		/* ASan makes every cache a debug cache, with red zones and no sheaves. */
		printf("test_false_sharing: no sheaves in this build: skipped\n");
		return 0;
	}
	phase("active", false);
	phase("passive", true);
	return tu_summary("test_false_sharing");
}
