/* The quarantine of USLUB_DEBUG=Q: a freed object of a debug cache is not put back on its
 * slab's free list at once but held, oldest first, until the objects held add up to more
 * than USLUB_QUARANTINE bytes (their slots, red zones and metadata included). Without it
 * the next malloc of the size returns the object just freed, and a write through a
 * dangling pointer lands in the new owner's data, unseen; held, the object keeps its
 * poison, which is checked as it leaves (and by the sweep, sweep.c, while it waits).
 * KASAN, ASan and the hardened allocators delay reuse the same way.
 *
 * One FIFO for the process, linked through the held objects' free-pointer words (a held
 * object is on no free list, so the word is unused), under one lock. Objects leave it in
 * the free that pushed them out, after the lock is dropped: their free takes the slab's
 * locks, and fork (api/startup.c) takes this lock before every other. A held object is
 * free to the program (its state word says so: a second free of it, realloc or
 * malloc_usable_size is reported) and in use to its slab, which therefore stays.
 *
 * Large blocks freed under Q (guarded ones, slab/large.c) wait in the same queue, their
 * whole pages counted: PF_HELD, poisoned, their header saying so to the sweep. */
#include "debug/debug.h"
#include "debug/report.h"

#include "os/options.h"
#include "slab/slab.h"
#include "os/vg.h"

#include <pthread.h>

/* Objects released by one free at most: a free that pushes out many small objects (after
 * a large one came in) leaves the rest to the next frees, so no free waits long. */
#define RELEASE_BATCH 64

static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static void *q_head, *q_tail; /* oldest, newest */
static uint64_t q_bytes, q_objects;

/* A large block (a guarded one, slab/large.c) is held by its start, linked through its
 * descriptor: its bytes are poison the sweep checks. */
static uintptr_t *q_link(void *object)
{
	struct page_desc *s = page_desc_of(object)->head;
	if (s->kind == PAGE_LARGE)
		return (uintptr_t *)&s->next;
	return &dbg_meta_of(&uslub_caches[s->cls], object)->link;
}

static void *q_next(void *object)
{
	uintptr_t *l = q_link(object);
	mem_open(l, sizeof(*l));
	void *next = (void *)*l;
	mem_close(l, sizeof(*l));
	return next;
}

static void q_set_next(void *object, void *next)
{
	uintptr_t *l = q_link(object);
	mem_open(l, sizeof(*l));
	*l = (uintptr_t)next;
	mem_close(l, sizeof(*l));
}

static uint64_t slot_bytes(void *object)
{
	struct page_desc *s = page_desc_of(object)->head;
	if (s->kind == PAGE_LARGE)
		return (uint64_t)s->objects << USLUB_PAGE_SHIFT;
	return uslub_caches[s->cls].stride;
}

/* Takes up to `max` of the oldest objects while more than `keep` bytes are held; returns
 * the chain (linked as in the queue, NULL-terminated). Under q_lock. */
static void *take_oldest(uint64_t keep, unsigned max)
{
	void *first = q_head, *last = NULL;
	unsigned n = 0;
	while (q_head && q_bytes > keep && n < max) {
		last = q_head;
		q_bytes -= slot_bytes(last);
		q_objects--;
		q_head = q_next(last);
		n++;
	}
	if (!last)
		return NULL;
	if (!q_head)
		q_tail = NULL;
	q_set_next(last, NULL);
	return first;
}

/* Each object of the chain: its poison checked (a write after free is found here at the
 * latest), then freed to its slab. */
static void release(void *chain)
{
	for (void *p = chain, *next; p; p = next) {
		next = q_next(p);
		struct page_desc *s = page_desc_of(p)->head;
		if (s->kind == PAGE_LARGE) {
			uslub_debug_block_leave(s);
			continue;
		}
		struct uslub_cache *c = &uslub_caches[s->cls];
		const unsigned char *bad = uslub_debug_bad_poison(c, p);
		if (bad) {
			uslub_debug_op = "free (an object leaving the quarantine)";
			uslub_debug_caller = NULL;
			uslub_debug_report(c, s, p, "Poison overwritten", bad);
		}
		uslub_slab_object_free(c, s, p, uslub_tls_thread);
	}
}

static bool put(void *object, uint64_t bytes)
{
	uint64_t limit = uslub_config.quarantine;
	if (bytes > limit)
		return false; /* also USLUB_QUARANTINE=0: none */
	q_set_next(object, NULL);
	USLUB_OUT(pthread_mutex_lock(&q_lock));
	if (q_tail)
		q_set_next(q_tail, object);
	else
		q_head = object;
	q_tail = object;
	q_bytes += bytes;
	q_objects++;
	void *chain = take_oldest(limit, RELEASE_BATCH);
	pthread_mutex_unlock(&q_lock);
	release(chain);
	return true;
}

bool uslub_quarantine_put(struct uslub_cache *c, struct page_desc *s, void *object)
{
	(void)s;
	return put(object, c->stride);
}

bool uslub_quarantine_put_block(struct page_desc *d)
{
	return put(uslub_large_start(d), (uint64_t)d->objects << USLUB_PAGE_SHIFT);
}

void uslub_quarantine_drain(void)
{
	/* Bounded: what is held now, in batches; frees meanwhile add no more than they
	 * push out. */
	USLUB_OUT(pthread_mutex_lock(&q_lock));
	uint64_t rounds = q_objects / RELEASE_BATCH + 1;
	pthread_mutex_unlock(&q_lock);
	for (uint64_t i = 0; i < rounds; i++) {
		USLUB_OUT(pthread_mutex_lock(&q_lock));
		void *chain = take_oldest(0, RELEASE_BATCH);
		pthread_mutex_unlock(&q_lock);
		if (!chain)
			break;
		release(chain);
	}
}

uint64_t uslub_quarantine_held(void)
{
	USLUB_OUT(pthread_mutex_lock(&q_lock));
	uint64_t n = q_objects;
	pthread_mutex_unlock(&q_lock);
	return n;
}

void uslub_quarantine_lock(void)
{
	USLUB_OUT(pthread_mutex_lock(&q_lock));
}

void uslub_quarantine_unlock(void)
{
	pthread_mutex_unlock(&q_lock);
}
