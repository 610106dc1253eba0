/* The page layer's own declarations: what its files share with one another (the calls
 * the layers above make are in internal.h). The buddy (buddy.c) keeps the free lists;
 * regions (region.c) give it address space; runs (run.c) cut large blocks from
 * neighbouring free blocks; decay (decay.c) hands free memory back to the OS; the page
 * cache (pcp.c) stands in front of the buddy for each thread; huge blocks (huge.c) are
 * mappings of their own. */
#ifndef USLUB_PAGE_H
#define USLUB_PAGE_H

#include "internal.h"
#include "os/os.h"

#pragma GCC visibility push(hidden)

/* Flag of a free block whose pages are not counted in uslub_mapped_bytes. */
#define PF_RELEASED 0x4

static inline uint64_t block_bytes(unsigned order)
{
	return USLUB_PAGE_SIZE << order;
}

static inline uintptr_t page_index(const struct page_desc *d)
{
	return ((uintptr_t)d & REGION_MASK) >> DESC_SHIFT;
}

/* ---- the buddy (buddy.c) ---------------------------------------------------------- */

/* Warm free pages of every zone together: the bound (decay.c, section 7) reads it
 * without the zone locks. */
extern _Atomic uint64_t uslub_warm_pages_all;

/* Block d off zone n's free list, under the lock. */
void uslub_list_remove(struct uslub_node *n, struct page_desc *d);
/* Put one naturally aligned block back and merge it with free buddies, under the lock.
 * `stamp`: the decay step it went free in, when warm. */
void uslub_free_one(struct uslub_node *n, struct page_desc *d, unsigned order, unsigned flags,
		    uint16_t stamp);
/* Pages [d, d + npages) onto zone n's lists as naturally aligned blocks, under the lock. */
void uslub_free_range_locked(struct uslub_node *n, struct page_desc *d, size_t npages,
			     unsigned flags, uint16_t stamp);
/* The first block of at least `order` that the flags allow, under the lock. */
struct page_desc *uslub_find_block(struct uslub_node *n, unsigned order, unsigned gfp);
/* Block d out of zone n's lists, cut to `order`; the lock is held and dropped here. */
struct page_desc *uslub_take_block(struct uslub_node *n, struct page_desc *d, unsigned order);
/* The free block that holds page `d`, or NULL if the page is in use. */
struct page_desc *uslub_free_block_of(struct page_desc *d);

/* ---- regions (region.c) ------------------------------------------------------------ */

/* `bytes` more counted in uslub_mapped_bytes, and its peak. */
void uslub_mapped_add(uint64_t bytes);
/* Add a block of 2^min_order pages, or a smaller one that aligns the next, to zone n,
 * under the lock; -1 (errno) when the OS or the cap refuses. */
int uslub_grow(struct uslub_node *n, unsigned min_order);

/* ---- decay (decay.c) --------------------------------------------------------------- */

/* What uslub_release_blocks hands back: warm blocks, or every block not handed back yet
 * (fresh ones included). The decay chooses by age (uslub_decay_zone). */
enum release_mode { RELEASE_ANY, RELEASE_ALL };
size_t uslub_release_blocks(unsigned node, uint64_t keep, enum release_mode mode);
/* The current decay step. */
uint32_t uslub_step_now(void);
/* Zone n's level of used free memory, after pages went free or were taken; under the
 * lock. */
void uslub_note_free(struct uslub_node *n);
void uslub_note_reuse(struct uslub_node *n);
/* Zone n's decay pass for `step`, if no one has made it yet; bytes handed back. */
size_t uslub_decay_zone(struct uslub_node *n, uint32_t step);
/* A pass when a step has begun since the last; a look at the clock otherwise. */
void uslub_maybe_decay(struct uslub_node *n);

/* ---- the thread's page cache (pcp.c) ----------------------------------------------- */

/* Empty lists, high at its minimum: a new thread state's. */
void uslub_pcp_init(struct uslub_thread *t);

/* ---- huge blocks (huge.c) ------------------------------------------------------------ */

/* When the oldest cached huge mapping is due to go back; 0 while the cache is empty.
 * Stored under huge_lock, read without it. */
extern _Atomic uint64_t uslub_huge_expiry_ms;

/* The large-block paths look at the clock too while the huge cache holds a mapping, so
 * a program that has stopped using huge blocks still sees them go back. */
static inline void uslub_huge_cache_tick(void)
{
	uint64_t due = atomic_load_explicit(&uslub_huge_expiry_ms, memory_order_relaxed);
	if (unlikely(due) && uslub_os_now_ms() >= due)
		uslub_huge_cache_release(false);
}

#pragma GCC visibility pop

#endif
