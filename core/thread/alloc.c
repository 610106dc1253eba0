/* Allocation's slow path: SLUB's ___slab_alloc and the engine's entry for every request
 * the inline fast path (slab.h) does not serve. The thread's freelist of a cache ran dry:
 * refill it from the current slab's local and remote lists, then the thread's partial
 * slabs, then the node partial lists (get_partial, slab.c), and only then a new slab. */
#include "thread/thread.h"
#include "hooks.h"
#include "page/node.h"
#include "slab/slab.h"

#include <errno.h>
#include <stdint.h>

/* Below the barn, for a live thread: its slab layer under the slow-path lock, filling
 * `half` of the sheaf (0: the cache has no sheaf). A safe point for starting the
 * background thread: no cache state is half-changed here. */
static void *refill_below(struct uslub_thread *t, unsigned cls, unsigned half)
{
	uslub_safe_point();
	bool in = uslub_slow_enter(t);
	void *object = half ? uslub_sheaf_refill(t, cls, half) : uslub_alloc_refill(t, cls);
	uslub_slow_exit(t, in);
	return object;
}

/* The engine's entry: malloc's fast path tail-calls here when the thread freelist of the
 * size's cache is empty, for every request above 8 KiB, and before start-up. */
/* Bytes asked for versus bytes handed out (internal waste) cannot be counted exactly without
 * work on the fast path, which only knows the class. The slow path knows the size, and it is
 * taken when a thread's freelist runs dry - a moment that does not depend on the sizes asked
 * for - so the requests it records are a fair sample of the class's requests. The dump
 * scales their mean by the active objects. Called from the
 * allocation slow path. */
static void stat_request(unsigned cls, size_t size)
{
#if USLUB_STATS_ENABLED
	struct uslub_thread *t = uslub_tls_thread;
	/* The empty and dead states are shared by many threads: their slow path builds or
	 * borrows a state, and a sample lost there does not matter. */
	if (t->state != THREAD_LIVE)
		return;
	uslub_stat(&t->cpu[cls], SAMPLE_REQUESTS);
	uslub_stat_add(&t->cpu[cls], SAMPLE_REQUESTED_BYTES, size);
#else
	(void)cls, (void)size;
#endif
}

/* Small sizes: the barn, else the slab layer. */
static noinline void *alloc_small(size_t size)
{
	unsigned cls = uslub_size_to_class(size);
	struct uslub_thread *t = uslub_tls_thread;
	/* An open sheaf (so a live thread, set up, of a plain cache) ran empty: the barn
	 * first, without the detour through the general entry below (a sixth of what a
	 * sheaf's round trip costs in batches). */
	if (likely(t->cpu[cls].sheaf_cap)) {
		/* The internal-waste sample (stats.h), inline: the state is live. */
		uslub_stat(&t->cpu[cls], SAMPLE_REQUESTS);
		uslub_stat_add(&t->cpu[cls], SAMPLE_REQUESTED_BYTES, size);
		unsigned half;
		void *object = uslub_sheaf_refill_barn(t, cls, &half);
		if (likely(object))
			return object;
		return refill_below(t, cls, half);
	}
	stat_request(cls, size); /* the internal-waste sample, see stat_request */
	return uslub_slab_alloc_class(cls, size);
}

static noinline void *alloc_large_general(size_t size)
{
	if (size > PTRDIFF_MAX) {
		errno = ENOMEM;
		return NULL;
	}
	return uslub_thread_large_alloc(size, 0, false);
}

/* Large sizes: a medium block the thread's cache holds, with nothing saved or called on
 * the way (slab.h, the hits), else the large-block layer. */
static inline void *alloc_large(size_t size)
{
	if (size <= medium_max_bytes()) {
		void *p = uslub_medium_pop(size);
		if (likely(p))
			return unlikely(uslub_tick_due()) ? uslub_medium_tick(p) : p;
	}
	return alloc_large_general(size);
}

void *uslub_slab_alloc_slow(size_t size)
{
	if (likely(size <= USLUB_MAX_SMALL))
		return alloc_small(size);
	if (size <= USLUB_MAX_FAST) {
		void *p = uslub_msheaf_alloc(size);
		if (p)
			return p;
	}
	return alloc_large(size);
}

/* A medium block goes through the thread's cache (slab/medium.c), so a thread whose first
 * requests are medium ones makes its state for them, as its first small one would. */
static void medium_state(size_t size)
{
	if (unlikely(uslub_tls_thread->state == THREAD_EMPTY) && size <= (size_t)MEDIUM_MAX_PAGES
									     << USLUB_PAGE_SHIFT) {
		uslub_safe_point();
		uslub_thread_create();
	}
}

void *uslub_thread_large_alloc(size_t size, size_t align, bool zero)
{
	medium_state(size);
	return uslub_large_alloc(size, align, zero);
}

void uslub_thread_large_free(struct page_desc *d, void *p)
{
	medium_state((size_t)d->objects << USLUB_PAGE_SHIFT);
	uslub_large_free(d, p);
}

/* The owner's free objects of a frozen slab: its local list, else its remote list, else
 * the next step of its untouched objects (slab.c, section 9): memory already touched is
 * reused before more is. */
