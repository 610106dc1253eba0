/* Object caches (uslub.h): the kernel's kmem_cache_create ... kmem_cache_destroy for a
 * program's own objects. The caches themselves - merging, slots, the layout that keeps a
 * constructed object intact - are the slab layer's (slab/objcache.c); here are the entry
 * points: the allocation takes the thread's sheaf of the cache as malloc's fast path does,
 * the free checks that the object is the cache's before the classification every free
 * takes (api.h), and a cache's end reports the objects the program still holds. */
#include "api/api.h"

#include "debug/debug.h"
#include "os/options.h"
#include "os/print.h"
#include "stats/stats.h"

#include <errno.h>
#include <stdlib.h>

/* The largest object: a slab of the highest order still holds a few. */
#define OBJCACHE_MAX_SIZE (64UL << 10)
#define CACHE_FLAGS                                                                                \
	(USLUB_CACHE_HWCACHE_ALIGN | USLUB_CACHE_TYPESAFE_BY_RCU | USLUB_CACHE_NO_MERGE |          \
	 USLUB_CACHE_POISON | USLUB_CACHE_RED_ZONE | USLUB_CACHE_STORE_USER |                      \
	 USLUB_CACHE_CONSISTENCY_CHECKS)

/* A cache's own debug flags as USLUB_DEBUG's letters. */
static unsigned debug_letters(unsigned flags)
{
	return (flags & USLUB_CACHE_POISON ? USLUB_DEBUG_P : 0) |
	       (flags & USLUB_CACHE_RED_ZONE ? USLUB_DEBUG_Z : 0) |
	       (flags & USLUB_CACHE_STORE_USER ? USLUB_DEBUG_U : 0) |
	       (flags & USLUB_CACHE_CONSISTENCY_CHECKS ? USLUB_DEBUG_F : 0);
}

struct uslub_cache *uslub_cache_create(const char *name, size_t size, size_t align, unsigned flags,
				       void (*ctor)(void *obj))
{
	if (!name || !size || size > OBJCACHE_MAX_SIZE || (align & (align - 1)) ||
	    align > USLUB_PAGE_SIZE || (flags & ~CACHE_FLAGS)) {
		errno = EINVAL;
		return NULL;
	}
	uslub_init();
	bool typed = ctor || (flags & USLUB_CACHE_TYPESAFE_BY_RCU);
	unsigned debug = uslub_debug_cache_flags(name, debug_letters(flags), typed);
	return uslub_objcache_make(name, size, align, flags, ctor, debug, uslub_debug_cache_layout);
}

/* The engine's object of cache c (its slot's start for a plain cache). */
static inline void *cache_alloc(struct uslub_cache *c, size_t size)
{
	struct cache_cpu *cc = &uslub_tls_thread->cpu[c->cls];
	size_t n;
	if (likely(!__builtin_sub_overflow((size_t)cc->sheaf_count, 1, &n))) {
		void *object = cc->sheaf[n];
		cc->sheaf_count = (uint16_t)n;
		mark_allocated(object);
		uslub_stat(cc, ALLOC_FASTPATH);
		return object;
	}
	return uslub_slab_alloc_class(c->cls, size);
}

void *uslub_cache_alloc(struct uslub_cache *h)
{
	struct uslub_cache *c = &uslub_caches[h->cls];
	char *object = cache_alloc(c, c->user_off + h->user_size);
	return object ? object + c->user_off : NULL;
}

__attribute__((noreturn)) static void wrong_cache(const struct uslub_cache *h, const void *obj,
						  const struct uslub_cache *owner)
{
	uslub_message("uslub: uslub_cache_free(): object %p of cache %s freed to cache %s\n", obj,
		      owner->name, h->name);
	abort();
}

