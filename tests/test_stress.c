/* test_stress.c: threads allocate, fill, pass on, check and free, with cross-thread
 * frees.
 *
 * Each of NTHREADS threads runs a fixed number of operations (argv[1], default
 * 2,000,000) on its own table of objects: an empty slot gets a new object, a full one is
 * checked and then freed, realloc'ed, or sent to another thread's inbox, a ring buffer
 * behind a mutex. The receiver checks the object in full and frees it: a free from a
 * thread that does not own the slab. Sizes are 1 .. 16 KiB, mostly small, with an
 * occasional 64 KiB .. 2 MiB block.
 *
 * Every object carries a byte pattern keyed by (pointer at allocation, size, seed); a
 * realloc checks the kept part and extends the pattern. Any mismatch, misalignment or
 * NULL fails the test (exit 1). At the end, with every object freed and every thread
 * gone, uslub's in_use must be back where it started.
 *
 * Then newcomers: NEWCOMER_ROUNDS rounds of NEWCOMER_BATCH short-lived threads, each
 * making its first allocations of three caches - which come from slabs the node shares,
 * a few objects at a time - freeing half itself and handing half to a freeing thread that
 * runs meanwhile. A take that empties a shared slab's list and a free into that slab then
 * meet: before take_shared took the slab off the partial list first, the free could
 * freeze it in between and link it through the room the list uses (a segfault in about
 * one run in ten of the bench's thread_churn, a race report under ThreadSanitizer).
 *
 * Built linked (-DUSLUB_PREFIXED, uslub_malloc) and plain (run under LD_PRELOAD). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "test_util.h"

enum {
	NTHREADS = 4,
	SLOTS = 512,	  /* objects a thread holds at once */
	RING_CAP = 16384, /* per-thread inbox */
	DRAIN_EVERY = 64, /* operations between two looks at the inbox */
	MAX_REPORTS = 20,
};

static const uint64_t SEED = 0x5eed0f5117b5ULL;

struct obj {
	unsigned char *p;
	size_t size;
	uint64_t key;
};

struct ring {
	pthread_mutex_t lock;
	unsigned head, count;
	struct obj items[RING_CAP];
};

struct worker {
	int id;
	pthread_t thread;
	uint64_t rng;
	struct ring inbox;
	struct obj batch[RING_CAP]; /* what drain_inbox took, checked outside the lock */
	/* counters, read by main after join */
	uint64_t allocs, frees, reallocs, sent, received, ring_full, large, bytes;
};

static struct worker workers[NTHREADS];
static unsigned long ops_per_thread = 2000000;
static pthread_barrier_t done_barrier;
static atomic_ulong errors;

static void report(const char *what, const struct obj *o, size_t off)
{
	unsigned long n = atomic_fetch_add(&errors, 1) + 1;
	if (n > MAX_REPORTS)
		return;
	if (off == (size_t)-1) {
		fprintf(stderr, "FAIL %s:%d: %s: object %p size %zu key %#" PRIx64 "\n", __FILE__,
			__LINE__, what, (void *)o->p, o->size, o->key);
	} else {
		fprintf(stderr,
			"FAIL %s:%d: %s: object %p size %zu key %#" PRIx64 ": byte %zu "
			"is %#x, expected %#x\n",
			__FILE__, __LINE__, what, (void *)o->p, o->size, o->key, off, o->p[off],
			tu_pattern_byte(o->key, off));
	}
}

static size_t random_size(struct worker *w)
{
	uint64_t r = tu_rand(&w->rng);
	unsigned pick = (unsigned)(r & 0xfff);
	r >>= 12;
	if (pick == 0) { /* 1 in 4096 */
		w->large++;
		return 64 * TU_KIB + (size_t)(r % (2 * TU_MIB - 64 * TU_KIB + 1));
	}
	pick &= 0x3ff;
	if (pick < 640) /* 62.5%: 1 .. 128 */
		return 1 + (size_t)(r % 128);
	if (pick < 960) /* 31%: 1 .. 1024 */
		return 1 + (size_t)(r % 1024);
	return 1 + (size_t)(r % (16 * TU_KIB)); /* 6%: 1 .. 16 KiB */
}

