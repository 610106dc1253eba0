/* Free's slow path below the classification (api/lookup.c): a live object of a slab back
 * to its sheaf, its slab's local list, or its slab's remote list (__slab_free). */
#include "thread/thread.h"
#include "hooks.h"
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
			uslub_report_bad_free("double free", "free", head, c, s);
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
				uslub_lock(&n->list_lock, USLUB_LOCK_LIST);
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

/* free of p, a live object of slab s: the caller classified it (an object's start and,
 * in a plain cache, not marked free). `caller` is the program's call site
 * (USLUB_DEBUG=U). */
void uslub_object_free(void *p, struct page_desc *s, void *caller)
{
	struct uslub_cache *c = &uslub_caches[s->cls];
	if (unlikely(c->debug) && uslub_hooks.object_free(c, s, p, caller))
		return; /* held in the quarantine (USLUB_DEBUG=Q), freed from there later */
	struct uslub_thread *t = uslub_tls_thread;
	struct cache_cpu *cc = &t->cpu[s->cls];
	if (cc->magic) {
		/* An open sheaf (its push is api.h's uslub_free_ptr): a full one overflows. */
		if (cc->sheaf_count < cc->sheaf_cap) {
			mark_free(p);
			cc->sheaf[cc->sheaf_count] = p;
			uslub_own_store(cc->sheaf_count, (uint16_t)(cc->sheaf_count + 1));
			return;
		}
		uslub_sheaf_overflow(p, cc);
		return;
	}
	/* The fast path opens with the sheaf: a thread's first free of a class, or the first
	 * of a thread without state (a consumer), comes here and opens it. */
	if (!c->debug && c->sheaf_capacity &&
	    (t->state == THREAD_LIVE || t->state == THREAD_EMPTY)) {
		uslub_sheaf_overflow(p, cc);
		return;
	}
	uslub_slab_object_free(c, s, p, t);
}

void uslub_slab_object_free(struct uslub_cache *c, struct page_desc *s, void *p,
			    struct uslub_thread *t)
{
	bool in = uslub_slow_enter(t);
	if (__atomic_load_n(&s->owner, __ATOMIC_RELAXED) == t) {
		push_local(c, s, p);
		uslub_stat(&t->cpu[s->cls], FREE_FASTPATH);
	} else {
		uslub_slab_free_remote(c, s, p, t);
		stat_shared(t, c->cls, USLUB_STAT_FREE_SLOWPATH);
	}
	uslub_slow_exit(t, in);
}

void uslub_double_free(void *p, struct page_desc *s)
{
	/* A medium block in a sheaf (medium_sheaf.c) is caught by the objects' test too. */
	if (s->kind == PAGE_LARGE)
		uslub_report_bad_block("double free", "free", p, "large",
				       (size_t)s->objects << USLUB_PAGE_SHIFT);
	uslub_report_bad_free("double free", "free", p, &uslub_caches[s->cls], s);
}

void uslub_freelist_corrupt(struct cache_cpu *cc, void *object)
{
	struct page_desc *s = cc->slab;
	uslub_report_corrupt("free pointer outside its slab", &uslub_caches[s->cls],
			     page_address(s), object);
}
