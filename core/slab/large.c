/* Large blocks (8 KiB < size <= 4 MiB): pages straight from the page allocator. The
 * block is taken at the power-of-two order that fits and its unused tail pages go back at
 * once (the kernel's alloc_pages_exact), so a 20 KiB request holds 5 pages, not 8. Above
 * 1 MiB (PLACED_PAGES) a block is placed as a big buffer is instead (run.c's span search:
 * where the most of its pages are warm, then the tightest run): cut from a block of its
 * order, a 2.1 MiB block took a whole free 4 MiB block before any warm hole of 2.1-4 MiB
 * made of smaller blocks, so two threads replacing buffers of up to 8 MiB left holes no
 * later block fitted, and the pay of section 9 (decay.c) handed them back to be faulted
 * in again: 1.5-2.5 s and 88-128 thousand faults where tcmalloc took 0.7-0.9 s
 * and 61-66 thousand, now 0.8-1.1 s and 60-67 thousand at a peak under glibc's
 * (tools/bench/results/placed-blocks.md). realloc
 * grows a large block in place when the pages after it are free, and shrinks it in place.
 * Blocks of up to 128 KiB go through the thread's medium-block cache (medium.c). Larger
 * requests are spans of the large zone, and past 32 MiB mappings of their own
 * (page/huge.c).
 *
 * Each block keeps the size the program asked for, so that memcheck, ASan and
 * USLUB_DEBUG=Z see the block end there rather than at the page (debug.h, "large and
 * huge blocks"); outside those runs no hook is called.
 *
 * With Z or P for every cache (uslub_block_pad, hooks.h) a block is laid out for the
 * checkers, and marked PF_GUARD:
 *
 *     page 0          red zone (its first 16 bytes: the sweep's ready word, debug/block.c)
 *     page 1 ...      the request, then red zone to the end of the pages, W bytes at least
 *
 * so a miss of up to a page before the block or W bytes past it lands in a red zone, which
 * free, the sweep and exit check, and a freed block keeps its poison where the sweep can
 * find it. Such a block skips the medium-block cache (its layout is not the cache's
 * business, and debug runs are not about speed) and is resized in place only within its
 * pages. An aligned block (align > a page) starts its pages as always: no page before. */
#include "slab/slab.h"
#include "hooks.h"
#include "os/options.h"
#include "os/os.h"
#include "page/page.h"

#include <errno.h>
#include <string.h>
#include <time.h>

static size_t pages_for(size_t size)
{
	return (size + USLUB_PAGE_SIZE - 1) >> USLUB_PAGE_SHIFT;
}

static void mark_large(struct page_desc *d, size_t npages, size_t from)
{
	for (size_t i = from; i < npages; i++)
		d[i].head = d;
}

/* Whether blocks past the medium-block cache's sizes are made bare (PF_BARE): in a run
 * without the checkers (memcheck, ASan, Z) and without letters for every cache
 * (USLUB_DEBUG with no cache list), whose checks look up pointers inside large blocks
 * (debug/bounds.c, api/sized.c). */
static bool blocks_bare(void)
{
	return !uslub_block_debug && !(uslub_config.debug_letters && !uslub_config.debug_caches);
}

/* The pages of a bare block of npages: above MEDIUM_MAX_PAGES and up to the largest buddy
 * block, rounded up to one of four sizes a doubling, as jemalloc's large size classes are
 * (up to a quarter more address space, 8% for sizes spread evenly; the allocator never
 * touches the pages past the request). Cut to the page, blocks replaced at random left
 * free pieces of every length: the next block was cut from the start of one, its first
 * page often one no block had started on (a fault where the last block left it
 * unwritten), the rest a new piece, and the buddy's runs and the extents were searched
 * and split at every block. In size classes a freed block is the next one's exactly: 16 B
 * up to 1, 2 and 4 MiB replaced at random (64 live) ran at 2.1x, 2.6x and 2.4x on one
 * thread; threads freeing each other's filled 1-4 MiB blocks peaked 5-7% higher
 * (tools/bench/results/large-classes.md). Spans keep their exact pages: the slack of a
 * reused 5-25 MiB buffer stayed resident (big_buffers peaked 10% higher). So do blocks
 * where address space is bounded: 1 MiB bytearrays under RLIMIT_AS filled 79% of the
 * headroom in classes, 98% without (tests/rlimit_python.py). */
