/* Object caches: the caches programs make for their own objects (uslub_cache_create,
 * api/objcache.c), on the engine of the kmalloc caches. A cache either merges into a
 * compatible one - a kmalloc cache or another object cache of the same object size, as
 * SLUB's find_mergeable does - and gets a handle of its own (an alias, so the statistics
 * show its name), or takes the next free slot of uslub_caches, past the kmalloc caches,
 * with its own slabs, sheaves and partial lists. Slots are never reused: a destroyed
 * cache's objects may still sit in other threads' sheaves, which only their threads
 * touch.
 *
 * A cache with a constructor or TYPESAFE_BY_RCU puts `user_off` bytes in front of each
 * object (types.h): the engine's free pointer and free mark live there, so the object
 * keeps its constructed state, and a reader under RCU sees an object of the cache's type,
 * never a free pointer, while the object is free.
 *
 * Slabs of a TYPESAFE_BY_RCU cache that empty wait here for a grace period (the kernel's
 * rcu_free_slab): uslub_discard_slab pushes them, and api/objcache.c hands them to the
 * program's call_rcu at the next safe point, where a nested malloc (call_rcu's first one
 * makes liburcu's worker thread) is harmless. */
#include "os/options.h"
#include "slab/slab.h"

#include <errno.h>
#include <string.h>

/* Handles of caches merged into another (SLUB's aliases), a fixed table: a handle's `cls`
 * is the cache it shares. */
#define MAX_ALIASES 128

static pthread_mutex_t objcache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct uslub_cache aliases[MAX_ALIASES];
static bool alias_used[MAX_ALIASES];

struct uslub_rcu_stats uslub_rcu_stats;
static struct page_desc *_Atomic rcu_slabs;

/* What keeps a cache from sharing: the kernel's SLAB_NEVER_MERGE (RCU, debugging) and
 * NO_MERGE. */
#define NEVER_MERGE                                                                                \
	(USLUB_CACHE_TYPESAFE_BY_RCU | USLUB_CACHE_NO_MERGE | USLUB_CACHE_POISON |                 \
	 USLUB_CACHE_RED_ZONE | USLUB_CACHE_STORE_USER | USLUB_CACHE_CONSISTENCY_CHECKS)

static bool may_merge(const struct uslub_cache *c)
{
	return !c->debug && !c->ctor && !(c->uflags & NEVER_MERGE) && !c->dead;
}

/* A live cache whose objects are `size` bytes: a kmalloc cache first, as the kernel
 * finds them first in its list. Objects of a cache of that size lie `size` apart in
 * page-aligned slabs, so they have the alignment the size was rounded to. */
static struct uslub_cache *find_mergeable(uint32_t size)
{
	unsigned n = uslub_caches_in_use();
	for (unsigned i = 0; i < n; i++) {
		struct uslub_cache *c = &uslub_caches[i];
		if (c->size == size && may_merge(c))
			return c;
	}
	return NULL;
}

static struct uslub_cache *make_alias(struct uslub_cache *target, const char *name, uint32_t size,
				      uint32_t align, unsigned flags)
{
	for (unsigned i = 0; i < MAX_ALIASES; i++) {
		if (alias_used[i])
			continue;
		struct uslub_cache *a = &aliases[i];
		memset(a, 0, sizeof(*a));
		strncpy(a->name, name, sizeof(a->name) - 1);
		a->cls = target->cls;
		a->cpu_off = target->cpu_off;
		a->size = target->size;
		a->user_size = size;
		a->user_align = align;
		a->uflags = flags;
		a->alias_of = target;
		alias_used[i] = true;
		atomic_fetch_add(&target->aliases, 1);
		return a;
	}
	return NULL;
}

