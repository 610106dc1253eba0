/* The sweep: the red zones of allocated objects and the poison and red zones of free ones,
 * checked in every debug slab and guarded large block (block.c) at malloc_trim, at exit
 * and, in bounded steps, by the background thread (replenish/). Without it an overflow is
 * found only when its object is
 * freed (or, with F, at the next operation on its slab), and a write after free only when
 * the object is handed out again: a program that overflows a block it keeps, or writes
 * into one it freed, and then exits, would never be told.
 *
 * It runs beside the program's threads, which allocate and free without a lock, so each
 * look is guarded twice:
 *  - the slab: a debug slab carries a ready word in the first bytes of its first slot (the
 *    right red zone of no object, unused), written when every object is set up and
 *    cleared before the slab goes back; the slab is looked at only while its word reads
 *    ready with the same generation before and after;
 *  - the object: its sequence count (debug.h, dbg_meta.seq) is odd while an allocation,
 *    free or resize changes it; the look counts only between two equal, even loads.
 * And memory: the walk holds the zone's lock while it reads a region's slabs, so no page
 * it reads can be unmapped meanwhile (page/region.c unmaps only free blocks, under that
 * lock); everything below a region's `grown` is mapped.
 *
 * Not under memcheck or ASan, which see each access as it happens and keep free objects
 * and red zones inaccessible. */
#include "debug/debug.h"
#include "debug/report.h"

#include "os/os.h"
#include "page/page.h"
#include "slab/slab.h"

#include <string.h>

#define READY_MAGIC 0x5eadbeefd0d0cafeULL

/* The background steps read objects while their threads write them - by design, each look
 * validated by the counts above - which ThreadSanitizer would report as races: a TSan
 * build sweeps only at malloc_trim and exit. */
#ifdef USLUB_TSAN
#define BACKGROUND_SWEEP 0
#else
#define BACKGROUND_SWEEP 1
#endif

bool uslub_debug_sweep_wanted;

static _Atomic uint64_t ready_gen;

void uslub_debug_sweep_ready(struct page_desc *s)
{
	uint64_t *w = page_address(s);
	__atomic_store_n(&w[1], atomic_fetch_add(&ready_gen, 1) + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&w[0], (uintptr_t)w ^ READY_MAGIC, __ATOMIC_RELEASE);
}

void uslub_debug_sweep_gone(struct page_desc *s)
{
	uint64_t *w = page_address(s);
	__atomic_store_n(&w[0], 0, __ATOMIC_RELEASE);
	atomic_thread_fence(memory_order_seq_cst);
}

/* The generation of a ready slab, or 0. */
static uint64_t ready(struct page_desc *s)
{
	uint64_t *w = page_address(s);
	if (__atomic_load_n(&w[0], __ATOMIC_ACQUIRE) != ((uintptr_t)w ^ READY_MAGIC))
		return 0;
	return __atomic_load_n(&w[1], __ATOMIC_RELAXED);
}

/* The first bad byte of one object, with what it means; NULL when it is intact or was
 * caught changing. */
static const unsigned char *check_object(const struct uslub_cache *c, char *o, const char **what,
					 size_t *req)
{
	struct dbg_meta *m = dbg_meta_of(c, o);
	uint32_t seq = __atomic_load_n(&m->seq, __ATOMIC_ACQUIRE);
	if (seq & 1)
		return NULL;
	uint64_t state = __atomic_load_n(&m->state, __ATOMIC_RELAXED);
	const unsigned char *bad = NULL;
	*req = REQ_UNKNOWN;
	if (state == ((uintptr_t)o ^ DBG_STATE_ALLOC)) {
		size_t size = __atomic_load_n(&m->orig_size, __ATOMIC_RELAXED);
		if ((c->debug & DBG_REDZONE) && size <= c->size) {
			bad = uslub_debug_bad_redzone(c, o, size, RED_ACTIVE);
			*what = "Redzone overwritten";
			*req = size;
		}
	} else if (state == ((uintptr_t)o ^ DBG_STATE_FREE)) {
		if (c->debug & DBG_POISON) {
			bad = uslub_debug_bad_poison(c, o);
			*what = "Poison overwritten";
		}
		if (!bad && (c->debug & DBG_REDZONE)) {
			bad = uslub_debug_bad_redzone(c, o, c->size, RED_INACTIVE);
			*what = "Redzone overwritten";
		}
	}
	/* A state that is neither is left to the object's next operation, which reports
	 * it with its own context. */
	atomic_thread_fence(memory_order_acquire);
	if (__atomic_load_n(&m->seq, __ATOMIC_RELAXED) != seq)
		return NULL;
	return bad;
}

