/* The partial lists: slabs a thread lets go (deactivate_slab) onto its node's list,
 * the thread's own short list of frozen slabs (put_cpu_partial, unfreeze_partials), and
 * the search of the node lists, nearest node first (get_partial). Slab states and the
 * locks they move under: slab.c, sections 4 and 5. */
#include "page/node.h"
#include "slab/slab.h"

/* The last object of a private free list of `count` objects, checked link by link. */
static void *list_tail(const struct uslub_cache *c, struct page_desc *s, void *head, uint32_t count)
{
	void *p = head, *q;
	for (uint32_t n = 1; (q = get_next_checked(c, s, p)); p = q)
		if (unlikely(++n > count))
			uslub_report_corrupt("free list longer than counted", c, page_address(s),
					     head);
	return p;
}

/* deactivate_slab: the owner lets a frozen slab go. Its free objects (the thread's
 * freelist `fl`, if it is the current slab, and the local list) join the remote ones on
 * the slab's own list; the slab then goes to the node's partial list, back to the page
 * allocator when empty, or nowhere when full. */
static void deactivate_slab(struct uslub_cache *c, struct page_desc *s, void *fl,
			    struct uslub_thread *t, struct cache_cpu *cc)
{
	struct cache_node *n = node_of_slab(c, s);
	char *base = page_address(s);
	/* The owner's free objects: the thread freelist (only when a thread flushes) ahead
	 * of the local list, whose length the free fast path keeps, so a slab dropped
	 * from the thread partial list costs no walk over its objects. */
	void *mine = s->local_free;
	uint32_t nfree = s->local_count;
	if (fl) {
		void *p = fl, *q;
		nfree++;
		while ((q = get_next_checked(c, s, p))) {
			p = q;
			if (unlikely(++nfree > s->objects))
				uslub_report_corrupt("free list longer than its slab", c, base, fl);
		}
		set_next(c, p, mine);
		mine = fl;
	}
	/* An unfrozen slab with untouched objects keeps some free ones on its list, so
	 * that an empty list still means a full slab (section 9). */
	if (!mine && s->objects < uslub_slab_capacity(c, s) &&
	    !w_head(atomic_load_explicit(&s->word, memory_order_acquire))) {
		unsigned n;
		mine = uslub_slab_extend(c, s, &n);
		nfree = n;
	}
	s->local_free = NULL;
	s->local_count = 0;
	__atomic_store_n(&s->owner, NULL, __ATOMIC_RELAXED);

	bool locked = false;
	uint64_t old, new;
	uint32_t inuse;
	void *remote, *head, *mine_tail = NULL;
	bool remote_walked = false; /* a retry keeps the order its first try linked */
	for (;;) {
		old = atomic_load_explicit(&s->word, memory_order_acquire);
		remote = decode(w_head(old), base);
		if (unlikely(nfree > w_inuse(old)))
			uslub_report_corrupt("more free objects than the slab holds", c, base,
					     mine);
		inuse = w_inuse(old) - nfree;
		if ((mine || remote) && !locked) {
			uslub_lock(&n->list_lock, USLUB_LOCK_LIST);
			locked = true;
			continue;
		}
		head = remote ? remote : mine;
		if (remote && mine && !remote_walked &&
		    (mine_tail || s->objects - w_inuse(old) > nfree)) {
			/* The owner's list is the shorter: walked once (it is private), its
			 * tail then names whatever heads the remote list at each try. A slab
			 * that a thread's sheaf flush froze has all its frees on the remote
			 * list and none of its owner's: that list alone, as it is, no walk
			 * (random_replace1's fresh heap set up and freed: 1.1 M of the
			 * allocator's 71 M instructions, callgrind). */
			if (!mine_tail)
				mine_tail = list_tail(c, s, mine, nfree);
			set_next(c, mine_tail, remote);
			head = mine;
		} else if (remote && mine) {
			/* Remote frees go in front: they push at the head, so the tail of
			 * this snapshot stays put while the walk runs. Its tail then links
			 * to mine, so a retry must walk it again (the owner's list walked
			 * then would close a ring). */
			remote_walked = true;
			void *tail = remote;
			void *next;
			unsigned steps = 0;
			while ((next = get_next_checked(c, s, tail)) && next != mine) {
				tail = next; /* a retry finds the link it made */
				if (unlikely(++steps > s->objects))
					uslub_report_corrupt(
					    "remote free list longer than its slab", c, base,
					    remote);
			}
			set_next(c, tail, mine);
		}
		new = w_make(encode(head, base), inuse, 0);
		/* acq_rel: the remote frees this folds in happened before the owner lets
		 * go, and whoever takes the slab next sees our writes. */
		if (atomic_compare_exchange_strong_explicit(
			&s->word, &old, new, memory_order_acq_rel, memory_order_acquire))
			break;
	}
	if (!locked) {
		stat_to(cc, c, DEACTIVATE_FULL);
		return;
	}
	if (remote)
		stat_to(cc, c, DEACTIVATE_REMOTE_FREES);
	if (inuse == 0 && n->nr_partial >= c->min_partial) {
		pthread_mutex_unlock(&n->list_lock);
		stat_to(cc, c, DEACTIVATE_EMPTY);
		uslub_discard_slab(c, s, t);
		return;
	}
	add_partial(n, s, inuse == 0);
	if (inuse == 0)
		stat_to(cc, c, DEACTIVATE_TO_TAIL);
	else
		stat_to(cc, c, DEACTIVATE_TO_HEAD);
	pthread_mutex_unlock(&n->list_lock);
}

