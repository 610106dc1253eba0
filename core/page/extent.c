/* Free runs kept whole ("extents"): the large-block zones' front, where a freed block of
 * 1-4 MiB waits as it is, merged with the extents beside it, for the next such block of
 * the zone to be cut from, before the buddy splits it into power-of-two blocks. The page
 * layer's sections 1-11 are in region.c, buddy.c and decay.c; this is 12.
 *
 * 12. Extents. A block of 1-2 MiB replaced at random went through the buddy twice: its
 *     free cut it into up to twenty naturally aligned blocks, each merged with its buddies
 *     (free_one, list_insert, free_block_of), and the next block's search walked the runs
 *     of free blocks for the warmest place (span_fit_run): some 4,000 instructions a
 *     replacement where tcmalloc's page heap takes 900, its spans of any length
 *     coalescing with a look at the pages on either side (docs/design.md, "Free runs kept
 *     whole"; tools/bench/results/extents.md). An extent is such a span, in front of the
 *     buddy:
 *
 *      - its first page's descriptor is the head (kind PAGE_EXTENT, `objects` its pages,
 *        `local_count` the decay step it went free in); its last page's slab word names
 *        the head (the one field every writer stores atomically: buddy.c), so a block
 *        freed right after it finds it in one look; the page right after a block is an
 *        extent's head or no extent's page. The pages between name nothing, as a bare
 *        block's (slab.h, PF_BARE).
 *      - bins by length, four a doubling, on one list each, newest first, with a mask of
 *        the bins that hold one. A block of n pages comes from the first extent of n or
 *        more in its own bin (EXT_BIN_TRIES looked at), else the newest of the next bin
 *        that holds one: an extent is cut at its start, the rest stays an extent.
 *      - the pages count as the zone's warm free pages (the bound, the decay and the
 *        stats see them as free memory), never on the buddy's lists: whatever takes
 *        free blocks off the lists by age or by place first gives every extent to the
 *        buddy (uslub_extents_flush_locked): the decay's pass and the bound's shed, a
 *        hand-back at a cap or malloc_trim, the unmap of a region's top, a span's pay and
 *        its placement, and a search that found no room. So the zone's next decay pass
 *        (one a step, USLUB_DECAY_MS / 8) gives the buddy what an extent held, with the
 *        step it went free in, and ages it as ever.
 *      - only the arenas' zones keep them, only of bare blocks (no checker watches:
 *        large.c, blocks_bare): a block of 1-4 MiB, or a piece freed beside an extent.
 *        Smaller blocks are the buddy's, whose runs pack them end to end; spans are
 *        placed by its search, warmest first. realloc grows a block into the extent
 *        after it (uslub_extent_claim_locked).
 *
 * A second free of a block in an extent finds no live block: its head reads
 * PAGE_EXTENT, or its page names nothing and the block before it is no large one
 * (api.h, uslub_classify), and the program stops with "double free". */
#include "page/page.h"

/* An extent's length is a descriptor's `objects`. */
#define EXT_MAX_PAGES UINT16_MAX
/* Extents of a request's own bin looked at for one long enough, at most. */
#define EXT_BIN_TRIES 8

_Static_assert(EXT_BINS <= 64, "the bins' mask is 64 bits");

static unsigned bin_of(size_t npages)
{
	if (npages < 8)
		return (unsigned)npages;
	unsigned lg = 63 - (unsigned)__builtin_clzl(npages);
	return (lg - 1) * 4 + (unsigned)((npages >> (lg - 2)) & 3);
}

static bool keeps_extents(const struct uslub_node *n)
{
	return zone_is_large((unsigned)(n - uslub_nodes));
}

/* The extent whose last page is t, or NULL: t's word is followed only where it names a
 * descriptor of t's region before t, and believed only where that is an extent ending at
 * t (a stale name, a buddy block's order or a slab's word answers NULL). Under the lock. */
