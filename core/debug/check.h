/* The heap accounting walker: every page of every region is found in exactly one place
 * - a slab, a large block, a thread structure, a thread's page cache, a free block (warm,
 * cold, or handed back to the OS), the region's own descriptors, or not yet grown - and
 * every list and counter the allocator keeps agrees with what the walk found.
 *
 * For tests, the fuzzer and the soak run. The answer is exact only while no other thread
 * allocates or frees: thread slabs change without any lock, so the walker, although it
 * takes every allocator lock, cannot stop them. Allocates nothing. */
#ifndef USLUB_CHECK_H
#define USLUB_CHECK_H

#include "size_classes.h"
#include "types.h"

#include <stdint.h>

#pragma GCC visibility push(hidden)

struct uslub_check {
	/* Where each page is; the fields add up to regions * pages per region. */
	uint64_t slab_pages;
	uint64_t large_pages;
	uint64_t cached_large_pages; /* freed large blocks in threads' caches */
	uint64_t meta_pages;	     /* thread structures */
	uint64_t pcp_pages;	     /* in threads' page caches */
	uint64_t free_warm_pages;    /* free, probably resident */
	uint64_t free_cold_pages;    /* free, never touched since they were handed back */
	uint64_t released_pages;     /* free and handed back to the OS (madvise) */
	uint64_t desc_pages;	     /* each region's descriptor array */
	uint64_t ungrown_pages;	     /* reserved address space not yet given to the buddy */
	uint64_t regions;
	/* Slabs by state, and what the program holds. */
	uint64_t slabs, frozen_slabs, partial_slabs, full_slabs;
	uint64_t live_objects; /* slab objects handed out and not freed */
	uint64_t live_by_class[USLUB_NR_CACHES];
	uint64_t sheaf_objects; /* freed, waiting in threads' sheaves and barns (not live) */
	uint64_t large_blocks;
	uint64_t live_bytes; /* live objects times their size, plus large and huge */
	uint64_t huge_bytes;
	uint64_t threads; /* states in the registry, the shared orphan included */
	uint64_t errors;
};

/* Walk the heap and check it; fills *out and returns the number of inconsistencies. The
 * first few are described on fd (-1: none are printed). */
uint64_t uslub_check_heap(struct uslub_check *out, int fd);
/* The page census of a walk, a few lines on fd. */
void uslub_check_print(const struct uslub_check *c, int fd);

#pragma GCC visibility pop

#endif