static size_t class_pages(size_t npages)
{
	if (npages <= MEDIUM_MAX_PAGES || npages > (1UL << USLUB_MAX_ORDER) ||
	    __atomic_load_n(&uslub_space_limited, __ATOMIC_RELAXED))
		return npages;
	unsigned lg = 63 - (unsigned)__builtin_clzl(npages);
	size_t grid = (size_t)1 << (lg - 2);
	return (npages + grid - 1) & ~(grid - 1);
}

struct page_desc *uslub_large_bare_around(const void *p)
{
	struct region *r = region_of(p);
	if (!r)
		return NULL;
	struct page_desc *d = region_desc(r, p);
	if (__atomic_load_n(&d->kind, __ATOMIC_RELAXED) != PAGE_UNUSED)
		return NULL; /* a block's first page, or a free block's */
	/* Back over pages that name no block to the first that does (a large block is at
	 * most a HUGE_THRESHOLD of pages). */
	size_t max = page_index(d) - FIRST_PAGE;
	if (max > (HUGE_THRESHOLD >> USLUB_PAGE_SHIFT))
		max = HUGE_THRESHOLD >> USLUB_PAGE_SHIFT;
	for (size_t k = 1; k <= max; k++) {
		struct page_desc *h = d - k;
		if (__atomic_load_n(&h->kind, __ATOMIC_RELAXED) == PAGE_UNUSED)
			continue;
		return h->kind == PAGE_LARGE && (h->flags & PF_BARE) && h->objects > k ? h : NULL;
	}
	return NULL;
}

/* The request: uslub_large_set_request (slab.h). */
size_t uslub_large_request(const struct page_desc *d)
{
	return uslub_large_span(d) - d->local_count;
}

/* After the block's flags: its start (PF_GUARD, PF_COLOR) is set. */
static void set_request(struct page_desc *d, size_t size)
{
	uslub_large_set_request(d, uslub_large_start(d), size);
}

/* A block of up to MEDIUM_MAX_PAGES pages, through the thread's medium-block cache;
 * coloured (slab.h, medium_color_of) unless `align` asks for more than a cache line. */
static void *medium_alloc(struct uslub_thread *t, size_t size, size_t align, bool zero)
{
	bool color = align <= 64;
	unsigned npages = color ? medium_pages(size) : medium_count_up(pages_for(size));
	uslub_huge_cache_tick();
	bool locked = uslub_medium_enter(t);
	/* In the thread's medium zone (page.h), blocks of 129-256 KiB too: made in the
	 * thread's large-block arena, the ones the cache held stood in the way of the arena's
	 * larger blocks, and blocks of up to 1 MiB replaced at random ran at 0.84x
	 * (tools/bench/results/medium-256k.md). Where address space is bounded, or that zone
	 * cannot grow, the slab zone's: eight zones' regions took the room of 40 threads'
	 * stacks under `ulimit -v 600000`, where one zone left it. */
	bool limited = __atomic_load_n(&uslub_space_limited, __ATOMIC_RELAXED);
	struct page_desc *d =
	    limited
		? NULL
		: uslub_medium_alloc(t, MEDIUM_ARENA_ZONE(t->node, uslub_thread_arena()), npages);
	if (!d)
		d = uslub_medium_alloc(t, t->node, npages);
	uslub_medium_exit(t, locked);
	if (!d) {
		errno = ENOMEM;
		return NULL;
	}
	bool cold = d->flags & PF_COLD;
	/* Never guarded: the medium-block cache. A block of more pages than asked may be
	 * of the count whose sheaf holds page-aligned blocks. */
	d->flags = 0;
	void *p = medium_color(d, color && medium_colorable(d->objects));
	uslub_large_set_request(d, p, size);
	/* Its free takes the fast path, which reads the free mark: one left in the
	 * block's second word by an earlier life of these pages goes (cold pages read 0). */
	if (medium_testable(d->objects)) {
		medium_tests_set(d, d->objects, p);
		if (!cold)
			mark_allocated(p);
	}
	if (unlikely(uslub_block_debug))
		uslub_hooks.block_alloc(p, size, (size_t)d->objects << USLUB_PAGE_SHIFT, 0,
					zero && cold);
	if (zero && !cold)
		memset(p, 0, size);
	return p;
}