void uslub_cache_free(struct uslub_cache *h, void *obj)
{
	if (!obj)
		return;
	struct uslub_cache *c = &uslub_caches[h->cls];
	char *p = (char *)obj - c->user_off;
	/* The fast path: obj's page says it is a slab of this cache (its test names the
	 * cache's cache_cpu), and it is not marked free; free's own fast path does the rest,
	 * its object test included. */
	uintptr_t i = (uintptr_t)obj >> REGION_SHIFT;
	if (likely(i < REGION_SLOTS) &&
	    likely(page_test_in_table(i, obj)->cpu_off == CPU_OFF(h->cls)) && likely(!c->debug) &&
	    likely(!is_marked_free(p))) {
		uslub_free_inline(p);
		return;
	}
	struct page_desc *d = block_of(obj);
	if (d && d->kind == PAGE_SLAB && d->cls != h->cls)
		wrong_cache(h, obj, &uslub_caches[d->cls]);
	if (!d || d->kind != PAGE_SLAB)
		uslub_report_bad_free("invalid pointer", "uslub_cache_free", obj, NULL, NULL);
	/* Named by the program's pointer, not the slot's. */
	if (!c->debug && plain_object_at(d, p) && is_marked_free(p))
		uslub_report_bad_free("double free", "uslub_cache_free", obj, c, d);
	struct uslub_ptr ptr;
	uslub_classify(p, d, "uslub_cache_free", 0, &ptr);
	uslub_free_ptr(p, &ptr, "uslub_cache_free", __builtin_return_address(0));
}

size_t uslub_cache_alloc_bulk(struct uslub_cache *h, size_t n, void **objs)
{
	for (size_t i = 0; i < n; i++) {
		objs[i] = uslub_cache_alloc(h);
		if (unlikely(!objs[i])) {
			/* All or nothing, as kmem_cache_alloc_bulk. */
			uslub_cache_free_bulk(h, i, objs);
			errno = ENOMEM;
			return 0;
		}
	}
	return n;
}

void uslub_cache_free_bulk(struct uslub_cache *h, size_t n, void **objs)
{
	for (size_t i = 0; i < n; i++)
		uslub_cache_free(h, objs[i]);
}

/* ---- shrink and destroy --------------------------------------------------------- */

/* The calling thread's sheaf and slabs of c back to the node lists. */
static void flush_own(struct uslub_cache *c)
{
	struct uslub_thread *t = uslub_tls_thread;
	if (t->state != THREAD_LIVE)
		return;
	struct cache_cpu *cc = &t->cpu[c->cls];
	bool in = uslub_slow_enter(t);
	if (cc->sheaf_count) {
		uslub_flush_objects(c, t, cc->sheaf, cc->sheaf_count);
		uslub_stat_add(cc, SHEAF_FLUSH, cc->sheaf_count);
		sheaf_set_count(cc, 0);
	}
	uslub_thread_flush_cache_slabs(t, c->cls);
	uslub_slow_exit(t, in);
}

/* kmem_cache_shrink: the empty slabs of the node lists go back (a node keeps
 * min_partial of them otherwise). A slab on a node list is no thread's, and with no
 * object in use no thread can free into it. */
static void shrink_nodes(struct uslub_cache *c)
{
	struct uslub_thread *t = uslub_tls_thread;
	for (unsigned nid = 0; nid < uslub_nr_nodes; nid++) {
		struct cache_node *n = cache_node_of(c, nid);
		struct page_desc *s, *tmp, *empty = NULL;
		uslub_lock(&n->list_lock, USLUB_LOCK_LIST);
		cds_list_for_each_entry_safe(s, tmp, &n->partial, list)
		{
			if (w_inuse(atomic_load_explicit(&s->word, memory_order_acquire)))
				continue;
			remove_partial(n, s);
			s->next = empty;
			empty = s;
		}
		pthread_mutex_unlock(&n->list_lock);
		while ((s = empty)) {
			empty = s->next;
			s->next = NULL;
			uslub_discard_slab(c, s, t);
		}
	}
}

int uslub_cache_shrink(struct uslub_cache *h)
{
	struct uslub_cache *c = &uslub_caches[h->cls];
	flush_own(c);
	shrink_nodes(c);
	uslub_safe_point();
	return 0;
}

size_t uslub_cache_destroy(struct uslub_cache *h)
{
	if (!h)
		return 0;
	struct uslub_cache *c = &uslub_caches[h->cls];
	/* A merged cache lives on for the others (the kernel's refcount). */
	if (uslub_objcache_is_alias(h) || atomic_load(&c->aliases)) {
		uslub_objcache_release(h);
		return 0;
	}
	uslub_cache_shrink(h);
	uint64_t live = uslub_stats_active_objects(c->cls);
	if (live) {
		/* As the kernel's "Objects remaining on __kmem_cache_shutdown()": the
		 * objects stay the program's, so the slabs stay too. */
		uslub_message("uslub: uslub_cache_destroy(%s): %lu objects still allocated, left "
			      "alone\n",
			      c->name, (unsigned long)live);
	}
	uslub_objcache_release(h);
	if (c->uflags & USLUB_CACHE_TYPESAFE_BY_RCU)
		uslub_rcu_barrier();
	return live;
}