static void new_object(struct worker *w, struct obj *o, size_t size)
{
	o->size = size;
	o->p = MALLOC(size);
	if (o->p == NULL) {
		report("malloc returned NULL", o, (size_t)-1);
		o->size = 0;
		return;
	}
	if (((uintptr_t)o->p & 15) != 0)
		report("malloc result not 16-byte aligned", o, (size_t)-1);
	o->key = tu_mix((uint64_t)(uintptr_t)o->p ^ tu_mix(size) ^ SEED);
	tu_fill(o->p, 0, size, o->key);
	w->allocs++;
	w->bytes += size;
}

static void check_object(const char *where, const struct obj *o)
{
	size_t bad = tu_verify(o->p, o->size, o->key);
	if (bad != (size_t)-1)
		report(where, o, bad);
}

static void check_and_free(struct worker *w, struct obj *o, const char *where)
{
	check_object(where, o);
	FREE(o->p);
	o->p = NULL;
	w->frees++;
}

static void realloc_object(struct worker *w, struct obj *o)
{
	size_t n = random_size(w);
	check_object("pattern before realloc", o);
	unsigned char *q = REALLOC(o->p, n);
	if (q == NULL) {
		report("realloc returned NULL", o, (size_t)-1);
		return;
	}
	size_t keep = o->size < n ? o->size : n;
	o->p = q;
	if (((uintptr_t)q & 15) != 0)
		report("realloc result not 16-byte aligned", o, (size_t)-1);
	size_t bad = tu_verify(q, keep, o->key);
	if (bad != (size_t)-1) {
		o->size = keep;
		report("pattern lost by realloc", o, bad);
	}
	tu_fill(q, keep, n, o->key);
	o->size = n;
	w->reallocs++;
}

/* Hands o to worker `to`; a full inbox means the sender frees it itself. */
static void send_object(struct worker *w, int to, struct obj *o)
{
	struct ring *r = &workers[to].inbox;
	int queued = 0;
	pthread_mutex_lock(&r->lock);
	if (r->count < RING_CAP) {
		r->items[(r->head + r->count) % RING_CAP] = *o;
		r->count++;
		queued = 1;
	}
	pthread_mutex_unlock(&r->lock);
	if (queued) {
		o->p = NULL;
		w->sent++;
	} else {
		w->ring_full++;
		check_and_free(w, o, "pattern (inbox full, freed by owner)");
	}
}