static void *take_slab_freelist(struct uslub_cache *c, struct page_desc *s)
{
	void *fl = s->local_free;
	if (fl) {
		s->local_free = NULL;
		s->local_count = 0;
		return fl;
	}
	uint64_t old = atomic_load_explicit(&s->word, memory_order_acquire);
	while (w_head(old)) {
		if (atomic_compare_exchange_weak_explicit(
			&s->word, &old, w_make(0, s->objects, W_FROZEN), memory_order_acquire,
			memory_order_relaxed))
			return decode(w_head(old), page_address(s));
	}
	unsigned n;
	return uslub_slab_extend(c, s, &n);
}

/* ___slab_alloc: an object from the thread's slab layer - its freelist, else a slab's
 * lists. Below the sheaf, or with sheaves off (and for debug caches) the path itself. */
void *uslub_alloc_refill(struct uslub_thread *t, unsigned cls)
{
	struct cache_cpu *cc = &t->cpu[cls];
	struct uslub_cache *c = &uslub_caches[cls];
	struct page_desc *s;
	void *fl, *object = cc->freelist;

	if (object) {
		/* Filled meanwhile: the thread was just set up, or a recursion refilled. */
		cc->freelist = get_next_checked(c, cc->slab, object);
		mark_allocated(object);
		/* Not a sheaf pop: the derived free count must not see it (uslub_cc_stat). */
		uslub_stat(cc, ALLOC_FASTPATH);
		uslub_stat_add(cc, FREE_FASTPATH, (uint64_t)-1);
		return object;
	}
	s = cc->slab;
	if (unlikely(c->debug) && s && s->local_free) {
		/* A debug cache keeps its free objects on the slab's local list, never on
		 * the thread freelist, and takes them one at a time. */
		object = s->local_free;
		s->local_free = get_next(c, object);
		s->local_count--;
		uslub_stat(cc, ALLOC_SLOWPATH);
		return object;
	}
	if (s) {
		fl = take_slab_freelist(c, s);
		if (fl) {
			uslub_stat(cc, ALLOC_REFILL);
			goto load;
		}
		cc->slab = NULL;
		uslub_stat(cc, DEACTIVATE_BYPASS);
		uslub_deactivate_slab(c, s, NULL, t);
	}
	while ((s = cc->partial)) {
		cc->partial = s->next;
		s->next = NULL;
		cc->nr_partial--;
		fl = take_slab_freelist(c, s);
		if (fl) {
			cc->slab = s;
			uslub_stat(cc, CPU_PARTIAL_ALLOC);
			goto load;
		}
		uslub_deactivate_slab(c, s, NULL, t);
	}
	/* Needing a new slab is when a migration is looked for: sched_getcpu is a vDSO
	 * call, and once per slab costs nothing next to the slab. */
	if (uslub_nr_nodes > 1 && !uslub_topo.round_robin) {
		unsigned node = uslub_node_current();
		if (node != t->node) {
			uslub_stat(cc, ALLOC_NODE_MISMATCH);
			t->node = node;
		}
	}
	s = uslub_get_partial(c, t, cc, &fl);
	if (s) {
		cc->slab = s;
		goto load;
	}
	s = uslub_new_slab(c, t, cc, &fl);
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	cc->slab = s;
load:
	uslub_stat(cc, ALLOC_SLOWPATH);
	if (unlikely(c->debug)) {
		/* The rest waits on the slab's local list (empty here: each way to `load`
		 * took or found it so), counted once per load, not once per object. */
		uint16_t n = 0;
		s->local_free = get_next(c, fl);
		for (void *p = s->local_free; p && n < s->objects; p = get_next(c, p))
			n++;
		s->local_count = n;
		return fl;
	}
	cc->freelist = get_next_checked(c, s, fl);
	mark_allocated(fl);
	return fl;
}

static void *alloc_class(unsigned cls)
{
	struct uslub_thread *t = uslub_tls_thread;
	/* A safe point: no cache state is half-changed here, so the nested allocations of
	 * pthread_create are harmless. */
	uslub_safe_point();
	if (unlikely(t->state == THREAD_EMPTY))
		t = uslub_thread_state(); /* published below, or at its first free */
	if (likely(t && t->state == THREAD_LIVE)) {
		unsigned half = 0;
		if (uslub_early_due(t, cls)) {
			void *object = uslub_alloc_early(t, cls);
			if (object)
				return object;
		}
		uslub_tls_thread = t; /* its sheaf of cls opens: published (thread.h) */
		uslub_sheaf_open(t, &t->cpu[cls], cls);
		if (t->cpu[cls].sheaf_cap) {
			void *object = uslub_sheaf_refill_barn(t, cls, &half);
			if (object)
				return object;
		}
		return refill_below(t, cls, half);
	}
	/* No state of our own (exiting thread, or none could be made): share one. */
	uslub_lock(&uslub_orphan_lock, USLUB_LOCK_ORPHAN);
	void *object = uslub_alloc_refill(&uslub_orphan_thread, cls);
	pthread_mutex_unlock(&uslub_orphan_lock);
	return object;
}

void *uslub_slab_alloc_class_at(unsigned cls, size_t size, void *caller)
{
	void *object = alloc_class(cls);
	struct uslub_cache *c = &uslub_caches[cls];
	if (unlikely(c->debug) && object)
		uslub_hooks.object_alloc(c, page_desc_of(object)->head, object, size, caller);
	return object;
}

/* malloc and uslub_slab_alloc_slow reach here by tail calls, so the return address is
 * the program's call site: what USLUB_DEBUG=U records. */
void *uslub_slab_alloc_class(unsigned cls, size_t size)
{
	return uslub_slab_alloc_class_at(cls, size, __builtin_return_address(0));
}