static struct page_desc *extent_ending(struct page_desc *t)
{
	uintptr_t h = (uintptr_t)atomic_load_explicit(&t->word, memory_order_relaxed);
	uintptr_t base = (uintptr_t)t & ~REGION_MASK;
	if (h & ((1UL << DESC_SHIFT) - 1) || h < base + (FIRST_PAGE << DESC_SHIFT) ||
	    h > (uintptr_t)t)
		return NULL;
	struct page_desc *d = (struct page_desc *)h;
	if (__atomic_load_n(&d->kind, __ATOMIC_RELAXED) != PAGE_EXTENT || d + d->objects - 1 != t)
		return NULL;
	return d;
}

/* Pages [d, d + npages) an extent on zone n's bins, went free in `stamp`. */
static void extent_add(struct uslub_node *n, struct page_desc *d, size_t npages, uint16_t stamp)
{
	unsigned b = bin_of(npages);
	d->objects = (uint16_t)npages;
	d->local_count = stamp;
	d->head = NULL;
	d->owner = NULL;
	d->flags = 0;
	__atomic_store_n(&d->kind, PAGE_EXTENT, __ATOMIC_RELAXED);
	atomic_store_explicit(&d[npages - 1].word, (uintptr_t)d, memory_order_relaxed);
	cds_list_add(&d->list, &n->ext_bin[b]);
	__atomic_store_n(&n->ext_mask, n->ext_mask | 1ULL << b, __ATOMIC_RELAXED);
	n->ext_pages += npages;
	n->free_pages += npages;
	n->warm_free_pages += npages;
}

/* Extent d off the bins; its pages name nothing now. */
static void extent_remove(struct uslub_node *n, struct page_desc *d)
{
	size_t npages = d->objects;
	unsigned b = bin_of(npages);
	cds_list_del(&d->list);
	if (cds_list_empty(&n->ext_bin[b]))
		__atomic_store_n(&n->ext_mask, n->ext_mask & ~(1ULL << b), __ATOMIC_RELAXED);
	n->ext_pages -= npages;
	n->free_pages -= npages;
	n->warm_free_pages -= npages;
	__atomic_store_n(&d->kind, PAGE_UNUSED, __ATOMIC_RELAXED);
	atomic_store_explicit(&d[npages - 1].word, 0, memory_order_relaxed);
}

bool uslub_extent_put_locked(struct uslub_node *n, struct page_desc *d, size_t npages,
			     uint16_t stamp, bool alone)
{
	/* A piece that may only join an extent needs none of the looks where there is none
	 * (every free of 128 KiB - 1 MiB in a zone that keeps no extents). */
	if (!keeps_extents(n) || npages > EXT_MAX_PAGES || (!alone && !n->ext_pages))
		return false;
	struct region *r = region_of(d);
	struct page_desc *left = page_index(d) > FIRST_PAGE ? extent_ending(d - 1) : NULL;
	struct page_desc *right = d + npages;
	if (page_index(right) >= r->grown ||
	    __atomic_load_n(&right->kind, __ATOMIC_RELAXED) != PAGE_EXTENT)
		right = NULL;
	if (left && left->objects + npages > EXT_MAX_PAGES)
		left = NULL;
	if (right && right->objects + npages + (left ? left->objects : 0) > EXT_MAX_PAGES)
		right = NULL;
	if (!alone && !left && !right)
		return false;
	d->head = NULL; /* inside the extent, if it joins the one before */
	if (left) {
		npages += left->objects;
		extent_remove(n, left);
		d = left;
	}
	if (right) {
		size_t more = right->objects;
		extent_remove(n, right);
		npages += more;
	}
	extent_add(n, d, npages, stamp);
	return true;
}

/* The start of extent e, npages of it, taken; the rest stays an extent. */
static struct page_desc *extent_cut(struct uslub_node *n, struct page_desc *e, size_t npages)
{
	size_t len = e->objects;
	uint16_t stamp = e->local_count;
	extent_remove(n, e);
	if (len > npages)
		extent_add(n, e + npages, len - npages, stamp);
	n->ext_hits++;
	uslub_note_reuse(n);
	return e; /* flags 0, as every extent's: warm, so calloc clears it */
}

