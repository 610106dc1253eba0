/* uslub: the Linux kernel's SLUB allocator in user space.
 *
 * Programs pick it up with LD_PRELOAD=libuslub.so and call the usual malloc family. This
 * header is for programs that link it instead: the same operations under the uslub_
 * prefix, so they can sit beside another malloc, plus the statistics calls. */
#ifndef USLUB_H
#define USLUB_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define USLUB_API __attribute__((visibility("default")))
#else
#define USLUB_API
#endif

USLUB_API void *uslub_malloc(size_t size);
USLUB_API void uslub_free(void *ptr);
USLUB_API void *uslub_calloc(size_t nmemb, size_t size);
USLUB_API void *uslub_realloc(void *ptr, size_t size);
USLUB_API void *uslub_reallocarray(void *ptr, size_t nmemb, size_t size);
USLUB_API int uslub_posix_memalign(void **out, size_t alignment, size_t size);
USLUB_API void *uslub_aligned_alloc(size_t alignment, size_t size);
USLUB_API void *uslub_memalign(size_t alignment, size_t size);
USLUB_API void *uslub_valloc(size_t size);
USLUB_API void *uslub_pvalloc(size_t size);
USLUB_API size_t uslub_malloc_usable_size(const void *ptr);
/* Returns 1 when memory was handed back to the OS, 0 otherwise (glibc's convention). */
USLUB_API int uslub_malloc_trim(size_t pad);

/* Process-wide figures, in bytes. */
struct uslub_totals {
	uint64_t mapped; /* taken from the OS and not returned */
	uint64_t peak_mapped;
	uint64_t in_use; /* handed to the program: slab objects and large blocks */
	uint64_t peak_in_use;
	uint64_t returned;   /* handed back to the OS with madvise, cumulative */
	uint64_t huge;	     /* in blocks with a mapping of their own */
	uint64_t free_pages; /* free in the page allocator, resident or not */
	uint64_t slabs;	     /* pages in slabs, their objects used or free */
	uint64_t large;	     /* pages in large blocks */
	uint64_t warm_free;  /* free pages probably resident: what malloc_trim(0) returns */
};
USLUB_API void uslub_get_totals(struct uslub_totals *out);

/* One cache's figures, by name ("kmalloc-64"); returns 0, or -1 for an unknown name. */
struct uslub_cache_info {
	char name[24];
	uint32_t object_size;
	uint32_t order;	    /* preferred order (oo) */
	uint32_t min_order; /* order that holds one object (min) */
	uint32_t objects_per_slab;
	uint64_t slabs;
	uint64_t active_objects;
	uint64_t total_objects;
	uint64_t partial_slabs;
	uint64_t alloc_fastpath;
	uint64_t alloc_slowpath;
	uint64_t free_fastpath;
	uint64_t free_slowpath;
	uint64_t alloc_slab;
	uint64_t free_slab;
	uint64_t order_fallback;
	/* Internal waste: bytes the program asked for, estimated from the sizes the slow path
	 * saw (request_samples of them); active_objects * object_size were handed out. */
	uint64_t requested_bytes;
	uint64_t request_samples;
	uint64_t slabs_by_order[8]; /* orders above the build's maximum stay 0 */
};
USLUB_API int uslub_cache_info(const char *name, struct uslub_cache_info *out);

/* Write the statistics now: json = 0 gives the slabinfo-style table (caches sorted by
 * memory), 1 the JSON dump (DESIGN.md, section 5). Allocates nothing and takes no
 * allocator lock; reads /proc/self/smaps for the resident and huge-page figures. */
USLUB_API void uslub_stats_print(int fd, int json);

/* ---- object caches: the kernel's kmem_cache for a program's own objects ------------
 *
 * A cache of objects of one size on the engine of the kmalloc caches (per-thread sheaves,
 * per-node partial lists, the same slab orders and USLUB_* settings). See README.md,
 * "Object caches". An object may also be freed with free() / uslub_free(). */
