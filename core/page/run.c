/* Runs: large blocks cut from the pages they need rather than from a power-of-two block
 * each, packed end to end and assembled from neighbouring free blocks; and the claim of
 * free pages in place (a large block grown by realloc). */
#include "page/page.h"

#include "os/options.h"
#include "os/vg.h"

#include <errno.h>

/* Takes pages [d, d + npages), all free, out of zone n's lists, giving back what the
 * free blocks holding them have outside the range; the lock is held. -1 if a page is not
 * free. */
static int claim_locked(struct uslub_node *n, struct page_desc *d, size_t npages)
{
	/* A block handed back was made inaccessible (decay.c): all of it is made accessible
	 * again, as what lies outside the range goes back as a block not handed back.
	 * Refused, or a page not free, the claim fails; blocks made accessible on the way
	 * stay released, which is harmless. */
	for (size_t i = 0; i < npages;) {
		struct page_desc *h = uslub_free_block_of(d + i);
		if (!h || ((h->flags & PF_RELEASED) &&
			   uslub_os_protect(page_address(h), block_bytes(h->order), true) != 0))
			return -1;
		i = (size_t)(h + (1UL << h->order) - d);
	}
	if (uslub_memcheck)
		vg_undefined(page_address(d), npages << USLUB_PAGE_SHIFT);
	for (size_t i = 0; i < npages;) {
		struct page_desc *h = uslub_free_block_of(d + i);
		unsigned flags = h->flags;
		uint16_t stamp = h->objects;
		size_t len = 1UL << h->order;
		uslub_list_remove(n, h);
		if (flags & PF_RELEASED)
			uslub_mapped_add(block_bytes(h->order));
		flags &= PF_COLD;
		/* Give back what lies outside the claimed range. */
		if (h < d)
			uslub_free_range_locked(n, h, (size_t)(d - h), flags, stamp);
		struct page_desc *end = h + len;
		if (end > d + npages)
			uslub_free_range_locked(n, d + npages, (size_t)(end - (d + npages)), flags,
						stamp);
		i = (size_t)(end - d);
	}
	uslub_note_reuse(n);
	return 0;
}

int uslub_pages_claim(struct page_desc *d, size_t npages)
{
	struct region *r = region_of(d);
	struct uslub_node *n = r->node;
	/* A peek before the lock (the zone's growth stores it atomically): a stale value
	 * only refuses a claim the zone could have made. */
	if (page_index(d) + npages > __atomic_load_n(&r->grown, __ATOMIC_RELAXED))
		return -1;
	uslub_lock(&n->lock, USLUB_LOCK_ZONE);
	int rc = uslub_extent_claim_locked(n, d, npages);
	if (rc != 0)
		rc = claim_locked(n, d, npages);
	uslub_zone_unlock(n);
	return rc;
}

/* The free block that starts at d, or NULL. The page right after a free block can lie in
 * another free block only as its first page (free blocks are disjoint and naturally
 * aligned), so walking a run from block to block needs one descriptor per block, not
 * uslub_free_block_of's search of every order: that search, made for each block of up
 * to RUN_TRIES runs a try, was three fifths of the instructions of blocks of 8-128 KiB
 * replaced at random (tools/bench/results/medium-blocks.md). */
static inline struct page_desc *free_head_at(struct page_desc *d)
{
	return __atomic_load_n(&d->kind, __ATOMIC_RELAXED) == PAGE_FREE ? d : NULL;
}

/* The free block that continues a run of free pages at d, or NULL where the run ends: at
 * a page in use, the top of what region r has grown, or a block handed back to the OS
 * whose taking would pass the cap. */
static struct page_desc *run_next(struct region *r, struct page_desc *d)
{
	if (page_index(d) >= r->grown)
		return NULL;
	struct page_desc *b = free_head_at(d);
	if (!b || ((b->flags & PF_RELEASED) && uslub_over_limit(block_bytes(b->order))))
		return NULL;
	return b;
}

