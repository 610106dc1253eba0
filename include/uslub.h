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

#ifdef __cplusplus
}
#endif

#endif