/* npages for a large block of `order` (a span: more than the largest buddy block) from
 * zone `zone`, or NULL: from what the zone has, in one block or in neighbouring pieces;
 * if `grow`, the heap may grow for it then (or the other kind of zone lend a block). An
 * aligned block must be one block. */
static struct page_desc *large_pages(unsigned zone, size_t npages, unsigned order, bool aligned,
				     bool span, bool grow)
{
	if (span || (!aligned && npages > PLACED_PAGES)) {
		struct page_desc *d = grow ? uslub_pages_alloc_span(zone, npages)
					   : uslub_pages_find_span(zone, npages);
		if (d || span)
			return d;
	} else if (!grow) {
		struct page_desc *d =
		    aligned ? NULL : uslub_pages_alloc_run(zone, npages, RUN_TRIES);
		return d ? d : uslub_pages_alloc_exact(zone, order, npages, aligned, GFP_NOGROW);
	}
	if (!grow)
		return NULL;
	/* Before the heap grows for it, the thread's medium sheaves and the medium-block
	 * caches go back to the zones (the shrink hook): blocks held there keep the free
	 * memory around them from merging into the larger blocks asked for here, as the
	 * kernel drains its per-CPU lists before it reclaims (realloc_mix's peak:
	 * tools/bench/results/medium-blocks.md). */
	struct page_desc *d = NULL;
	if (uslub_hooks.shrink() && !aligned)
		d = uslub_pages_alloc_run(zone, npages, RUN_TRIES);
	return d ? d : uslub_pages_alloc_exact(zone, order, npages, aligned, 0);
}