/* Free pages from `h`, a free block's first page, on: how many follow in a row (up to
 * `want`), block after block. */
static size_t run_length(struct page_desc *h, size_t want)
{
	struct region *r = region_of(h);
	size_t got = 0;
	for (struct page_desc *b; got < want && (b = run_next(r, h + got));)
		got = (size_t)(b + (1UL << b->order) - h);
	return got;
}

/* A large block of npages that no free block of its order can hold: neighbouring free
 * blocks of lower orders, taken together, before the heap grows. Without this, a heap of
 * large blocks of mixed sizes (each a power-of-two block with its tail given back) grows
 * whenever no block of the full order is left, however much free memory lies in smaller
 * neighbouring pieces (tools/bench/results/). First fit from the larger pieces down; at most
 * RUN_TRIES blocks looked at, under the lock. */

/* Where the last large block cut from cold memory ended, if npages from there are free
 * and cold (so not memory that warm blocks elsewhere should be reused before) in zone n's
 * own regions: claimed, under the lock. */
static struct page_desc *next_fit(struct uslub_node *n, size_t npages)
{
	struct page_desc *h = n->large_next;
	if (!h)
		return NULL;
	struct region *r = region_of(h);
	if (r->node != n || page_index(h) + npages > r->grown)
		return NULL;
	for (size_t got = 0; got < npages;) {
		/* h itself may lie inside a free block; the blocks after it start at the
		 * pages looked at. */
		struct page_desc *b = got ? free_head_at(h + got) : uslub_free_block_of(h);
		if (!b || !(b->flags & PF_COLD) ||
		    ((b->flags & PF_RELEASED) && uslub_over_limit(block_bytes(b->order))))
			return NULL;
		got = (size_t)(b + (1UL << b->order) - h);
	}
	return claim_locked(n, h, npages) == 0 ? h : NULL;
}

/* Blocks looked at before a large block for free pages to start on. */
#define BEFORE_TRIES 16

/* How many free pages lie right before d, in whole free blocks (at most BEFORE_TRIES of
 * them), under the lock. A block handed back to the OS ends the count where taking it
 * would pass the cap. */
static size_t free_before(struct page_desc *d)
{
	size_t k = 0;
	for (int i = 0; i < BEFORE_TRIES && page_index(d - k) > FIRST_PAGE; i++) {
		struct page_desc *h = uslub_free_block_ending(d - k - 1);
		if (!h || ((h->flags & PF_RELEASED) && uslub_over_limit(block_bytes(h->order))))
			break;
		k += 1UL << h->order;
	}
	return k;
}

