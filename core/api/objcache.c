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

/* The slow paths of the pair, out of line so the fast paths below stay a few
 * instructions: an empty sheaf, a debug cache, or a thread without state. */
static noinline void *cache_alloc_slow_at(struct uslub_cache *h, void *caller)
{
	struct uslub_cache *c = &uslub_caches[h->cls];
	char *object = uslub_slab_alloc_class_at(c->cls, c->user_off + h->user_size, caller);
	return object ? object + c->user_off : NULL;
}

/* The fast paths below reach the slow ones by tail calls (as malloc's reach
 * uslub_slab_alloc_class), so the return address is the program's call site, what
 * USLUB_DEBUG=U records, read only here, off the fast path. */
static noinline void *cache_alloc_slow(struct uslub_cache *h)
{
	return cache_alloc_slow_at(h, __builtin_return_address(0));
}

/* The allocation: the top of the thread's sheaf of the cache, as malloc's fast path pops
 * its class's (api.h), the cache_cpu found from the handle instead of a size. A handle
 * merged into another cache has the other's slot and no offset (only plain caches
 * merge). */
static inline __attribute__((always_inline)) void *cache_alloc(struct uslub_cache *h)
{
	struct cache_cpu *cc = (struct cache_cpu *)((char *)uslub_tls_thread + h->cpu_off);
	/* Out of the result's register, as in malloc's (api.h): the object is loaded
	 * straight into it, and the offset added there. */
	KEEP_IN("d", cc);
	size_t n;
	if (likely(!__builtin_sub_overflow((size_t)cc->sheaf_count, 1, &n))) {
		KEEP_IN("c", n);
		char *object = cc->sheaf[n];
		uslub_own_store(cc->sheaf_count, (uint16_t)n);
		mark_allocated(object);
		uslub_stat(cc, ALLOC_FASTPATH);
		return object + h->user_off;
	}
	return cache_alloc_slow(h);
}

void *uslub_cache_alloc(struct uslub_cache *h)
{
	return cache_alloc(h);
}

__attribute__((noreturn)) static void wrong_cache(const struct uslub_cache *h, const void *obj,
						  const struct uslub_cache *owner)
{
	uslub_message("uslub: uslub_cache_free(): object %p of cache %s freed to cache %s\n", obj,
		      owner->name, h->name);
	abort();
}

/* Every free the fast path leaves, p being the engine's object (obj - user_off): NULL,
 * an object of another cache or of none, a double free (reported with the program's
 * pointer), a debug cache, a closed sheaf. */
static noinline void cache_free_slow_at(struct uslub_cache *h, char *p, void *caller)
{
	void *obj = p + h->user_off;
	if (!obj)
		return;
	struct uslub_cache *c = &uslub_caches[h->cls];
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
	uslub_free_ptr(p, &ptr, "uslub_cache_free", caller);
}

static noinline void cache_free_slow(struct uslub_cache *h, char *p)
{
	cache_free_slow_at(h, p, __builtin_return_address(0));
}

/* The free: free's fast path (api.h) with the cache known. The test of obj's page says
 * whose slab it is: its cache_cpu offset is the cache's own, or the object is another
 * cache's (or none's: no page of a slab has the offset of a cache with no slab of it),
 * which the slow path reports. Then one multiply tells an object's start, by the magic
 * of the thread's open sheaf (0 when closed, and for a debug cache), and the free mark a
 * second free. Only the engine's pointer p lives on: the slow path takes it. */
static inline __attribute__((always_inline)) void cache_free(struct uslub_cache *h, void *obj)
{
	char *p = (char *)obj - h->user_off;
	uintptr_t i = (uintptr_t)obj >> REGION_SHIFT;
	if (likely(i < REGION_SLOTS)) {
		const struct page_test *e = page_test_in_table(i, obj);
		uintptr_t cpu_off = e->cpu_off;
		/* Loaded where it is added to, not copied there (GCC 12). */
		KEEP_IN("c", cpu_off);
		if (likely(cpu_off == h->cpu_off)) {
			struct cache_cpu *cc =
			    (struct cache_cpu *)((uintptr_t)uslub_tls_thread + cpu_off);
			uint32_t off = (uint32_t)(uintptr_t)p - e->start;
			uint64_t magic = cc->magic;
			unsigned __int128 m = (unsigned __int128)off * magic;
			if (likely((uint64_t)m < magic) &&
			    likely((uint16_t)(m >> 64) < objects_of(e))) {
				uintptr_t mark = uslub_keys.mark ^ (uintptr_t)p;
				size_t n = cc->sheaf_count;
				if (likely(((uintptr_t *)p)[1] != mark)) {
					if (likely(n < cc->sheaf_cap)) {
						((uintptr_t *)p)[1] = mark;
						cc->sheaf[n] = p;
						/* As in free's fast path (api.h). */
						__asm__("" : "+r"(n));
						uslub_own_store(cc->sheaf_count, (uint16_t)(n + 1));
						return;
					}
					uslub_sheaf_overflow(p, cc);
					return;
				}
			}
		}
	}
	cache_free_slow(h, p);
}