struct page_desc *uslub_extent_take(unsigned zone, size_t npages, bool trylock)
{
	struct uslub_node *n = &uslub_nodes[zone];
	/* A peek: most zones keep none most of the time. */
	if (!__atomic_load_n(&n->ext_mask, __ATOMIC_RELAXED))
		return NULL;
	if (!trylock)
		uslub_lock(&n->lock, USLUB_LOCK_ZONE);
	else if (!uslub_trylock(&n->lock, USLUB_LOCK_ZONE))
		return NULL;
	/* The first long enough of up to EXT_BIN_TRIES in the request's bin, else the newest
	 * of the next bin that holds one (a buffer replaced gets the run it left; the
	 * shortest of those instead faulted big_buffers' pages in 17% more often). */
	unsigned b = bin_of(npages), tries = 0;
	struct page_desc *e = NULL, *h;
	cds_list_for_each_entry(h, &n->ext_bin[b], list)
	{
		if (h->objects >= npages) {
			e = h;
			break;
		}
		if (++tries == EXT_BIN_TRIES)
			break;
	}
	uint64_t above = n->ext_mask >> (b + 1); /* b < EXT_BINS < 64 */
	if (!e && above) {
		struct cds_list_head *list = &n->ext_bin[b + 1 + (unsigned)__builtin_ctzll(above)];
		e = cds_list_entry(list->next, struct page_desc, list);
	}
	if (e)
		e = extent_cut(n, e, npages);
	uslub_zone_unlock(n);
	return e;
}

/* Extent e to the buddy, with the step it went free in. */
static void extent_flush(struct uslub_node *n, struct page_desc *e)
{
	size_t len = e->objects;
	uint16_t stamp = e->local_count;
	extent_remove(n, e);
	uslub_free_range_locked(n, e, len, 0, stamp);
}

void uslub_extents_flush_locked(struct uslub_node *n)
{
	if (!n->ext_pages)
		return;
	for (uint64_t m = n->ext_mask; m; m &= m - 1) {
		struct cds_list_head *list = &n->ext_bin[__builtin_ctzll(m)];
		/* Each pass takes one off the list; the list is as long as the zone has
		 * extents, which each hold a page of it. */
		for (size_t left = n->free_pages; !cds_list_empty(list) && left; left--)
			extent_flush(n, cds_list_entry(list->next, struct page_desc, list));
	}
	n->ext_flushes++;
}

bool uslub_extents_flush(unsigned zone)
{
	struct uslub_node *n = &uslub_nodes[zone];
	if (!__atomic_load_n(&n->ext_mask, __ATOMIC_RELAXED))
		return false;
	uslub_lock(&n->lock, USLUB_LOCK_ZONE);
	bool any = n->ext_pages;
	uslub_extents_flush_locked(n);
	uslub_zone_unlock(n);
	return any;
}

int uslub_extent_claim_locked(struct uslub_node *n, struct page_desc *d, size_t npages)
{
	if (__atomic_load_n(&d->kind, __ATOMIC_RELAXED) != PAGE_EXTENT)
		return -1;
	if (d->objects < npages) {
		/* The buddy claims it with the free blocks after it, if they are enough. */
		extent_flush(n, d);
		return -1;
	}
	extent_cut(n, d, npages);
	return 0;
}

int uslub_extents_check(struct uslub_node *n)
{
	uint64_t pages = 0, mask = 0;
	int bad = 0;
	for (unsigned b = 0; b < EXT_BINS; b++) {
		struct page_desc *e;
		size_t count = 0;
		cds_list_for_each_entry(e, &n->ext_bin[b], list)
		{
			size_t len = e->objects;
			if (e->kind != PAGE_EXTENT || !len || bin_of(len) != b ||
			    extent_ending(e + len - 1) != e || ++count > n->free_pages)
				return bad | 64;
			for (size_t i = 1; i < len && i < 64; i++)
				if (e[i].kind != PAGE_UNUSED || e[i].head)
					bad |= 64;
			pages += len;
			mask |= 1ULL << b;
		}
	}
	if (pages != n->ext_pages || mask != n->ext_mask)
		bad |= 128;
	return bad;
}