struct page_desc *uslub_pages_alloc_run(unsigned node, size_t npages, unsigned tries)
{
	unsigned order = uslub_get_order(npages << USLUB_PAGE_SHIFT);
	struct uslub_node *n = &uslub_nodes[node];
	uslub_zone_ready(node);
	uslub_lock(&n->lock, USLUB_LOCK_ZONE);
	struct page_desc *d = uslub_find_block(n, order, 0);
	/* Large blocks whose size is not a power of two are packed end to end (25 pages each
	 * for 100 KiB) rather than each in a power-of-two block whose tail nothing of that
	 * size can use - a fifth of the heap lost, which a tight RLIMIT_AS makes plain. Warm
	 * memory is reused first, as always, from the start of the free pages right before
	 * its block; cold memory is cut in address order, after the block cut last. */
	if (!d || (d->flags & PF_COLD)) {
		struct page_desc *h = next_fit(n, npages);
		if (h) {
			n->large_next = h + npages;
			uslub_zone_unlock(n);
			h->flags = 0;
			h->order = (uint8_t)order;
			return h;
		}
	}
	if (d) {
		/* In warm memory only to go on right after the block cut last (blocks of one
		 * size filling freed memory again), not wherever free pages lie before a block:
		 * in a mix of sizes, blocks started off their power-of-two boundaries split the
		 * free memory up (tools/bench/results/). */
		struct page_desc *last = n->large_next;
		bool cold = d->flags & PF_COLD;
		size_t k = cold || (last && last < d && d - last < (1L << USLUB_MAX_ORDER))
			       ? free_before(d)
			       : 0;
		if (!cold && d - k != last)
			k = 0;
		n->large_next = d - k + npages;
		if (k && claim_locked(n, d - k, npages) == 0) {
			/* From the start of the free pages: all of them before d, or some of
			 * d's block too. */
			d -= k;
			uslub_zone_unlock(n);
			d->flags = 0;
			d->order = (uint8_t)order;
			return d;
		}
		if (!(d->flags & PF_RELEASED)) {
			/* Its tail and the halves beyond its order stay free, split in
			 * place under the lock held. */
			uslub_take_pages_locked(n, d, npages);
			uslub_zone_unlock(n);
			d->order = (uint8_t)order;
			return d;
		}
		d = uslub_take_block(n, d, order);
		if (!d)
			return NULL;
		if (npages < (1UL << order))
			uslub_pages_free_range(d + npages, (1UL << order) - npages);
		return d;
	}
	tries = tries < RUN_TRIES ? RUN_TRIES - tries : 0; /* counts up to RUN_TRIES */
	for (unsigned o = order; o-- > 0 && tries < RUN_TRIES;) {
		struct page_desc *h;
		cds_list_for_each_entry(h, &n->free_area[o], list)
		{
			if (++tries > RUN_TRIES)
				break;
			if (run_length(h, npages) < npages || claim_locked(n, h, npages) != 0)
				continue;
			n->runs++;
			n->large_next = h + npages;
			uslub_zone_unlock(n);
			h->flags = 0;
			h->order = (uint8_t)order;
			return h;
		}
	}
	uslub_zone_unlock(n);
	return NULL;
}

struct page_desc *uslub_pages_alloc_exact(unsigned node, unsigned order, size_t npages,
					  bool aligned, unsigned gfp)
{
	struct page_desc *d = uslub_pages_alloc(node, order, gfp);
	if (!d)
		return NULL;
	/* Moved back to the start of the free pages before it, as in alloc_run: a block cut
	 * from a fresh step continues where the last one before the step ended. */
	struct uslub_node *n = region_of(d)->node; /* a borrowed block: the slab zone */
	struct page_desc *end = d + (1UL << order), *start = d;
	unsigned flags = d->flags & PF_COLD; /* of what is given back: a tail is as fresh */
	uslub_lock(&n->lock, USLUB_LOCK_ZONE);
	size_t k = aligned ? 0 : free_before(d);
	if (k && claim_locked(n, d - k, k < npages ? k : npages) == 0) {
		start = d - k;
		d->flags = 0;
		start->flags = 0;
		start->order = (uint8_t)order;
	}
	struct page_desc *rest = start + npages > d ? start + npages : d;
	uslub_free_range_locked(n, rest, (size_t)(end - rest), flags, (uint16_t)uslub_step_now());
	if (n == &uslub_nodes[node])
		n->large_next = start + npages;
	uslub_zone_unlock(n);
	return start;
}

/* ---- spans: blocks larger than the largest buddy block ---------------------------- */

/* Whether the free blocks over [h, h + npages) are all cold (never touched, or handed
 * back): calloc need not clear such a block. Under the lock; all the pages are free. */
static bool span_cold(struct page_desc *h, size_t npages)
{
	for (size_t i = 0; i < npages;) {
		struct page_desc *b = uslub_free_block_of(h + i);
		if (!(b->flags & PF_COLD))
			return false;
		i = (size_t)(b + (1UL << b->order) - h);
	}
	return true;
}

static struct page_desc *span_claim(struct uslub_node *n, struct page_desc *h, size_t npages)
{
	bool cold = span_cold(h, npages);
	if (claim_locked(n, h, npages) != 0)
		return NULL; /* a block handed back that the OS would not open again */
	n->runs++;
	h->flags = cold ? PF_COLD : 0;
	h->order = USLUB_MAX_ORDER;
	return h;
}

