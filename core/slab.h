/* The fast paths, inline so each reads top to bottom on one screen. Anything that is not
 * "pop the thread's freelist" or "push onto a slab this thread holds" goes to one
 * out-of-line call in slab.c. */
#ifndef USLUB_SLAB_H
#define USLUB_SLAB_H

#include "internal.h"
#include "debug.h"

/* Objects in a slab of `order` pages: plain caches fill it; a debug cache's slots are
 * `stride` apart and the last object's right red zone follows them (debug.h). */
static inline unsigned uslub_cache_objects(const struct uslub_cache *c, unsigned order)
{
	size_t bytes = USLUB_PAGE_SIZE << order;
	if (c->debug)
		return (unsigned)((bytes - 16) / c->stride);
	return (unsigned)(bytes / c->size);
}
/* The free pointer stored in a free object (decoded, for walkers such as check.c). */
void *uslub_slab_next_free(const struct uslub_cache *c, void *object);
/* The slab_is_valid() walker of USLUB_DEBUG=F and the tests: descriptor, counts and, for
 * the slab's owner, every free list; false with the reason in *why. */
bool uslub_slab_is_valid(struct page_desc *s, const char **why);

/* The sheaf paths, out of line so the two fast paths above them stay as short as they
 * were without sheaves (slab.c). */
void *uslub_sheaf_alloc(struct cache_cpu *cc, size_t size);
void uslub_sheaf_free(void *p, struct page_desc *s);

/* An object popped from a thread freelist lies outside the slab: its free pointer was
 * overwritten (slab.c, section 7). */
__attribute__((noreturn)) void uslub_freelist_corrupt(struct cache_cpu *cc, void *object);
/* free of an object already free (its mark says so): reported, the program stops. */
__attribute__((noreturn)) void uslub_double_free(void *p, struct page_desc *s);

static inline void *uslub_malloc_inline(size_t size)
{
	if (likely(size <= USLUB_MAX_SMALL)) {
		struct cache_cpu *cc = &uslub_tls_thread->cpu[uslub_size_to_class(size)];
		void *object = cc->freelist;
		if (likely(object)) {
			uintptr_t bits = cc->slab_bits;
			if (unlikely(((uintptr_t)object ^ bits) >> (bits & 63)))
				uslub_freelist_corrupt(cc, object);
			cc->freelist = link_get(object);
			mark_allocated(object);
			uslub_stat(cc, ALLOC_FASTPATH);
			return object;
		}
		return uslub_sheaf_alloc(cc, size);
	}
	return uslub_slab_alloc_slow(size);
}

/* A free into a slab this thread holds (its current slab or one on its partial list) is a
 * push onto the slab's local list; an object of any other slab goes into the thread's
 * sheaf of its cache while there is room (uslub_sheaf_free). Neither takes an atomic. The
 * pointer must be an object's start inside its slab - one 64x64-bit multiply by the
 * class's magic tells (Lemire's test; internal.h) - and not already free: every free
 * object carries its mark, whichever list or sheaf it is on (slab.c, section 7). */
static inline void uslub_free_inline(void *p)
{
	struct uslub_thread *t = uslub_tls_thread;
	struct page_desc *s = block_of(p);
	if (likely(s)) {
		if (plain_object_at(s, p)) {
			/* The local list is read only once the slab is known to be ours: its
			 * owner writes it without atomics. Only a slab has an owner, so the
			 * mark is looked at in slab objects only. */
			if (likely(__atomic_load_n(&s->owner, __ATOMIC_RELAXED) == t)) {
				/* The keys are read before the stores into p, which the
				 * compiler cannot tell apart from them. */
				uintptr_t mark = uslub_keys.mark ^ (uintptr_t)p;
				uintptr_t key = link_key(p);
				if (unlikely(((uintptr_t *)p)[1] == mark))
					uslub_double_free(p, s);
				((uintptr_t *)p)[0] = (uintptr_t)s->local_free ^ key;
				((uintptr_t *)p)[1] = mark;
				s->local_free = p;
				s->local_count++;
				uslub_stat(&t->cpu[s->cls], FREE_FASTPATH);
				return;
			}
			uslub_sheaf_free(p, s);
			return;
		}
	}
	uslub_free_slow(p, s);
}

/* Sends the objects in t's sheaves back to their slabs; `final` also closes the sheaves
 * (thread exit). */
void uslub_sheaves_flush(struct uslub_thread *t, bool final);

/* ---- what the slow-path files share (slab.c, alloc.c, free.c, sheaf.c) ---------- */

/* Free pointers: at the object's start in a plain cache; in a debug cache in the slot's
 * metadata, where debug.c decodes and checks them. */