struct uslub_cache;
struct rcu_head;

/* Flags of uslub_cache_create. */
#define USLUB_CACHE_HWCACHE_ALIGN      0x1u  /* objects aligned to a cache line (64 B) */
#define USLUB_CACHE_TYPESAFE_BY_RCU    0x2u  /* slab memory outlives an RCU grace period */
#define USLUB_CACHE_NO_MERGE	       0x4u  /* never shares a cache with another */
#define USLUB_CACHE_POISON	       0x8u  /* USLUB_DEBUG's letters for this cache: P */
#define USLUB_CACHE_RED_ZONE	       0x10u /* Z */
#define USLUB_CACHE_STORE_USER	       0x20u /* U */
#define USLUB_CACHE_CONSISTENCY_CHECKS 0x40u /* F */

/* A cache of objects of `size` bytes aligned to `align` (0, or a power of two up to
 * 4096); `ctor`, if given, runs once on each object when its slab is made, and the
 * program frees objects in the constructed state. `name` (copied, up to 23 bytes) is how
 * the statistics and USLUB_DEBUG know it; two caches may share one. NULL with errno
 * EINVAL (size 0 or above 64 KiB, bad alignment or flags) or ENOSPC (too many caches
 * that do not merge). */
USLUB_API struct uslub_cache *uslub_cache_create(const char *name, size_t size, size_t align,
						 unsigned flags, void (*ctor)(void *obj));
/* An object, or NULL with errno ENOMEM. */
USLUB_API void *uslub_cache_alloc(struct uslub_cache *c);
/* obj must be an object of c (or NULL): an object of another cache, a pointer of no
 * cache or an object already free stops the program with a report naming both. */
USLUB_API void uslub_cache_free(struct uslub_cache *c, void *obj);
/* n objects into objs: all n, or 0 (and none taken) with errno ENOMEM. */
USLUB_API size_t uslub_cache_alloc_bulk(struct uslub_cache *c, size_t n, void **objs);
USLUB_API void uslub_cache_free_bulk(struct uslub_cache *c, size_t n, void **objs);
/* Empty slabs of c held by the calling thread and the node lists go back to the page
 * allocator; 0. */
USLUB_API int uslub_cache_shrink(struct uslub_cache *c);
/* The cache goes away: returns the objects still allocated (reported on stderr, with
 * their allocation sites under USLUB_DEBUG=U), whose memory is left alone. */
USLUB_API size_t uslub_cache_destroy(struct uslub_cache *c);

/* The RCU flavour the program's readers use, for TYPESAFE_BY_RCU slabs and
 * uslub_free_rcu: its call_rcu and rcu_barrier, e.g. urcu_memb_call_rcu and
 * urcu_memb_barrier. Default: liburcu-bp's (urcu_bp_call_rcu), which covers readers of
 * the bp flavour only. Set it before the first such free. */
USLUB_API void uslub_set_rcu(void (*call_rcu)(struct rcu_head *head,
					      void (*func)(struct rcu_head *head)),
			     void (*rcu_barrier)(void));
/* kfree_rcu: ptr (any block of uslub's, or NULL) is freed once a grace period of that
 * flavour has passed. Batched: one call_rcu per batch, not per object. */
USLUB_API void uslub_free_rcu(void *ptr);
/* Hands every pending RCU free to call_rcu and waits for them all (rcu_barrier). */
USLUB_API void uslub_rcu_barrier(void);

/* USLUB_DEBUG=B: libuslub_bounds.so calls this before each memcpy, memmove and memset it
 * interposes; a write of n bytes at dst by `op` from `caller` that leaves the uslub block
 * it starts in (its request) or writes into a freed one is reported, and the program
 * stops. Without B it returns at once. */
USLUB_API void uslub_check_write(const void *dst, size_t n, const char *op, const void *caller);

#ifdef __cplusplus
}
#endif

#endif
