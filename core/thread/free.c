/* Free's slow path (__slab_free) and the reports of pointers that are not live blocks.
 * The inline fast path (slab.h) has already found the pointer's block; everything here
 * takes that answer. */
#include "internal.h"
#include "hooks.h"
#include "debug/debug.h"
#include "os/print.h"
#include "replenish/replenish.h"
#include "slab/slab.h"

#include <errno.h>
#include <stdlib.h>

void uslub_slab_free_remote(struct uslub_cache *c, struct page_desc *s, void *p,
			    struct uslub_thread *t)
{
	uslub_slab_free_chain(c, s, p, p, 1, t);
}

/* __slab_free: onto the remote list with one CAS, for one object or a chain of them. A
 * free that makes an unfrozen slab empty, or that finds it full while no thread can take
 * it, needs the node's lock. */
void uslub_slab_free_chain(struct uslub_cache *c, struct page_desc *s, void *head, void *tail,
			   unsigned count, struct uslub_thread *t)
{
	struct cache_node *n = node_of_slab(c, s);
	char *base = page_address(s);
	bool live = t->state == THREAD_LIVE;
	bool locked = false, freeze = false;
	uint64_t old, new, frozen;
	uint32_t prior, inuse;

	for (;;) {
		old = atomic_load_explicit(&s->word, memory_order_relaxed);
		prior = w_head(old);
		/* The mark caught every double free before here; fewer objects in use than
		 * freed, or the chain's head at the list's head, means one raced with another
		 * free of the same object. */
		if (unlikely(prior == encode(head, base)) || unlikely(w_inuse(old) < count))
			uslub_report_bad_free("double free", "free", head, c);
		set_next(c, tail, decode(prior, base));
		mark_free_plain(c, tail);
		inuse = w_inuse(old) - count;
		frozen = old & W_FROZEN;
		new = w_make(encode(head, base), inuse, frozen);
		freeze = false;
		if (!frozen) {
			if (!prior && live) {
				new |= W_FROZEN;
				freeze = true;
			} else if ((inuse == 0 || !prior) && !locked) {
				pthread_mutex_lock(&n->list_lock);
				locked = true;
				continue;
			}
		}
		/* acq_rel: release publishes p's link; acquire makes a thread that freezes
		 * the slab here see what its previous owner wrote into the descriptor
		 * (local list, partial link) before letting it go. On x86 it is the same
		 * instruction. */
		if (atomic_compare_exchange_weak_explicit(&s->word, &old, new, memory_order_acq_rel,
							  memory_order_relaxed))
			break;
		stat_shared(t, c->cls, USLUB_STAT_CMPXCHG_DOUBLE_FAIL);
	}
	if (frozen || freeze) {
		if (locked)
			pthread_mutex_unlock(&n->list_lock);
		if (frozen) {
			stat_shared(t, c->cls, USLUB_STAT_FREE_FROZEN);
			return;
		}
		__atomic_store_n(&s->owner, t, __ATOMIC_RELAXED);
		uslub_stat(&t->cpu[c->cls], CPU_PARTIAL_FREE);
		uslub_put_cpu_partial(c, s, t);
		return;
	}
	if (!locked)
		return; /* a partial slab stays partial: no list changes */
	if (inuse == 0 && n->nr_partial >= c->min_partial) {
		if (s->flags & PF_ON_PARTIAL) {
			remove_partial(n, s);
			stat_shared(t, c->cls, USLUB_STAT_FREE_REMOVE_PARTIAL);
		}
		pthread_mutex_unlock(&n->list_lock);
		uslub_discard_slab(c, s, t);
		return;
	}
	if (!(s->flags & PF_ON_PARTIAL)) {
		add_partial(n, s, true);
		stat_shared(t, c->cls, USLUB_STAT_FREE_ADD_PARTIAL);
	}
	pthread_mutex_unlock(&n->list_lock);
}

/* free reaches here by a tail call: the return address is the program's call site.
 * may_open: an object of a class whose sheaf the thread has not opened yet goes to the
 * sheaf's slow path, which opens it (uslub_sheaf_overflow), not to its slab. */
static inline __attribute__((always_inline)) void free_slow(void *p, struct page_desc *s,
							    bool may_open)
{
	if (!p)
		return;
	int saved = errno;
	if (!s) {
		if (!uslub_huge_free(p))
			uslub_report_no_block("free", p);
		errno = saved;
		return;
	}
	if (s->kind == PAGE_LARGE) {
		uslub_large_free(s, p); /* takes the thread's slow_lock for its cache */
		/* A safe point (see uslub_sheaf_overflow). */
		uslub_safe_point();
		errno = saved;
		return;
	}
	if (s->kind != PAGE_SLAB)
		uslub_report_no_block("free", p);
	struct uslub_cache *c = &uslub_caches[s->cls];
	if (unlikely(c->debug) ? uslub_slab_object_start(s, p) != p : !plain_object_at(s, p))
		uslub_report_bad_free("invalid pointer", "free", p, c);
	if (unlikely(c->debug))
		uslub_debug_free(c, s, p, __builtin_return_address(0));
	else if (is_marked_free(p))
		uslub_report_bad_free("double free", "free", p, c);
	struct uslub_thread *t = uslub_tls_thread;
	/* The fast path opens with the sheaf: a thread's first free of a class, or the first
	 * of a thread without state (a consumer), comes here and opens it. */
	if (may_open && !c->debug && c->sheaf_capacity && !t->cpu[s->cls].magic &&
	    (t->state == THREAD_LIVE || t->state == THREAD_EMPTY)) {
		uslub_sheaf_overflow(p, &t->cpu[s->cls]);
		errno = saved;
		return;
	}
	bool in = uslub_slow_enter(t);
	if (__atomic_load_n(&s->owner, __ATOMIC_RELAXED) == t) {
		push_local(c, s, p);
		uslub_stat(&t->cpu[s->cls], FREE_FASTPATH);
	} else {
		uslub_slab_free_remote(c, s, p, t);
		stat_shared(t, c->cls, USLUB_STAT_FREE_SLOWPATH);
	}
	uslub_slow_exit(t, in);
	errno = saved;
}

void uslub_free_slow(void *p, struct page_desc *s)
{
	free_slow(p, s, true);
}

void uslub_free_slab(void *p, struct page_desc *s)
{
	free_slow(p, s, false);
}

void uslub_report_no_block(const char *func, const void *p)
{
	struct region *r = region_of(p);
	if (r) {
		/* Free pages the region has grown over held a block once; its descriptors
		 * never did, and past what it grew the slot may hold someone else's mapping.
		 * (A plain read of grown: the program stops here either way.) */
		size_t page = ((uintptr_t)p & REGION_MASK) >> USLUB_PAGE_SHIFT;
		if (page >= FIRST_PAGE && page < r->grown && !((uintptr_t)p & 15)) {
			uslub_message("uslub: %s(): double free %p (its pages are free: the block "
				      "was freed before)\n",
				      func, p);
			abort();
		}
	} else if (uslub_huge_was_freed(p)) {
		uslub_message("uslub: %s(): double free %p (huge block, already unmapped)\n", func,
			      p);
		abort();
	}
	uslub_report_bad_free("invalid pointer", func, p, NULL);
}

void uslub_double_free(void *p, struct page_desc *s)
{
	uslub_report_bad_free("double free", "free", p, &uslub_caches[s->cls]);
}

void uslub_freelist_corrupt(struct cache_cpu *cc, void *object)
{
	struct page_desc *s = cc->slab;
	uslub_report_corrupt("free pointer outside its slab", &uslub_caches[s->cls],
			     page_address(s), object);
}