static inline void *get_next(const struct uslub_cache *c, void *object)
{
	if (unlikely(c->debug))
		return uslub_debug_get_next(c, object);
	return link_get(object);
}

static inline void set_next(const struct uslub_cache *c, void *object, void *next)
{
	if (unlikely(c->debug))
		uslub_debug_set_next(c, object, next);
	else
		link_set(object, next);
}

/* The next object on a free list of slab s, checked: a link that does not name an
 * object of s stops the program instead of being followed (walks of lists the fast
 * path does not pop: deactivation, the consistency walker). */
static inline void *get_next_checked(const struct uslub_cache *c, struct page_desc *s, void *object)
{
	void *next = get_next(c, object);
	/* A plain cache answers with the multiply the free fast path uses, not a division:
	 * the refill checks one link per load. */
	if (next && unlikely(c->debug ? uslub_slab_object_start(s, next) != next
				      : !plain_object_at(s, next)))
		uslub_report_corrupt("free pointer outside its slab", c, page_address(s), object);
	return next;
}

/* A free object of a plain cache carries its mark; a debug cache keeps the state in
 * its metadata instead (debug.c). */
static inline void mark_free_plain(const struct uslub_cache *c, void *object)
{
	if (likely(!c->debug))
		mark_free(object);
}

static inline uintptr_t slab_bits(struct page_desc *s)
{
	return (uintptr_t)page_address(s) | (USLUB_PAGE_SHIFT + s->order);
}

static inline unsigned slab_nid(struct page_desc *s)
{
	/* A slab may sit in a region of its node's large-block zone (borrowed pages). */
	return region_of(s)->nid;
}

/* A slab belongs to the node of its region, whichever thread frees into it. */
static inline struct cache_node *node_of_slab(struct uslub_cache *c, struct page_desc *s)
{
	return &c->node[slab_nid(s)];
}

/* Counters of threads without state of their own go straight to the cache, atomically:
 * those are rare and off the fast path. */
static inline void stat_shared(struct uslub_thread *t, unsigned cls, enum uslub_stat_item item)
{
#if USLUB_STATS_ENABLED
	if (likely(t->state == THREAD_LIVE || t->state == THREAD_ORPHAN))
		t->cpu[cls].stat[item]++;
	else
		__atomic_fetch_add(&uslub_caches[cls].stat[item], 1, __ATOMIC_RELAXED);
#else
	(void)t, (void)cls, (void)item;
#endif
}

static inline void add_partial(struct cache_node *n, struct page_desc *s, bool tail)
{
	if (tail)
		cds_list_add_tail(&s->list, &n->partial);
	else
		cds_list_add(&s->list, &n->partial);
	s->flags |= PF_ON_PARTIAL;
	/* Under list_lock, but get_partial_node peeks at it without: an atomic store. */
	__atomic_store_n(&n->nr_partial, n->nr_partial + 1, __ATOMIC_RELAXED);
}

static inline void remove_partial(struct cache_node *n, struct page_desc *s)
{
	cds_list_del(&s->list);
	s->flags &= (uint8_t)~PF_ON_PARTIAL;
	__atomic_store_n(&n->nr_partial, n->nr_partial - 1, __ATOMIC_RELAXED);
}

/* A free by the slab's owner: onto its local list, no atomic (the fast path inlines the
 * same for plain caches). */
static inline void push_local(const struct uslub_cache *c, struct page_desc *s, void *p)
{
	set_next(c, p, s->local_free);
	mark_free_plain(c, p);
	s->local_free = p;
	s->local_count++;
}

struct page_desc *uslub_new_slab(struct uslub_cache *c, struct uslub_thread *t,
				 struct cache_cpu *cc, void **fl);
void uslub_discard_slab(struct uslub_cache *c, struct page_desc *s, struct uslub_thread *t);
void uslub_deactivate_slab(struct uslub_cache *c, struct page_desc *s, void *fl,
			   struct uslub_thread *t);
void uslub_unfreeze_partials(struct uslub_cache *c, struct cache_cpu *cc, struct uslub_thread *t);
void uslub_put_cpu_partial(struct uslub_cache *c, struct page_desc *s, struct uslub_thread *t);
struct page_desc *uslub_get_partial(struct uslub_cache *c, struct uslub_thread *t,
				    struct cache_cpu *cc, void **fl);
void uslub_slab_free_remote(struct uslub_cache *c, struct page_desc *s, void *p,
			    struct uslub_thread *t);
void uslub_sheaf_return(struct uslub_cache *c, struct page_desc *s, struct uslub_thread *t);

#endif