struct uslub_cache *uslub_objcache_make(const char *name, size_t size, size_t align, unsigned flags,
					void (*ctor)(void *), unsigned debug,
					void (*setup)(struct uslub_cache *c))
{
	size_t a = align < 16 ? 16 : align;
	if (flags & USLUB_CACHE_HWCACHE_ALIGN && a < 64)
		a = 64;
	/* The free pointer and mark go in front of a constructed or RCU-typed object, in
	 * a whole alignment unit so the object keeps its alignment. */
	size_t off = ctor || (flags & USLUB_CACHE_TYPESAFE_BY_RCU) ? a : 0;
	size_t bytes = off + ((size + a - 1) & ~(a - 1));
	uslub_lock(&objcache_lock, USLUB_LOCK_REGISTRY);
	struct uslub_cache *c = NULL;
	bool merge = uslub_config.merge && !debug && !ctor && !(flags & NEVER_MERGE);
	struct uslub_cache *target = merge ? find_mergeable((uint32_t)bytes) : NULL;
	if (target) {
		c = make_alias(target, name, (uint32_t)size, (uint32_t)a, flags);
	} else {
		unsigned cls = atomic_load_explicit(&uslub_nr_caches, memory_order_relaxed);
		if (cls < USLUB_NR_CACHES) {
			c = &uslub_caches[cls];
			c->cls = cls;
			memset(c->name, 0, sizeof(c->name));
			strncpy(c->name, name, sizeof(c->name) - 1);
			c->size = c->stride = (uint32_t)bytes;
			c->offset = 0;
			c->tail = 0;
			c->user_off = (uint32_t)off;
			c->user_size = (uint32_t)size;
			c->user_align = (uint32_t)a;
			c->uflags = flags;
			c->ctor = ctor;
			c->debug = debug;
			if (setup)
				setup(c);
			uslub_cache_setup(c);
			/* The slot, its magic and its carve step before any thread can see
			 * the count that names it. */
			atomic_store_explicit(&uslub_nr_caches, cls + 1, memory_order_release);
		}
	}
	pthread_mutex_unlock(&objcache_lock);
	if (!c)
		errno = ENOSPC;
	return c;
}

/* A handle going away. An alias leaves its cache; a cache of its own stops being shown
 * once it has no aliases either, and nothing merges into it again. */
void uslub_objcache_release(struct uslub_cache *c)
{
	uslub_lock(&objcache_lock, USLUB_LOCK_REGISTRY);
	if (c->alias_of) {
		atomic_fetch_sub(&c->alias_of->aliases, 1);
		alias_used[c - aliases] = false;
	} else {
		atomic_store(&c->dead, 1);
	}
	pthread_mutex_unlock(&objcache_lock);
}

void uslub_objcache_aliases(const struct uslub_cache *c,
			    void (*fn)(const struct uslub_cache *alias, void *arg), void *arg)
{
	if (!atomic_load_explicit(&c->aliases, memory_order_relaxed))
		return;
	for (unsigned i = 0; i < MAX_ALIASES; i++)
		if (__atomic_load_n(&alias_used[i], __ATOMIC_ACQUIRE) && aliases[i].alias_of == c)
			fn(&aliases[i], arg);
}

bool uslub_objcache_is_alias(const struct uslub_cache *c)
{
	return c >= aliases && c < aliases + MAX_ALIASES;
}

/* ---- slabs waiting for a grace period ------------------------------------------- */

void uslub_rcu_defer_slab(struct page_desc *s)
{
	struct page_desc *old = atomic_load_explicit(&rcu_slabs, memory_order_relaxed);
	do
		s->next = old;
	while (!atomic_compare_exchange_weak_explicit(&rcu_slabs, &old, s, memory_order_release,
						      memory_order_relaxed));
	atomic_fetch_add_explicit(&uslub_rcu_stats.pending_slabs, 1, memory_order_relaxed);
	atomic_store_explicit(&uslub_rcu_pending, 1, memory_order_relaxed);
}

struct page_desc *uslub_rcu_take_slabs(void)
{
	return atomic_exchange_explicit(&rcu_slabs, NULL, memory_order_acquire);
}
