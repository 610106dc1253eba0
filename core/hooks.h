/* The hooks: how a lower layer reaches the observers above it (debug, stats, replenish)
 * without naming them. The kernel's page allocator does not call SLUB, nor SLUB its
 * debugger: they call what was registered with them (shrinkers, notifier chains). Here
 * one table holds every such call; each entry starts as a no-op, and an observer's init
 * function (run by api/startup.c before the first allocation) installs its own. Every
 * entry is called on a slow path only: a debug cache takes the slow path for every
 * operation, and the plain caches never reach the debug entries. */
#ifndef USLUB_HOOKS_H
#define USLUB_HOOKS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

struct uslub_cache;
struct page_desc;

struct uslub_hooks {
	/* ---- debug caches (USLUB_DEBUG, debug/) ---- */
	/* A free pointer of a debug cache written into a free object. */
	void (*set_next)(const struct uslub_cache *c, void *object, void *next);
	/* ... and read back from one, decoded and checked. */
	void *(*get_next)(const struct uslub_cache *c, void *object);
	/* A debug cache's new slab: every object set up, then the slab made ready. */
	void (*init_object)(const struct uslub_cache *c, void *object);
	void (*slab_ready)(const struct uslub_cache *c, struct page_desc *s);
	/* A debug cache's slab going back to the page allocator. */
	void (*slab_discard)(const struct uslub_cache *c, struct page_desc *s);
	/* An object of a debug cache leaving for the program (`size` bytes asked for), and
	 * one coming back; `caller` is the program's call site. True from object_free: the
	 * observer keeps the object (a quarantine) and frees it later itself. */
	void (*object_alloc)(struct uslub_cache *c, struct page_desc *s, void *object, size_t size,
			     void *caller);
	bool (*object_free)(struct uslub_cache *c, struct page_desc *s, void *object, void *caller);
	/* What a debug cache can add to a report of a bad pointer p into `object`. */
	void (*object_report)(const struct uslub_cache *c, struct page_desc *s, void *object,
			      const char *what, const void *p);
	/* ---- large and huge blocks under a checker (debug/) ---- */
	/* A block of `size` bytes asked for at p, in `span` bytes of pages from p, with `lead`
	 * bytes of red zone before p (a page, or 0; a huge block's keeps its lead when mremap
	 * moves it). block_free is given the large block's
	 * descriptor (NULL: a huge block): true when the observer keeps the block (the
	 * quarantine) and hands it back later itself (uslub_large_release). */
	void (*block_alloc)(void *p, size_t size, size_t span, size_t lead, bool zeroed);
	void (*block_check)(void *p, size_t size, size_t span, size_t lead, const char *op);
	bool (*block_free)(void *p, size_t size, size_t span, size_t lead, struct page_desc *d);
	void (*block_resize)(void *p, void *q, size_t old, size_t old_span, size_t size,
			     size_t span, size_t lead);
	/* ---- the background thread (replenish/) ---- */
	/* Start the thread if one is due: called at safe points, with no lock held. */
	void (*background_start)(void);
	/* A high-order try failed: wake the thread if it sleeps. */
	void (*background_kick)(void);
	/* Pages went free and `warm_bytes` of warm free memory are in their zone. */
	void (*background_note)(uint64_t warm_bytes);
	/* ---- NUMA discovery (page/node.c) ---- */
	/* Nodes [from, to) are coming online: the caches set up their rows for them (slab/)
	 * before the node count that lets other threads search them is published. */
	void (*nodes_online)(unsigned from, unsigned to);
	/* ---- memory pressure (page/huge.c) ---- */
	/* Address space is short (RLIMIT_AS): the caches above the page allocator give back
	 * what they hold unused (the kernel's shrinkers); true if any was. Called with no lock
	 * held, by a thread in none of its caches. */
	bool (*shrink)(void);
	/* The live set collapsed (bound.c): the blocks held apart from the zones for
	 * other threads (slab/medium.c's depots) go back to them, to be shed with the rest.
	 * Called with no zone's lock held, possibly from inside a thread's caches. */
	void (*release_held)(void);
	/* ---- RCU (api/objcache.c) ---- */
	/* Slabs of TYPESAFE_BY_RCU caches wait for a grace period: hand them to the
	 * program's call_rcu. Called at safe points while uslub_rcu_pending is set. */
	void (*rcu_flush)(void);
};

extern struct uslub_hooks uslub_hooks;

/* The checkers that watch large and huge blocks, set by debug/ at start-up: DBG_VALGRIND
 * under memcheck, DBG_ASAN in an ASan build, DBG_REDZONE with USLUB_DEBUG=Z for every
 * cache (no cache list). 0 in a plain run, where the large and huge paths call none of
 * the block hooks. A block is `size` bytes asked for at the start of `span` bytes of
 * pages; with Z the rest of the span is red zone. */
extern unsigned uslub_block_debug;
/* With Z or P for every cache, the red zone width W (USLUB_REDZONE) a large block is laid
 * out with (slab/large.c): a page before it and at least W bytes after its request, so the
 * checks and the sweep (debug/) see a miss on either side and a freed block's poison. 0
 * otherwise: large blocks have no room of their own. Set by debug/ at start-up. */
extern unsigned uslub_block_pad;

/* Nonzero when an observer has work to start at the next safe point: the background
 * thread, due at start-up and in a forked child (replenish/), which must not be created
 * while the allocator holds a lock. */
extern _Atomic int uslub_hooks_pending;
/* Nonzero when slabs of a TYPESAFE_BY_RCU cache wait to be handed to call_rcu, which may
 * allocate and so runs at a safe point (slab/objcache.c sets it, api/objcache.c clears it). */
extern _Atomic int uslub_rcu_pending;

/* A safe point: no allocator lock held, so a nested malloc (pthread_create's) is
 * harmless. The allocation and free slow paths pass here - a free through
 * uslub_safe_point_free, with its caller: glibc's loader frees a finished thread's TLS
 * (_dl_deallocate_tls) while libc holds dl_stack_cache_lock, which pthread_create and
 * call_rcu's first thread take, and a free that started the background thread there
 * waited on that lock for good (parked_threads hung in 1 run of 6). */
static inline void uslub_safe_point(void)
{
	if (__builtin_expect(atomic_load_explicit(&uslub_hooks_pending, memory_order_relaxed), 0))
		uslub_hooks.background_start();
	if (__builtin_expect(atomic_load_explicit(&uslub_rcu_pending, memory_order_relaxed), 0))
		uslub_hooks.rcu_flush();
}
bool uslub_os_in_ldso(const void *addr);
static inline void uslub_safe_point_free(const void *caller)
{
	if (__builtin_expect(atomic_load_explicit(&uslub_hooks_pending, memory_order_relaxed) |
				 atomic_load_explicit(&uslub_rcu_pending, memory_order_relaxed),
			     0) &&
	    !uslub_os_in_ldso(caller))
		uslub_safe_point();
}

#pragma GCC visibility pop

#endif
