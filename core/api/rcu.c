/* RCU: uslub_free_rcu (the kernel's kfree_rcu) and the grace period that slabs of
 * TYPESAFE_BY_RCU caches wait for before their pages go back (slab/objcache.c).
 *
 * uslub does not implement RCU: it hands batches to the call_rcu of the flavour the
 * program's readers use (uslub_set_rcu; liburcu-bp's by default, the flavour the library
 * itself links). One call_rcu per batch, never one per object: a batch holds up to
 * BATCH_OBJECTS pointers in an array of its own (kvfree_rcu's pointer pages), so nothing is
 * written into a block that readers may still be reading, and the slabs that emptied
 * since the last batch, linked through their descriptors. A batch goes when it is full, or
 * at the first free or safe point after it is BATCH_MS old, or at uslub_rcu_barrier. The
 * callback runs in liburcu's call_rcu thread after the grace period and frees it all.
 *
 * call_rcu may allocate (its first call makes the flavour's worker thread), so it is
 * called only from uslub_free_rcu and from safe points (hooks.h), never under a lock of
 * the allocator. */
#include "api/api.h"

#include "page/page.h"

#include <errno.h>
#include <urcu/urcu-bp.h>

#define BATCH_OBJECTS 500
#define BATCH_MS      20

struct rcu_batch {
	struct rcu_head head;
	struct page_desc *slabs;
	uint64_t born_ms;
	unsigned n;
	void *objects[BATCH_OBJECTS];
};

typedef void (*call_rcu_fn)(struct rcu_head *, void (*)(struct rcu_head *));
static call_rcu_fn flavour_call_rcu = urcu_bp_call_rcu;
static void (*flavour_barrier)(void) = urcu_bp_barrier;

static pthread_mutex_t batch_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rcu_batch *open_batch;

void uslub_set_rcu(call_rcu_fn call_rcu, void (*rcu_barrier)(void))
{
	if (!call_rcu || !rcu_barrier)
		return;
	USLUB_OUT(pthread_mutex_lock(&batch_lock));
	flavour_call_rcu = call_rcu;
	flavour_barrier = rcu_barrier;
	pthread_mutex_unlock(&batch_lock);
}

/* After the grace period, in the flavour's call_rcu thread. */
static void batch_done(struct rcu_head *head)
{
	struct rcu_batch *b = caa_container_of(head, struct rcu_batch, head);
	for (unsigned i = 0; i < b->n; i++)
		uslub_free(b->objects[i]);
	atomic_fetch_sub(&uslub_rcu_stats.pending_objects, b->n);
	atomic_fetch_add(&uslub_rcu_stats.freed_objects, b->n);
	for (struct page_desc *s = b->slabs, *next; s; s = next) {
		next = s->next;
		s->next = NULL;
		uslub_pages_free(s, s->order);
		atomic_fetch_sub(&uslub_rcu_stats.pending_slabs, 1);
		atomic_fetch_add(&uslub_rcu_stats.freed_slabs, 1);
	}
	uslub_free(b);
}

struct sync_wait {
	struct rcu_head head;
	_Atomic int done;
};

static void sync_done(struct rcu_head *head)
{
	atomic_store_explicit(&caa_container_of(head, struct sync_wait, head)->done, 1,
			      memory_order_release);
}

static struct rcu_batch *batch_new(void)
{
	struct rcu_batch *b = uslub_malloc(sizeof(*b));
	if (b) {
		b->slabs = NULL;
		b->n = 0;
		b->born_ms = uslub_os_now_ms();
	}
	return b;
}

/* Takes the open batch, with the slabs deferred so far, if it should go now (`force`,
 * full, or old); under batch_lock. Slabs with no batch open get one; if none can be made
 * they wait for the next try. */
static struct rcu_batch *batch_take(bool force)
{
	struct page_desc *slabs = uslub_rcu_take_slabs();
	struct rcu_batch *b = open_batch;
	if (!b && (slabs || force)) {
		b = open_batch = batch_new();
		if (!b) {
			for (struct page_desc *s = slabs, *next; s; s = next) {
				next = s->next;
				atomic_fetch_sub(&uslub_rcu_stats.pending_slabs, 1);
				uslub_rcu_defer_slab(s);
			}
			return NULL;
		}
	}
	if (!b)
		return NULL;
	while (slabs) {
		struct page_desc *s = slabs;
		slabs = s->next;
		s->next = b->slabs;
		b->slabs = s;
	}
	if (force || b->slabs || b->n == BATCH_OBJECTS ||
	    uslub_os_now_ms() - b->born_ms >= BATCH_MS) {
		open_batch = NULL;
		return b;
	}
	/* Left open: the next safe point looks at its age again. */
	atomic_store_explicit(&uslub_rcu_pending, 1, memory_order_relaxed);
	return NULL;
}

static void batch_send(struct rcu_batch *b, call_rcu_fn call)
{
	if (!b)
		return;
	if (!b->n && !b->slabs) {
		uslub_free(b);
		return;
	}
	atomic_fetch_add(&uslub_rcu_stats.batches, 1);
	USLUB_OUT_VOID(call(&b->head, batch_done));
}

/* The safe points' hook (hooks.h): slabs that emptied, or an open batch grown old. */
void uslub_rcu_flush(void)
{
	atomic_store_explicit(&uslub_rcu_pending, 0, memory_order_relaxed);
	if (pthread_mutex_trylock(&batch_lock) != 0) {
		atomic_store_explicit(&uslub_rcu_pending, 1, memory_order_relaxed);
		return;
	}
	struct rcu_batch *b = batch_take(false);
	call_rcu_fn call = flavour_call_rcu;
	pthread_mutex_unlock(&batch_lock);
	batch_send(b, call);
}

void uslub_free_rcu(void *p)
{
	if (!p)
		return;
	uslub_init();
	/* A pointer that is no block is reported now, not after the grace period. */
	struct page_desc *d = block_of(p);
	if (d && d->kind == PAGE_SLAB && uslub_caches[d->cls].user_off) {
		/* Checked on its way out, by free(). */
	} else {
		struct uslub_ptr ptr;
		uslub_classify(p, d, "uslub_free_rcu", 0, &ptr);
	}
	int saved = errno;
	USLUB_OUT(pthread_mutex_lock(&batch_lock));
	if (!open_batch)
		open_batch = batch_new();
	struct rcu_batch *b = open_batch;
	if (b) {
		b->objects[b->n++] = p;
		atomic_fetch_add(&uslub_rcu_stats.pending_objects, 1);
		b = batch_take(false);
	}
	call_rcu_fn call = flavour_call_rcu;
	bool stored = open_batch || b;
	pthread_mutex_unlock(&batch_lock);
	batch_send(b, call);
	if (!stored) {
		/* No memory for a batch: wait for a grace period here instead. */
		struct sync_wait w = {.done = 0};
		USLUB_OUT_VOID(call(&w.head, sync_done));
		while (!atomic_load_explicit(&w.done, memory_order_acquire))
			uslub_os_yield();
		uslub_free(p);
	}
	errno = saved;
}

void uslub_rcu_barrier(void)
{
	USLUB_OUT(pthread_mutex_lock(&batch_lock));
	struct rcu_batch *b = batch_take(true);
	call_rcu_fn call = flavour_call_rcu;
	void (*barrier)(void) = flavour_barrier;
	pthread_mutex_unlock(&batch_lock);
	batch_send(b, call);
	USLUB_OUT_VOID(barrier());
}