void uslub_cache_free(struct uslub_cache *h, void *obj)
{
	cache_free(h, obj);
}

/* kmem_cache_alloc_bulk: the objects come off the thread's sheaf in one pass, a run at a
 * time; when it runs empty, one slow-path allocation refills it (from the barn, the
 * thread's slabs or a new slab) and the next run follows. All or nothing: a request the
 * memory cap cannot meet gives back what it took. */
size_t uslub_cache_alloc_bulk(struct uslub_cache *h, size_t n, void **objs)
{
	uintptr_t user_off = h->user_off;
	size_t got = 0;
	while (got < n) {
		struct cache_cpu *cc = (struct cache_cpu *)((char *)uslub_tls_thread + h->cpu_off);
		size_t have = cc->sheaf_count;
		size_t take = n - got < have ? n - got : have;
		for (size_t k = 0; k < take; k++) {
			char *object = cc->sheaf[have - 1 - k];
			mark_allocated(object);
			objs[got + k] = object + user_off;
		}
		uslub_own_store(cc->sheaf_count, (uint16_t)(have - take));
		uslub_stat_add(cc, ALLOC_FASTPATH, take);
		got += take;
		if (got == n)
			break;
		objs[got] = cache_alloc_slow_at(h, __builtin_return_address(0));
		if (unlikely(!objs[got])) {
			uslub_cache_free_bulk(h, got, objs);
			errno = ENOMEM;
			return 0;
		}
		got++;
	}
	return n;
}

/* kmem_cache_free_bulk: each object tested as the fast free tests it (the cache's slab,
 * an object's start, not free), pushed onto the sheaf with the thread's cache_cpu, its
 * magic and the mark's key read once. At a full sheaf the next object takes the single
 * free (its checks, then the spill); an object that fails a test takes the single free's
 * slow path (a report, a debug cache's free, a sheaf to open), and the pass goes on. */
void uslub_cache_free_bulk(struct uslub_cache *h, size_t n, void **objs)
{
	uintptr_t cpu_off = h->cpu_off, user_off = h->user_off;
	size_t k = 0;
	while (k < n) {
		struct cache_cpu *cc = (struct cache_cpu *)((uintptr_t)uslub_tls_thread + cpu_off);
		uint64_t magic = cc->magic;
		uintptr_t key = uslub_keys.mark;
		size_t count = cc->sheaf_count, cap = cc->sheaf_cap;
		bool failed = false;
		for (; k < n && count < cap; k++) {
			char *p = (char *)objs[k] - user_off;
			uintptr_t i = (uintptr_t)objs[k] >> REGION_SHIFT;
			if (unlikely(i >= REGION_SLOTS)) {
				failed = true;
				break;
			}
			const struct page_test *e = page_test_in_table(i, objs[k]);
			uint32_t off = (uint32_t)(uintptr_t)p - e->start;
			unsigned __int128 m = (unsigned __int128)off * magic;
			if (unlikely(e->cpu_off != cpu_off) || unlikely((uint64_t)m >= magic) ||
			    unlikely((uint16_t)(m >> 64) >= objects_of(e)) ||
			    unlikely(((uintptr_t *)p)[1] == (key ^ (uintptr_t)p))) {
				failed = true;
				break;
			}
			((uintptr_t *)p)[1] = key ^ (uintptr_t)p;
			cc->sheaf[count++] = p;
		}
		uslub_own_store(cc->sheaf_count, (uint16_t)count);
		if (k == n)
			break;
		if (failed || !cap)
			cache_free_slow_at(h, (char *)objs[k] - user_off,
					   __builtin_return_address(0));
		else /* the sheaf is full: the single free checks the object, then spills */
			cache_free(h, objs[k]);
		k++;
	}
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
	uslub_barns_flush_cache(c);
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
		uslub_debug_report_leaks(c);
	}
	uslub_objcache_release(h);
	if (c->uflags & USLUB_CACHE_TYPESAFE_BY_RCU)
		uslub_rcu_barrier();
	return live;
}