/* Takes everything in the inbox, then checks and frees it outside the lock. */
static void drain_inbox(struct worker *w)
{
	struct obj *batch = w->batch;
	struct ring *r = &w->inbox;
	unsigned n = 0;
	pthread_mutex_lock(&r->lock);
	while (r->count > 0) {
		batch[n++] = r->items[r->head];
		r->head = (r->head + 1) % RING_CAP;
		r->count--;
	}
	pthread_mutex_unlock(&r->lock);
	for (unsigned i = 0; i < n; i++) {
		check_and_free(w, &batch[i], "pattern of an object from another thread");
		w->received++;
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	static _Thread_local struct obj slots[SLOTS];

	for (unsigned long i = 0; i < ops_per_thread; i++) {
		if (i % DRAIN_EVERY == 0)
			drain_inbox(w);
		uint64_t r = tu_rand(&w->rng);
		struct obj *o = &slots[r % SLOTS];
		unsigned action = (unsigned)((r >> 32) & 31);
		if (o->p == NULL) {
			new_object(w, o, random_size(w));
		} else if (action < 8) { /* 25%: another thread frees it */
			int to = (w->id + 1 + (int)((r >> 40) % (NTHREADS - 1))) % NTHREADS;
			send_object(w, to, o);
		} else if (action < 10) { /* 6%: grow or shrink */
			realloc_object(w, o);
		} else {
			check_and_free(w, o, "pattern of an own object");
		}
	}
	for (int i = 0; i < SLOTS; i++)
		if (slots[i].p != NULL)
			check_and_free(w, &slots[i], "pattern of an own object at the end");
	/* nobody sends after this point: the last drain sees everything */
	pthread_barrier_wait(&done_barrier);
	drain_inbox(w);
	return NULL;
}

/* ---- newcomers ------------------------------------------------------------------- */

enum {
	NEWCOMER_ROUNDS = 400,
	NEWCOMER_BATCH = 8,
	NEWCOMER_EACH = 7, /* per cache: the shared refills hand out 1, 2, then 4 */
	HANDOFF_CAP = 4096,
};
static const size_t newcomer_sizes[] = {48, 200, 1000};
#define NEWCOMER_SIZES (sizeof(newcomer_sizes) / sizeof(newcomer_sizes[0]))

static struct {
	pthread_mutex_t lock;
	struct obj items[HANDOFF_CAP];
	unsigned head, count;
	bool done;
	uint64_t handed, freed;
} handoff = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void fill_keyed(struct obj *o)
{
	for (size_t i = 0; i < o->size; i++)
		o->p[i] = (unsigned char)(o->key >> (8 * (i % 8)));
}

static bool keyed_intact(const struct obj *o)
{
	for (size_t i = 0; i < o->size; i++)
		if (o->p[i] != (unsigned char)(o->key >> (8 * (i % 8))))
			return false;
	return true;
}

static void *newcomer_main(void *arg)
{
	uint64_t id = (uint64_t)(uintptr_t)arg;
	struct obj mine[NEWCOMER_SIZES * NEWCOMER_EACH];
	unsigned n = 0;
	for (unsigned c = 0; c < NEWCOMER_SIZES; c++)
		for (unsigned i = 0; i < NEWCOMER_EACH; i++, n++) {
			mine[n].size = newcomer_sizes[c];
			mine[n].p = MALLOC(mine[n].size);
			mine[n].key = tu_mix(id * 64 + n) | 1;
			if (mine[n].p == NULL) {
				atomic_fetch_add(&errors, 1);
				mine[n].size = 0;
				continue;
			}
			fill_keyed(&mine[n]);
		}
	for (unsigned i = 0; i < n; i++) {
		if (!mine[i].p)
			continue;
		bool handed = false;
		if (i % 2 == 0) {
			pthread_mutex_lock(&handoff.lock);
			if (handoff.count < HANDOFF_CAP) {
				handoff.items[(handoff.head + handoff.count++) % HANDOFF_CAP] =
				    mine[i];
				handoff.handed++;
				handed = true;
			}
			pthread_mutex_unlock(&handoff.lock);
		}
		if (!handed) {
			if (!keyed_intact(&mine[i]))
				atomic_fetch_add(&errors, 1);
			FREE(mine[i].p);
		}
	}
	return NULL;
}

static void *freer_main(void *arg)
{
	(void)arg;
	for (;;) {
		pthread_mutex_lock(&handoff.lock);
		if (handoff.count == 0) {
			bool done = handoff.done;
			pthread_mutex_unlock(&handoff.lock);
			if (done)
				return NULL;
			sched_yield();
			continue;
		}
		struct obj o = handoff.items[handoff.head];
		handoff.head = (handoff.head + 1) % HANDOFF_CAP;
		handoff.count--;
		handoff.freed++;
		pthread_mutex_unlock(&handoff.lock);
		if (!keyed_intact(&o))
			atomic_fetch_add(&errors, 1);
		FREE(o.p);
	}
}

static void newcomers(void)
{
	double t0 = tu_now();
	pthread_t freer;
	int rc = pthread_create(&freer, NULL, freer_main, NULL);
	CHECKF(rc == 0, "pthread_create: %s", strerror(rc));
	if (rc != 0)
		return;
	uint64_t started = 0;
	for (unsigned r = 0; r < NEWCOMER_ROUNDS; r++) {
		pthread_t t[NEWCOMER_BATCH];
		unsigned n = 0;
		for (; n < NEWCOMER_BATCH; n++)
			if (pthread_create(&t[n], NULL, newcomer_main,
					   (void *)(uintptr_t)started++) != 0)
				break;
		for (unsigned i = 0; i < n; i++)
			pthread_join(t[i], NULL);
	}
	pthread_mutex_lock(&handoff.lock);
	handoff.done = true;
	pthread_mutex_unlock(&handoff.lock);
	pthread_join(freer, NULL);
	printf("  newcomers: %.2f s, %" PRIu64 " threads, %" PRIu64
	       " objects freed by the freeing thread\n",
	       tu_now() - t0, started, handoff.freed);
	CHECKF(handoff.handed == handoff.freed && handoff.freed > 0,
	       "%" PRIu64 " objects handed over, %" PRIu64 " freed", handoff.handed, handoff.freed);
}

int main(int argc, char **argv)
{
	tu_clean_env(argv);
	if (argc > 1)
		ops_per_thread = strtoul(argv[1], NULL, 10);
	printf("test_stress (%s): %d threads x %lu operations, sizes 1 B .. 16 KiB and "
	       "64 KiB .. 2 MiB, cross-thread frees through inboxes, realloc\n",
	       VARIANT, NTHREADS, ops_per_thread);
	fflush(stdout);

	tu_get_totals_fn totals = tu_totals_fn();
	CHECKF(totals != NULL, "uslub_get_totals not found: libuslub.so is not preloaded");
	uint64_t in_use_start = tu_in_use();

	pthread_barrier_init(&done_barrier, NULL, NTHREADS);
	double t0 = tu_now();
	/* Every inbox is ready before any thread starts: worker 0 may post to worker 3 at once. */
	for (int i = 0; i < NTHREADS; i++) {
		workers[i].id = i;
		workers[i].rng = tu_mix(SEED + (uint64_t)i + 1) | 1;
		pthread_mutex_init(&workers[i].inbox.lock, NULL);
	}
	for (int i = 0; i < NTHREADS; i++) {
		int rc = pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]);
		CHECKF(rc == 0, "pthread_create: %s", strerror(rc));
		if (rc != 0)
			return tu_summary("test_stress");
	}
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(workers[i].thread, NULL);
	double elapsed = tu_now() - t0;

	uint64_t allocs = 0, frees = 0, reallocs = 0, sent = 0, received = 0, full = 0;
	uint64_t large = 0, bytes = 0;
	for (int i = 0; i < NTHREADS; i++) {
		struct worker *w = &workers[i];
		allocs += w->allocs;
		frees += w->frees;
		reallocs += w->reallocs;
		sent += w->sent;
		received += w->received;
		full += w->ring_full;
		large += w->large;
		bytes += w->bytes;
		CHECKF(w->inbox.count == 0, "worker %d inbox still holds %u objects", i,
		       w->inbox.count);
	}
	printf("  %.2f s: %" PRIu64 " mallocs (%" PRIu64 " MiB filled, %" PRIu64 " large), %" PRIu64
	       " reallocs, %" PRIu64 " frees, %" PRIu64 " sent to another thread (%" PRIu64
	       " received), %" PRIu64 " freed by the sender on a full inbox\n",
	       elapsed, allocs, bytes >> 20, large, reallocs, frees, sent, received, full);

	newcomers();

	unsigned long errs = atomic_load(&errors);
	CHECKF(errs == 0, "%lu pattern/alignment/NULL errors (first %d printed above)", errs,
	       MAX_REPORTS);
	CHECKF(allocs == frees, "%" PRIu64 " mallocs but %" PRIu64 " frees", allocs, frees);
	CHECKF(sent == received, "%" PRIu64 " objects sent, %" PRIu64 " received", sent, received);
	CHECK(sent > 0 && reallocs > 0 && large > 0);

	if (totals != NULL) {
		uint64_t in_use_end = tu_in_use();
		printf("  uslub in_use: %" PRIu64 " bytes at start, %" PRIu64 " at the end\n",
		       in_use_start, in_use_end);
		CHECKF(in_use_end <= in_use_start + TU_MIB,
		       "in_use %" PRIu64 " at start, %" PRIu64 " after every object was freed",
		       in_use_start, in_use_end);
	}
	return tu_summary("test_stress");
}