/* Where the free pages that hold free block h begin: those right before it too. */
static struct page_desc *span_start(struct page_desc *h)
{
	return h - free_before(h);
}

/* Pages of [d, d + npages), all free, in blocks not marked cold: the ones a buffer cut
 * there would not fault in (a warm block merged with a fresh one counts whole, as in the
 * zone's count). Under the lock. */
static size_t warm_in(struct page_desc *d, size_t npages)
{
	struct page_desc *end = d + npages, *b = uslub_free_block_of(d);
	size_t warm = 0;
	while (b && b < end) {
		struct page_desc *next = b + (1UL << b->order);
		if (!(b->flags & PF_COLD))
			warm += (size_t)((next < end ? next : end) - (b > d ? b : d));
		b = next < end ? free_head_at(next) : NULL;
	}
	return warm;
}

/* Runs remembered in one search, so that the blocks of a run looked at already are passed
 * over: a run of many MiB is many blocks on the lists, each of which led back to the same
 * run (a third of malloc_large's time in the allocator went to walking them again). */
#define SPAN_RUNS 16
/* Warm stretches of a run a buffer is tried at the start of, at most. */
#define SPAN_STRETCHES 8

struct span_fit {
	size_t npages;
	struct page_desc *best; /* NULL until a run holds the buffer */
	size_t warm;		/* warm pages at best */
	size_t len;		/* free pages in best's run, up to twice npages */
	struct page_desc *run_lo[SPAN_RUNS], *run_hi[SPAN_RUNS];
	unsigned runs;
};

static bool span_seen(const struct span_fit *f, const struct page_desc *h)
{
	unsigned n = f->runs < SPAN_RUNS ? f->runs : SPAN_RUNS;
	for (unsigned i = 0; i < n; i++)
		if (h >= f->run_lo[i] && h < f->run_hi[i])
			return true;
	return false;
}

/* The buffer at d, in a run of `len` free pages (counted up to twice the buffer), if more
 * of its pages are warm than at the best place yet; as many, a block of at most a
 * MAX_BLOCK goes to the shorter run (the tightest fit: such blocks come and go among
 * bigger ones, and a hole one leaves is the next one's), a span to the lower address
 * (a tight fit for spans left big_buffers' next buffers short of room: half as many
 * faults again, tools/bench/results/big-buffers.md). */
static void span_consider(struct span_fit *f, struct page_desc *d, size_t len)
{
	if (d == f->best)
		return;
	size_t w = warm_in(d, f->npages);
	bool tight = f->npages <= (1UL << USLUB_MAX_ORDER) && len != f->len;
	if (!f->best || w > f->warm || (w == f->warm && (tight ? len < f->len : d < f->best))) {
		f->best = d;
		f->warm = w;
		f->len = len;
	}
}

/* The run of free pages from `start`, a free block's first page: the buffer at its
 * start, at its end, and where each warm stretch in it begins. Walked to twice the
 * buffer's length at most: a longer run is cut at its start, which keeps its free memory
 * in one piece (placed at the ends of runs up to four times as long, the holes left
 * before them cost rlimit_python's small objects 8% of their address space). Under the
 * lock. */
static void span_fit_run(struct span_fit *f, struct page_desc *start)
{
	struct region *r = region_of(start);
	size_t cap = 2 * f->npages, got = 0;
	struct page_desc *stretch[SPAN_STRETCHES];
	unsigned stretches = 0;
	bool warm_before = false;
	for (struct page_desc *b; got < cap && (b = run_next(r, start + got));) {
		bool warm = !(b->flags & PF_COLD);
		if (warm && !warm_before && got && stretches < SPAN_STRETCHES)
			stretch[stretches++] = b;
		warm_before = warm;
		got = (size_t)(b + (1UL << b->order) - start);
	}
	f->run_lo[f->runs % SPAN_RUNS] = start;
	f->run_hi[f->runs % SPAN_RUNS] = start + got;
	f->runs++;
	if (got < f->npages)
		return;
	span_consider(f, start, got);
	if (got < cap)
		span_consider(f, start + got - f->npages, got);
	for (unsigned i = 0; i < stretches; i++)
		if ((size_t)(stretch[i] - start) + f->npages <= got)
			span_consider(f, stretch[i], got);
}