void uslub_deactivate_slab(struct uslub_cache *c, struct page_desc *s, void *fl,
			   struct uslub_thread *t)
{
	deactivate_slab(c, s, fl, t, &t->cpu[c->cls]);
}

void uslub_deactivate_shared(struct uslub_cache *c, struct page_desc *s, struct uslub_thread *t)
{
	deactivate_slab(c, s, NULL, t, NULL);
}

void uslub_unfreeze_partials(struct uslub_cache *c, struct cache_cpu *cc, struct uslub_thread *t)
{
	struct page_desc *s;
	while ((s = cc->partial)) {
		cc->partial = s->next;
		s->next = NULL;
		cc->nr_partial--;
		uslub_deactivate_slab(c, s, NULL, t);
	}
}

void uslub_put_cpu_partial(struct uslub_cache *c, struct page_desc *s, struct uslub_thread *t)
{
	struct cache_cpu *cc = &t->cpu[c->cls];
	if (cc->nr_partial >= c->cpu_partial_slabs) {
		uslub_stat(cc, CPU_PARTIAL_DRAIN);
		uslub_unfreeze_partials(c, cc, t);
	}
	s->next = cc->partial;
	cc->partial = s;
	cc->nr_partial++;
}

/* get_partial_node: freeze the first slab of a node's partial list for the caller, and
 * up to half a thread partial list more. Returns the first, its objects in *fl, and the
 * count of free objects taken in *found. */
static struct page_desc *get_partial_node(struct uslub_cache *c, struct cache_node *n,
					  struct uslub_thread *t, struct cache_cpu *cc, void **fl,
					  uint64_t *found)
{
	struct page_desc *first = NULL, *s, *tmp;

	if (!__atomic_load_n(&n->nr_partial, __ATOMIC_RELAXED))
		return NULL;
	uslub_lock(&n->list_lock, USLUB_LOCK_LIST);
	cds_list_for_each_entry_safe(s, tmp, &n->partial, list)
	{
		remove_partial(n, s);
		uint64_t old = atomic_load_explicit(&s->word, memory_order_relaxed);
		while (!atomic_compare_exchange_weak_explicit(
		    &s->word, &old, w_make(0, s->objects, W_FROZEN), memory_order_acquire,
		    memory_order_relaxed))
			;
		__atomic_store_n(&s->owner, t, __ATOMIC_RELAXED);
		void *objects = decode(w_head(old), page_address(s));
		*found += s->objects - w_inuse(old);
		if (!first) {
			first = s;
			*fl = objects;
			uslub_stat(cc, ALLOC_FROM_PARTIAL);
		} else {
			s->local_free = objects;
			s->local_count = (uint16_t)(s->objects - w_inuse(old));
			s->next = cc->partial;
			cc->partial = s;
			cc->nr_partial++;
			uslub_stat(cc, CPU_PARTIAL_NODE);
		}
		if (cc->nr_partial >= c->cpu_partial_slabs / 2)
			break;
	}
	pthread_mutex_unlock(&n->list_lock);
	return first;
}

/* get_any_partial: the other nodes, nearest first. The local node was searched just
 * before and is not searched again, each node is looked at once, and with one node there
 * is nothing to search: the kernel's fix, which USLUB_NUMA=...,noskip turns off (the
 * search then starts at the local node and runs on one node too) for comparison. */
static struct page_desc *get_any_partial(struct uslub_cache *c, struct uslub_thread *t,
					 struct cache_cpu *cc, void **fl)
{
	unsigned local = t->node, nr = uslub_nr_nodes;
	bool again = uslub_topo.search_local;
	if (nr == 1 && !again)
		return NULL;
	struct uslub_node *me = &uslub_nodes[local];
	__atomic_fetch_add(&me->any_partial_calls, 1, __ATOMIC_RELAXED);
	/* Nodes this search has looked at, to count a repeat: the one thing the kernel's
	 * fix is about, and what a wrong order table would show (tests/test_numa_emu.c). */
	unsigned seen = 1u << local;
	_Static_assert(MAX_NODES <= 32, "a node set fits in seen");
	for (unsigned k = again ? 0 : 1; k < nr; k++) {
		unsigned node = k == 0 ? local : uslub_topo.order[local][k - 1];
		__atomic_fetch_add(&me->any_partial_tried, 1, __ATOMIC_RELAXED);
		if (seen & (1u << node))
			__atomic_fetch_add(&me->any_partial_again, 1, __ATOMIC_RELAXED);
		seen |= 1u << node;
		uint64_t found = 0;
		struct page_desc *s =
		    get_partial_node(c, cache_node_of(c, node), t, cc, fl, &found);
		if (s) {
			if (node != local) {
				__atomic_fetch_add(&me->remote_slabs, 1, __ATOMIC_RELAXED);
				__atomic_fetch_add(&me->remote_objects, found, __ATOMIC_RELAXED);
			}
			return s;
		}
	}
	return NULL;
}

struct page_desc *uslub_get_partial(struct uslub_cache *c, struct uslub_thread *t,
				    struct cache_cpu *cc, void **fl)
{
	uint64_t found = 0;
	struct page_desc *s = get_partial_node(c, cache_node_of(c, t->node), t, cc, fl, &found);
	if (s) {
		__atomic_fetch_add(&uslub_nodes[t->node].local_partial_hits, 1, __ATOMIC_RELAXED);
		return s;
	}
	return get_any_partial(c, t, cc, fl);
}