void *uslub_large_alloc(size_t size, size_t align, bool zero)
{
	struct uslub_thread *t = uslub_tls_thread;
	if (size <= medium_max_bytes() && align <= USLUB_PAGE_SIZE && t->state == THREAD_LIVE &&
	    likely(!uslub_block_pad))
		return medium_alloc(t, size, align, zero);
	size_t npages = pages_for(size), lead = 0;
	unsigned order = uslub_get_order(size);
	unsigned align_order = align > USLUB_PAGE_SIZE ? uslub_get_order(align) : 0;
	if (unlikely(uslub_block_pad)) {
		lead = !align_order;
		npages = lead + pages_for(size + uslub_block_pad);
		order = uslub_get_order(npages << USLUB_PAGE_SHIFT);
	}
	if (align_order > order)
		order = align_order;
	else if (!align_order && !lead && blocks_bare())
		npages = class_pages(npages); /* the order stays: the class is below the next */
	/* A block larger than the largest buddy block is a span of them (a big buffer);
	 * aligned beyond a page, or past HUGE_THRESHOLD, it is a mapping of its own. */
	bool span = order > USLUB_MAX_ORDER;
	if (span && (align_order || size > HUGE_THRESHOLD))
		return uslub_huge_alloc(size, align, zero);
	uslub_huge_cache_tick();
	unsigned arena = uslub_thread_arena();
	unsigned zone = large_zone_of(t->node, arena, npages);
	bool aligned = align_order != 0;
	/* Before the thread's arena grows, the free memory of the node's other large-block
	 * zones: a block of more than 1 MiB searched for in each, a smaller one as a free
	 * block of its order, where the zone's lock is free (arena.c: without it, stress's
	 * peak rose with the arenas, 100-112 MiB with one, 110-130 with two, 137-159 with
	 * four; searching for the smaller ones with a wait, two threads met at both locks).
	 * After, where the thread's arena could not grow (a cap, RLIMIT_AS), theirs grown.
	 * With no other arena, a big block's search is made once, with the growth. */
	bool big = span || npages > PLACED_PAGES;
	unsigned others = zone >= MAX_NODES ? uslub_nr_arenas - 1 : 0;
	/* First the free runs the arenas keep whole (page/extent.c): a bare block is cut
	 * from one without the buddy's split and search. */
	bool runs = npages > PLACED_PAGES && !span && !aligned && blocks_bare();
	struct page_desc *d = runs ? uslub_extent_take(zone, npages, false) : NULL;
	/* A span is placed by the search of the whole zone, runs given back first: where
	 * its pages are warmest may be a run and the free pages beside it (big_buffers
	 * faulted 55,000 pages in against 36,900 otherwise). */
	if (span && zone >= MAX_NODES)
		uslub_extents_flush(zone);
	if (!d && (others || !big))
		d = large_pages(zone, npages, order, aligned, span, false);
	/* The buddy without them had no room: with them, before any other zone is looked at
	 * and before the medium caches are drained for the growth (the shrink hook). */
	if (!d && runs && uslub_extents_flush(zone) && (others || !big))
		d = large_pages(zone, npages, order, aligned, span, false);
	/* The other arenas' runs serve a block of any size here, as their buddies do: the
	 * thread's own zone would grow otherwise. */
	bool any_runs = others && !aligned && blocks_bare();
	for (unsigned a = 1; !d && a <= others; a++) {
		unsigned oz = LARGE_ARENA_ZONE(t->node, (arena + a) % uslub_nr_arenas);
		if (!zone_made(oz))
			continue; /* no block was ever cut there */
		d = any_runs ? uslub_extent_take(oz, npages, true) : NULL;
		if (!d)
			d = big ? large_pages(oz, npages, order, aligned, span, false)
				: uslub_pages_alloc_exact(oz, order, npages, aligned,
							  GFP_NOGROW | GFP_TRYLOCK);
	}
	if (!d)
		d = large_pages(zone, npages, order, aligned, span, true);
	for (unsigned a = 1; !d && a <= others; a++) {
		unsigned oz = LARGE_ARENA_ZONE(t->node, (arena + a) % uslub_nr_arenas);
		if (zone_made(oz))
			d = large_pages(oz, npages, order, aligned, span, true);
	}
	if (!d) {
		/* The zone cannot grow (a cap, RLIMIT_AS): a mapping may still fit. */
		if (span)
			return uslub_huge_alloc(size, align, zero);
		errno = ENOMEM;
		return NULL;
	}
	if (span)
		order = USLUB_MAX_ORDER;
	bool cold = d->flags & PF_COLD;
	d->cls = CLS_NONE; /* fails the free fast path's object test */
	__atomic_store_n(&d->kind, PAGE_LARGE, __ATOMIC_RELAXED);
	d->objects = (uint16_t)npages;
	d->order = (uint8_t)order;
	d->owner = NULL;
	bool bare = npages > MEDIUM_MAX_PAGES && blocks_bare();
	d->flags = lead ? PF_GUARD : bare ? PF_BARE : 0;
	if (!bare)
		mark_large(d, npages, 1);
	__atomic_store_n(&d->head, d, __ATOMIC_RELEASE);
	uslub_large_count((int64_t)(npages << USLUB_PAGE_SHIFT));
	void *p = uslub_large_start(d);
	set_request(d, size);
	/* Fresh pages read as zero, but only calloc asked for that. */
	if (unlikely(uslub_block_debug))
		uslub_hooks.block_alloc(p, size, uslub_large_span(d), uslub_large_lead(d),
					zero && cold);
	if (zero && !cold)
		memset(p, 0, size);
	return p;
}

/* Back to the medium-block cache or the page allocator. */
static inline void release(struct page_desc *d)
{
	size_t npages = d->objects;
	struct uslub_thread *t = uslub_tls_thread;
	if (medium_tested(d))
		medium_tests_clear(d);
	if (medium_cacheable(npages) && t->state == THREAD_LIVE && !(d->flags & PF_GUARD)) {
		bool locked = uslub_medium_enter(t);
		bool cached = uslub_medium_free(t, d, (unsigned)npages, false);
		uslub_medium_exit(t, locked);
		if (cached)
			return;
	}
	uslub_large_count(-(int64_t)(npages << USLUB_PAGE_SHIFT));
	__atomic_store_n(&d->kind, PAGE_UNUSED, __ATOMIC_RELAXED);
	if (d->flags & PF_BARE)
		uslub_pages_free_bare(d, npages);
	else
		uslub_pages_free_range(d, npages);
}