/* The most warm pages a place for npages can have in zone n: no place beats one that has
 * them. Under the lock. */
static size_t warm_most(const struct uslub_node *n, size_t npages)
{
	return npages < n->warm_free_pages ? npages : n->warm_free_pages;
}

/* The runs of the blocks of more than PLACED_PAGES freed here last, looked at before the
 * search: the best place in them is taken when no place can have more warm pages - all
 * npages warm, or all the zone's warm free pages in it (warm_free_pages counts exactly the
 * pages warm_in counts) - so what gives way is only the search's tie-break among places
 * as warm (the lowest address, the tightest run) to the memory freed last, as a program
 * that replaces a buffer hands it its own run back. The search walked some 22 runs of the
 * heap for each MiB buffer, 12,000 instructions (tools/bench/results/recent-runs.md).
 * Hints are pages, not blocks: a page a hint names may since be in use, merged or no
 * longer grown; it is looked up again here. Under the lock. */
static struct page_desc *recent_fit(struct uslub_node *n, struct span_fit *f)
{
	for (unsigned i = 0; i < FREED_HINTS; i++) {
		struct page_desc *p = n->freed[i];
		struct region *r = p ? region_of(p) : NULL;
		struct page_desc *b =
		    r && r->node == n && page_index(p) < r->grown ? uslub_free_block_of(p) : NULL;
		if (!b)
			n->freed[i] = NULL;
		else if (!span_seen(f, b))
			span_fit_run(f, span_start(b));
	}
	if (!f->best || f->warm < warm_most(n, f->npages))
		return NULL;
	struct page_desc *d = span_claim(n, f->best, f->npages);
	/* What is left of the run past the block is where the next one looks. */
	for (unsigned i = 0; d && i < FREED_HINTS; i++)
		if (n->freed[i] >= d && n->freed[i] < d + f->npages)
			n->freed[i] = d + f->npages;
	return d;
}

/* A big buffer's pages come from free memory first, where the most of them are warm:
 * among the runs of free pages that hold npages and start at up to RUN_TRIES free blocks
 * (largest first), a buffer placed at a run's start, at its end, or at a warm block in
 * it; the lowest of those as warm as the best (for a placed block of at most a MAX_BLOCK,
 * the shortest run: span_consider). Warm pages are reused rather than faulted
 * in while others are handed back (section 9 of decay.c): big_buffers took 45,900 page faults
 * for the same 144 MiB peak, against 67,500 for the lowest run alone (the model,
 * tools/bench/span_model.py, keeping a quarter: 236-345 MiB faulted in against 363-798;
 * tools/bench/results/big-buffers.md). Address order breaks ties because it packs
 * buffers low and leaves the free memory above them in one piece; the first run found
 * instead left holes too short for the next buffer, and the heap grew past them
 * (malloc_large's peak RSS 541 MiB against 502; best fit 508). Then the zone grows at
 * the top of its newest region, a block at a time, until the free pages there reach
 * npages. A program that replaces such buffers so reuses the pages it has: a mapping of
 * its own for each, mapped, moved by mremap and faulted in anew, cost 15-40 us a page on
 * this VM (tools/bench/results/big-buffers.md). */
