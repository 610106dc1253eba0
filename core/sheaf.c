/* Sheaves: per thread and cache, objects of slabs the thread does not hold, freed by it
 * and kept for its next allocations (slab.c, section 6). */
#include "internal.h"
#include "slab.h"

/* The thread's freelist of this cache is empty: the last object put in its sheaf, else
 * the slow path. */
void *uslub_sheaf_alloc(struct cache_cpu *cc, size_t size)
{
	unsigned n = cc->sheaf_count;
	if (likely(n)) {
		void *object = cc->sheaf[n - 1];
		cc->sheaf_count = (uint16_t)(n - 1);
		mark_allocated(object);
		uslub_stat(cc, ALLOC_FASTPATH);
		uslub_stat(cc, ALLOC_SHEAF);
		return object;
	}
	return uslub_slab_alloc_slow(size);
}

/* p is an object's start in slab s (the fast path checked), which this thread does not
 * hold, or p is its local list's head. Into the sheaf if there is room and p is not in the
 * page of the object put there last (two frees into one page in a row go the SLUB way,
 * freezing the slab: see sheaf_return), else the slow path. */
void uslub_sheaf_free(void *p, struct page_desc *s)
{
	struct uslub_thread *t = uslub_tls_thread;
	/* A large block's descriptor may carry an old class: kind decides. */
	if (likely(__atomic_load_n(&s->kind, __ATOMIC_RELAXED) == PAGE_SLAB) &&
	    likely(__atomic_load_n(&s->owner, __ATOMIC_RELAXED) != t)) {
		struct cache_cpu *cc = &t->cpu[s->cls];
		unsigned n = cc->sheaf_count;
		if (unlikely(is_marked_free(p)))
			uslub_double_free(p, s);
		if (likely(n < cc->sheaf_cap) &&
		    likely(!n || ((uintptr_t)cc->sheaf[n - 1] ^ (uintptr_t)p) >= USLUB_PAGE_SIZE)) {
			mark_free(p);
			cc->sheaf[n] = p;
			cc->sheaf_count = (uint16_t)(n + 1);
			uslub_stat(cc, FREE_FASTPATH);
			uslub_stat(cc, FREE_SHEAF);
			return;
		}
	}
	uslub_free_slow(p, s);
}

/* A slab this thread just froze takes back its objects at the top of the thread's sheaf,
 * as plain local frees. A thread freeing its own objects in order sends the first of a
 * slab into the sheaf and the next one here (the free fast path keeps two objects of one
 * page out of the sheaf); without this, the slab would be short of that object when its
 * partial list drains it, and every later free into it would take the compare-and-swap
 * path. Only the top is looked at: that is where such objects are, and it costs no walk. */
void uslub_sheaf_return(struct uslub_cache *c, struct page_desc *s, struct uslub_thread *t)
{
	struct cache_cpu *cc = &t->cpu[c->cls];
	uintptr_t base = (uintptr_t)page_address(s), bytes = USLUB_PAGE_SIZE << s->order;
	unsigned n = cc->sheaf_count;
	while (n && (uintptr_t)cc->sheaf[n - 1] - base < bytes) {
		void *p = cc->sheaf[--n];
		push_local(c, s, p);
		uslub_stat(cc, SHEAF_FLUSH);
	}
	cc->sheaf_count = (uint16_t)n;
}

/* The objects were counted as freed when they went into the sheaf, so sending them on
 * counts nothing again. */
void uslub_sheaves_flush(struct uslub_thread *t, bool final)
{
	for (unsigned i = 0; i < USLUB_NR_CLASSES; i++) {
		struct cache_cpu *cc = &t->cpu[i];
		struct uslub_cache *c = &uslub_caches[i];
		if (final)
			cc->sheaf_cap = 0;
		while (cc->sheaf_count) {
			void *p = cc->sheaf[--cc->sheaf_count];
			struct page_desc *s = block_of(p);
			uslub_stat(cc, SHEAF_FLUSH);
			if (__atomic_load_n(&s->owner, __ATOMIC_RELAXED) == t) {
				push_local(c, s, p);
			} else {
				uslub_slab_free_remote(c, s, p, t);
				uslub_stat_add(cc, FREE_SLOWPATH, (uint64_t)-1);
			}
		}
	}
}