void uslub_large_free(struct page_desc *d, void *p)
{
	uslub_huge_cache_tick();
	if (unlikely(uslub_block_debug) &&
	    uslub_hooks.block_free(p, uslub_large_request(d), uslub_large_span(d),
				   uslub_large_lead(d), d))
		return; /* held by the quarantine, which releases it later */
	release(d);
}

void uslub_large_release(struct page_desc *d)
{
	release(d);
}

void uslub_large_cache_drain(struct uslub_thread *t)
{
	uslub_medium_drain(t);
}

/* Checkers see the request; otherwise the whole pages may be used. */
size_t uslub_large_usable(struct page_desc *d)
{
	if (unlikely(uslub_block_debug))
		return uslub_large_request(d);
	return uslub_large_span(d);
}

/* The checkers' view of a block resized in place, while pages [0, max(old, npages)) are
 * still the block's: before a shrink gives pages back, after a growth took them. */
static void resize_debug(struct page_desc *d, void *p, size_t size, size_t npages)
{
	size_t old = uslub_large_request(d), span = uslub_large_span(d);
	size_t lead = uslub_large_lead(d);
	uslub_hooks.block_check(p, old, span, lead, "realloc");
	uslub_hooks.block_resize(p, p, old, span, size, (npages << USLUB_PAGE_SHIFT) - lead, lead);
}

/* Free's test of unguarded block d, resized in place to npages pages: a block of another
 * page count carries another sheaf's (only the first page carries one, so the pages it
 * gives back or takes carry none). A
 * block that had none may hold, in a word the program never wrote, the free mark an
 * earlier block left there (a larger block is handed out without looking), which free's
 * fast path would take for a second free: it goes. */
static void retest(struct page_desc *d, size_t npages)
{
	bool tested = medium_tested(d);
	if (tested)
		medium_tests_clear(d);
	/* A coloured block of the count whose sheaf holds page-aligned ones stays off the
	 * fast path: its free's slow path gives it that sheaf's start (medium_sheaf.c). */
	if (medium_testable((unsigned)npages) &&
	    (!(d->flags & PF_COLOR) || medium_colorable((unsigned)npages))) {
		void *start = uslub_large_start(d);
		medium_tests_set(d, (unsigned)npages, start);
		if (!tested && is_marked_free(start))
			mark_allocated(start);
	}
}

/* In place or NULL; the caller moves the block when this fails. */
void *uslub_large_realloc(struct page_desc *d, void *p, size_t size)
{
	size_t old = d->objects;
	bool guard = d->flags & PF_GUARD;
	size_t npages = pages_for(uslub_large_lead(d) + size + uslub_block_pad);
	if (d->flags & PF_BARE)
		npages = class_pages(npages); /* within its class the block stays as it is */
	if (npages == old) {
		if (unlikely(uslub_block_debug))
			resize_debug(d, p, size, npages);
		set_request(d, size);
		return p;
	}
	if (guard)
		return NULL; /* a guarded block moves: its red zones are set up anew */
	if (npages < old) {
		if (unlikely(uslub_block_debug))
			resize_debug(d, p, size, npages);
		retest(d, npages);
		if (d->flags & PF_BARE) {
			uslub_pages_free_bare(d + npages, old - npages);
			/* Small enough for the medium-block cache: marked, as a block of
			 * its size is. */
			if (npages <= MEDIUM_MAX_PAGES) {
				mark_large(d, npages, 1);
				d->flags &= (uint8_t)~PF_BARE;
			}
		} else {
			uslub_pages_free_range(d + npages, old - npages);
		}
		d->objects = (uint16_t)npages;
		set_request(d, size);
		uslub_large_count(-(int64_t)((old - npages) << USLUB_PAGE_SHIFT));
		return p;
	}
	if (size > HUGE_THRESHOLD || uslub_pages_claim(d + old, npages - old) != 0)
		return NULL;
	retest(d, npages);
	if (!(d->flags & PF_BARE))
		mark_large(d, npages, old);
	if (unlikely(uslub_block_debug))
		resize_debug(d, p, size, npages);
	d->objects = (uint16_t)npages;
	set_request(d, size);
	uslub_large_count((int64_t)((npages - old) << USLUB_PAGE_SHIFT));
	return p;
}