static struct page_desc *alloc_span(unsigned node, size_t npages, bool grow)
{
	struct uslub_node *n = &uslub_nodes[node];
	uslub_zone_ready(node);
	struct page_desc *h, *d = NULL;
	struct span_fit f = {.npages = npages};
	bool reclaimed = false;
	/* A run of 2^(k+1) free pages or more holds a whole naturally aligned 2^k of them,
	 * which the buddy has merged into one free block of order k or more: so a run that
	 * holds the buffer is found from a block of order `lo` or above, and the many small
	 * holes between blocks in use are never walked: a MiB replacement's 21,000
	 * instructions became 12,400 (span-search.md). The places looked at can change: a
	 * run's start lies at most BEFORE_TRIES blocks back from the block it is found from,
	 * and a small block near the start of a run of many no longer finds it. A run whose
	 * halves could not merge (the OS refused to open one, buddy.c) may be passed over;
	 * the zone then grows, as when no run holds the buffer. */
	unsigned lo = 63 - (unsigned)__builtin_clzl(npages);
	lo = lo ? lo - 1 : 0;
	if (lo > USLUB_MAX_ORDER)
		lo = USLUB_MAX_ORDER;
	uslub_lock(&n->lock, USLUB_LOCK_ZONE);
	d = recent_fit(n, &f);
again:;
	/* The search stops at the first place no other can beat on warm pages, as the recent
	 * runs' look does: the lists hold warm blocks newest first, so that is memory freed
	 * recently, and the tie-break by address or run length is left to places found
	 * otherwise. Searching on cost the misses of the recent runs 12,000 instructions
	 * (22% of the searches of 2 MiB blocks): 1.17x at 2 MiB and 1.12x at 4 MiB on one
	 * thread, and malloc_large's peak 474.8 MiB against 483.8
	 * (tools/bench/results/recent-runs.md). */
	size_t most = warm_most(n, npages);
	bool done = d || (f.best && f.warm >= most);
	for (unsigned o = USLUB_MAX_ORDER + 1, tries = 0; !done && o-- > lo && tries < RUN_TRIES;)
		cds_list_for_each_entry(h, &n->free_area[o], list)
		{
			if (++tries > RUN_TRIES)
				break;
			if (span_seen(&f, h))
				continue;
			span_fit_run(&f, span_start(h));
			if ((done = f.best && f.warm >= most))
				break;
		}
	if (!d && f.best)
		d = span_claim(n, f.best, npages);
	if (!d && n->ext_pages) {
		/* Before the zone grows or says it has no room, the runs it keeps whole
		 * (extent.c) join the search. */
		uslub_extents_flush_locked(n);
		f = (struct span_fit){.npages = npages};
		goto again;
	}
	/* Each step is at most a MAX_BLOCK, and smaller ones (up to USLUB_MAX_ORDER of
	 * them) align a new region's first pages; a new region (the old one full) starts
	 * over. Without the alignment steps a program's first big buffer found the zone too
	 * short and became a mapping of its own. */
	for (size_t steps = grow ? (npages >> USLUB_MAX_ORDER) + 2 + USLUB_MAX_ORDER : 0;
	     !d && steps; steps--) {
		if (uslub_grow(n, USLUB_MAX_ORDER) != 0)
			break;
		struct region *r = n->regions;
		struct page_desc *last = uslub_free_block_of((struct page_desc *)r + r->grown - 1);
		if (last && run_length(span_start(last), npages) >= npages)
			d = span_claim(n, span_start(last), npages);
	}
	if (!d && grow && !reclaimed && uslub_config.mem_limit) {
		/* What the steps above grew counts against the cap too. */
		uslub_reclaim_locked(n, node);
		reclaimed = true;
		f = (struct span_fit){.npages = npages};
		goto again;
	}
	uslub_zone_unlock(n);
	if (!d)
		errno = ENOMEM;
	else if (npages > (1UL << USLUB_MAX_ORDER))
		/* Only spans pay: a placed block paying for its fresh pages in a heap that
		 * reused every piece made realloc_mix with sizes up to 4 MiB fault 11.3
		 * million pages in against 0.35 (big-buffers.md). */
		uslub_pages_pay(n, d, npages);
	return d;
}

struct page_desc *uslub_pages_alloc_span(unsigned node, size_t npages)
{
	return alloc_span(node, npages, true);
}

struct page_desc *uslub_pages_find_span(unsigned node, size_t npages)
{
	return alloc_span(node, npages, false);
}