static void check_slab(struct page_desc *d, const char *op)
{
	unsigned cls = __atomic_load_n(&d->cls, __ATOMIC_RELAXED);
	if (cls >= USLUB_NR_CLASSES)
		return;
	struct uslub_cache *c = &uslub_caches[cls];
	if (!(c->debug & (DBG_REDZONE | DBG_POISON)) || (c->debug & (DBG_VALGRIND | DBG_ASAN)))
		return;
	uint64_t gen = ready(d);
	if (!gen)
		return;
	unsigned objects = uslub_slab_capacity(c, d);
	char *first = (char *)page_address(d) + c->offset;
	for (unsigned i = 0; i < objects; i++) {
		char *o = first + (size_t)i * c->stride;
		const char *what = NULL;
		size_t req;
		const unsigned char *bad = check_object(c, o, &what, &req);
		if (!bad)
			continue;
		/* The slab as it was when its objects were looked at. */
		atomic_thread_fence(memory_order_acquire);
		if (ready(d) != gen)
			return;
		uslub_debug_op = op;
		uslub_debug_caller = NULL;
		uslub_debug_report_object(c, d, o, what, bad, req);
	}
}

/* Where the bounded sweep goes on: a zone, a region of it (regions are never freed) and
 * a page in it. Only the background thread makes bounded sweeps. */
static unsigned cur_zone;
static struct region *cur_region;
static size_t cur_page;

/* Sweeps region r of zone n from page `from` over up to `budget` pages (0: all); returns
 * the page it stopped at, or 0 at the region's end. */
static size_t sweep_region(struct uslub_node *n, struct region *r, size_t from, size_t budget,
			   const char *op)
{
	uslub_lock(&n->lock, USLUB_LOCK_ZONE);
	size_t grown = __atomic_load_n(&r->grown, __ATOMIC_RELAXED);
	size_t i = from < FIRST_PAGE ? FIRST_PAGE : from, end = budget ? i + budget : grown;
	struct page_desc *first = (struct page_desc *)r;
	while (i < grown && i < end) {
		struct page_desc *d = first + i;
		size_t len = 1;
		if (__atomic_load_n(&d->kind, __ATOMIC_RELAXED) == PAGE_SLAB &&
		    __atomic_load_n(&d->head, __ATOMIC_RELAXED) == d) {
			unsigned order = __atomic_load_n(&d->order, __ATOMIC_RELAXED);
			if (order <= USLUB_MAX_ORDER && i + (1UL << order) <= grown) {
				check_slab(d, op);
				len = 1UL << order;
			}
		} else if (__atomic_load_n(&d->kind, __ATOMIC_RELAXED) == PAGE_LARGE &&
			   __atomic_load_n(&d->head, __ATOMIC_RELAXED) == d &&
			   (__atomic_load_n(&d->flags, __ATOMIC_RELAXED) & PF_GUARD)) {
			size_t pages = __atomic_load_n(&d->objects, __ATOMIC_RELAXED);
			if (pages > 1 && i + pages <= grown) {
				uslub_debug_block_sweep(d, op);
				len = pages;
			}
		}
		i += len;
	}
	pthread_mutex_unlock(&n->lock);
	return i < grown ? i : 0;
}

void uslub_debug_sweep(const char *op, size_t pages)
{
	if (!uslub_debug_sweep_wanted || (pages && !BACKGROUND_SWEEP))
		return;
	/* Huge blocks are few, and their red zones a page or two: all of them each time. */
	if ((uslub_block_debug & DBG_REDZONE) && uslub_block_pad)
		uslub_huge_sweep(uslub_debug_block_check, op); /* under huge_lock */
	unsigned nr_nodes = uslub_nr_nodes < MAX_NODES ? uslub_nr_nodes : MAX_NODES;
	if (!pages) {
		for (unsigned z = 0; z < NR_ZONES; z++)
			if (z % MAX_NODES < nr_nodes)
				for (struct region *r =
					 __atomic_load_n(&uslub_nodes[z].regions, __ATOMIC_ACQUIRE);
				     r; r = r->next)
					sweep_region(&uslub_nodes[z], r, 0, 0, op);
		return;
	}
	/* A step: `pages` pages from the cursor, then the cursor moves on (to the next
	 * region, or zone, at a region's end). */
	if (cur_zone >= NR_ZONES)
		cur_zone = 0;
	for (unsigned tries = 0; !cur_region && tries < NR_ZONES; tries++) {
		if (cur_zone % MAX_NODES < nr_nodes)
			cur_region =
			    __atomic_load_n(&uslub_nodes[cur_zone].regions, __ATOMIC_ACQUIRE);
		if (!cur_region)
			cur_zone = (cur_zone + 1) % NR_ZONES;
		cur_page = 0;
	}
	if (!cur_region)
		return;
	cur_page = sweep_region(&uslub_nodes[cur_zone], cur_region, cur_page, pages, op);
	if (!cur_page) {
		cur_region = cur_region->next;
		if (!cur_region)
			cur_zone = (cur_zone + 1) % NR_ZONES;
	}
}
