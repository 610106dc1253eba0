/* The buddy allocator: free lists per order, split and merge, taking and giving back
 * blocks. The page layer's essay is spread over its files, each section beside its code:
 * 1-2 and 5 in region.c, 3-4 here, 6-7 in decay.c.
 *
 * 3. Zones. Each node has two page allocators (page.h): slabs, and large blocks, with
 *    regions of their own. The large zone makes its first region only when it first
 *    grows, and borrows from the slab zone before that, so a program without large blocks
 *    never maps one.
 *
 * 4. Free lists. Free blocks sit on one list per order, warm ones (recently used, so
 *    probably resident) at the head and cold ones (never touched, or handed back with
 *    MADV_DONTNEED) at the tail, so allocation reuses warm memory first.
 *
 *    A free block is marked in its first page's descriptor (kind PAGE_FREE and its order);
 *    the descriptors inside it are clear, so a stale pointer into a free block never looks
 *    like a slab. Merging needs no bounds checks: the buddy of a block below order 10
 *    lies in the same 2^10-page chunk, and the descriptors of pages not grown read as
 *    zero. */
#include "page/page.h"

#include "hooks.h"
#include "os/options.h"
#include "os/os.h"
#include "os/vg.h"

#include <errno.h>
#include <limits.h>

struct uslub_node uslub_nodes[NR_ZONES];

static inline struct page_desc *buddy_of(struct page_desc *d, unsigned order)
{
	uintptr_t a = (uintptr_t)d;
	return (struct page_desc *)(a ^ ((uintptr_t)1 << (order + DESC_SHIFT)));
}

/* A warm block's `objects` holds the decay step in which it went free (decay.c, section 6).
 * The block's last page keeps its order as a hint for uslub_free_block_of, in the slab
 * word, the one field every writer stores atomically (a last page may be another
 * thread's slab head later, while the zone's walks still read it). */
static void list_insert(struct uslub_node *n, struct page_desc *d, unsigned order, unsigned flags,
			uint16_t stamp)
{
	__atomic_store_n(&d->kind, PAGE_FREE, __ATOMIC_RELAXED);
	if (order)
		atomic_store_explicit(&d[(1UL << order) - 1].word, order, memory_order_relaxed);
	d->order = (uint8_t)order;
	d->flags = (uint8_t)flags;
	d->head = NULL;
	d->owner = NULL;
	if (flags & PF_COLD) {
		cds_list_add_tail(&d->list, &n->free_area[order]);
		if (flags & PF_RELEASED) {
			n->released_free_pages += 1UL << order;
			__atomic_store_n(&n->released_blocks, n->released_blocks + 1,
					 __ATOMIC_RELAXED);
		}
	} else {
		cds_list_add(&d->list, &n->free_area[order]);
		n->warm_free_pages += 1UL << order;
		n->nr_warm[order]++;
		d->objects = stamp;
	}
	n->nr_free[order]++;
	n->free_pages += 1UL << order;
}

void uslub_list_remove(struct uslub_node *n, struct page_desc *d)
{
	unsigned order = d->order;
	cds_list_del(&d->list);
	n->nr_free[order]--;
	n->free_pages -= 1UL << order;
	if (!(d->flags & PF_COLD)) {
		n->warm_free_pages -= 1UL << order;
		n->nr_warm[order]--;
	} else if (d->flags & PF_RELEASED) {
		n->released_free_pages -= 1UL << order;
		__atomic_store_n(&n->released_blocks, n->released_blocks - 1, __ATOMIC_RELAXED);
	}
	__atomic_store_n(&d->kind, PAGE_UNUSED, __ATOMIC_RELAXED);
}

/* Halves d and b of one order to merge, one of them handed back to the OS (released:
 * uncounted, and maybe inaccessible, decay.c) and the other not; under the lock. Merged
 * halves are released only if both are. So the released half is counted as mapped again
 * and made accessible; where the OS refuses that, or a cap is set (where the figure must
 * stay exact), the other half goes back to the OS too. d's flags as merged, or -1 where
 * neither could be done (the two then stay apart). Out of line: the merge loop is on
 * every free's way. */
static noinline int merge_released(struct uslub_node *n, struct page_desc *d, struct page_desc *b,
				   unsigned order, unsigned flags)
{
	struct page_desc *warm = (flags & PF_RELEASED) ? b : d;
	struct page_desc *gone = warm == b ? d : b;
	bool open = !uslub_config.mem_limit &&
		    uslub_os_protect(page_address(gone), block_bytes(order), true) == 0;
	if (!open && uslub_os_release(page_address(warm), block_bytes(order)) == 0) {
		atomic_fetch_sub(&uslub_mapped_bytes, block_bytes(order));
		__atomic_fetch_add(&n->released_bytes, block_bytes(order), __ATOMIC_RELAXED);
		b->flags |= PF_RELEASED | PF_COLD;
		return (int)(flags | PF_RELEASED | PF_COLD);
	}
	if (!open && (!uslub_config.mem_limit ||
		      uslub_os_protect(page_address(gone), block_bytes(order), true) != 0))
		return -1;
	uslub_mapped_add(block_bytes(order));
	return (int)flags;
}

/* Put one naturally aligned block back and merge it with free buddies, under the lock.
 * `stamp`: the decay step it went free in, when warm. */
void uslub_free_one(struct uslub_node *n, struct page_desc *d, unsigned order, unsigned flags,
		    uint16_t stamp)
{
	while (order < USLUB_MAX_ORDER) {
		struct page_desc *b = buddy_of(d, order);
		if (__atomic_load_n(&b->kind, __ATOMIC_RELAXED) != PAGE_FREE || b->order != order)
			break;
		uslub_list_remove(n, b);
		/* Two warm halves of one size: the merged block went free, on average over its
		 * pages, halfway between them (so a page freed next to a long-free block does
		 * not make it all look new, nor the other way round). */
		if (!(b->flags & PF_COLD))
			stamp = (flags & PF_COLD)
				    ? b->objects
				    : (uint16_t)(stamp + (int16_t)(b->objects - stamp) / 2);
		if (unlikely((flags ^ b->flags) & PF_RELEASED)) {
			int merged = merge_released(n, d, b, order, flags);
			if (merged < 0) {
				/* The OS refused both (d keeps the stamp taken from b: an age,
				 * no more). */
				list_insert(n, b, order, b->flags, b->objects);
				break;
			}
			flags = (unsigned)merged;
		}
		flags &= b->flags;
		if (b < d) {
			/* Inside a free block now: naming no block, as a bare block's tail
			 * pages must when it is cut from here (slab.h, PF_BARE). */
			__atomic_store_n(&d->kind, PAGE_UNUSED, __ATOMIC_RELAXED);
			d->head = NULL;
			d = b;
		}
		order++;
	}
	list_insert(n, d, order, flags, stamp);
}

/* The first block of at least `order` that the flags allow, under the lock. Warm blocks
 * head each list and cold ones trail it, so looking at both ends suffices. */
struct page_desc *uslub_find_block(struct uslub_node *n, unsigned order, unsigned gfp)
{
	for (unsigned o = order; o <= USLUB_MAX_ORDER; o++) {
		struct cds_list_head *h = &n->free_area[o];
		if (cds_list_empty(h))
			continue;
		struct page_desc *first = cds_list_entry(h->next, struct page_desc, list);
		struct page_desc *last = cds_list_entry(h->prev, struct page_desc, list);
		struct page_desc *d = (gfp & GFP_COLD) ? last : first;
		if ((gfp & GFP_WARM) && (d->flags & PF_COLD))
			continue;
		if ((gfp & GFP_COLD) && !(d->flags & PF_COLD))
			continue; /* the replenisher wants memory to warm: grow rather */
		/* A block handed back to the OS counts again once used: not past the cap. */
		if ((d->flags & PF_RELEASED) && uslub_over_limit(block_bytes(o))) {
			d = first;
			if (d->flags & PF_RELEASED)
				continue;
		}
		return d;
	}
	return NULL;
}

/* Pages [npages, 2^order) of block d, just off the lists, back on them in the largest
 * naturally aligned pieces, lowest first: at offset i, 2^ctz(i) pages, which end at or
 * before the block's end (a power of two above i). Each piece's buddy, at i - 2^k (i is
 * an odd multiple of 2^k), holds page npages - 1, so none can merge and none is tried, as
 * the buddy's own split puts halves back. Under the lock. */
static void split_off(struct uslub_node *n, struct page_desc *d, size_t npages, unsigned flags)
{
	size_t end = 1UL << d->order;
	for (size_t i = npages; i < end;) {
		unsigned k = (unsigned)__builtin_ctzl(i);
		list_insert(n, d + i, k, flags, d->objects);
		i += 1UL << k;
	}
}

/* Take block d out of zone n's lists, giving back what lies beyond `order`; the lock is
 * held and dropped here. */
struct page_desc *uslub_take_block(struct uslub_node *n, struct page_desc *d, unsigned order)
{
	unsigned flags = d->flags;
	uslub_list_remove(n, d);
	split_off(n, d, 1UL << order, flags); /* the halves, free as long as d */
	uslub_note_reuse(n);
	if (flags & PF_RELEASED) {
		/* The halves split off above stay uncounted; only this block returns. */
		uslub_mapped_add(block_bytes(order));
	}
	uslub_zone_unlock(n);
	/* Handed back, it was made inaccessible (decay.c): accessible again, or - where the
	 * OS refuses - back to the lists as it was, and no block. */
	if ((flags & PF_RELEASED) &&
	    uslub_os_protect(page_address(d), block_bytes(order), true) != 0) {
		uslub_lock(&n->lock, USLUB_LOCK_ZONE);
		atomic_fetch_sub(&uslub_mapped_bytes, block_bytes(order));
		uslub_free_one(n, d, order, flags, 0);
		uslub_zone_unlock(n);
		errno = ENOMEM;
		return NULL;
	}
	d->flags = (uint8_t)(flags & PF_COLD);
	d->order = (uint8_t)order;
	if (uslub_memcheck) {
		/* Pages of a freed large block were left inaccessible; fresh or handed-back
		 * ones read as zero. */
		if (flags & (PF_COLD | PF_RELEASED))
			vg_defined(page_address(d), (size_t)block_bytes(order));
		else
			vg_undefined(page_address(d), (size_t)block_bytes(order));
	}
	return d;
}

void uslub_take_pages_locked(struct uslub_node *n, struct page_desc *d, size_t npages)
{
	unsigned flags = d->flags;
	uslub_list_remove(n, d);
	/* The tail too, not only the halves: freed through the free path, merges tried, it
	 * was 820 of such a cut's 1,180 instructions (tools/bench/results/split-tails.md). */
	split_off(n, d, npages, flags);
	uslub_note_reuse(n);
	d->flags = (uint8_t)(flags & PF_COLD);
	if (uslub_memcheck) {
		if (flags & PF_COLD)
			vg_defined(page_address(d), npages << USLUB_PAGE_SHIFT);
		else
			vg_undefined(page_address(d), npages << USLUB_PAGE_SHIFT);
	}
}

/* Before the large-block zone grows the heap, it borrows a free block from the node's slab
 * zone (the block stays in its region, and goes back to that zone when freed). Only this
 * way round: slab pages borrowed into the large zone's regions would split its free blocks
 * again (tools/bench/results/), while a large block in a slab region leaves gaps that slabs fill.
 * The slab zone borrows only when it cannot grow (at the memory cap). */
static struct page_desc *borrow_from(unsigned other, unsigned order, unsigned gfp)
{
	struct uslub_node *o = &uslub_nodes[other];
	if (!zone_made(other))
		return NULL;
	uslub_lock(&o->lock, USLUB_LOCK_ZONE);
	struct page_desc *d = uslub_find_block(o, order, gfp);
	if (!d) {
		uslub_zone_unlock(o);
		return NULL;
	}
	return uslub_take_block(o, d, order);
}

/* A large-block zone borrows from its node's slab zone; the slab zone from the node's
 * large-block zones, arena by arena. */
static struct page_desc *borrow(unsigned node, unsigned order, unsigned gfp)
{
	if (node >= MAX_NODES)
		return borrow_from(node % MAX_NODES, order, gfp);
	struct page_desc *d = NULL;
	for (unsigned a = 0; !d && a < uslub_nr_arenas; a++)
		d = borrow_from(LARGE_ARENA_ZONE(node, a), order, gfp);
	return d;
}

void uslub_reclaim_locked(struct uslub_node *n, unsigned node)
{
	n->reclaims++;
	uslub_zone_unlock(n);
	uslub_release_blocks(node % MAX_NODES, 0, RELEASE_ALL);
	for (unsigned a = 0; a < uslub_nr_arenas; a++) {
		uslub_release_blocks(LARGE_ARENA_ZONE(node % MAX_NODES, a), 0, RELEASE_ALL);
		uslub_release_blocks(MEDIUM_ARENA_ZONE(node % MAX_NODES, a), 0, RELEASE_ALL);
	}
	uslub_lock(&n->lock, USLUB_LOCK_ZONE);
}

struct page_desc *uslub_pages_alloc(unsigned node, unsigned order, unsigned gfp)
{
	struct uslub_node *n = &uslub_nodes[node];
	uslub_zone_ready(node);
	if (gfp & GFP_TRYLOCK) {
		if (!uslub_trylock(&n->lock, USLUB_LOCK_ZONE)) {
			__atomic_fetch_add(&n->nowait_misses, 1, __ATOMIC_RELAXED);
			return NULL;
		}
	} else {
		uslub_lock(&n->lock, USLUB_LOCK_ZONE);
	}
	struct page_desc *d;
	bool reclaimed = false, borrowed = false, asked = zone_is_large(node) || node < MAX_NODES;
	while (!(d = uslub_find_block(n, order, gfp))) {
		if (gfp & GFP_NOGROW) {
			n->nowait_misses++;
			uslub_zone_unlock(n);
			return NULL;
		}
		if (n->ext_pages) {
			uslub_extents_flush_locked(n); /* the block may be among them */
			continue;
		}
		/* The large zone borrows before it grows, a medium zone where the lenders' locks
		 * are free (arena.c); the slab zone only when it cannot grow (at the cap, where
		 * memory beats tidiness). */
		if (!asked) {
			uslub_zone_unlock(n);
			if ((d = uslub_medium_borrow(node, order, gfp)))
				return d;
			uslub_lock(&n->lock, USLUB_LOCK_ZONE);
			asked = true;
			continue;
		}
		if (!borrowed && !zone_is_large(node) && uslub_grow(n, order) == 0)
			continue;
		if (!borrowed) {
			/* One zone's lock at a time: no order between the two to keep. */
			uslub_zone_unlock(n);
			d = borrow(node, order, gfp);
			if (d)
				return d;
			uslub_lock(&n->lock, USLUB_LOCK_ZONE);
			borrowed = true;
			continue;
		}
		if (uslub_grow(n, order) == 0)
			continue;
		if (reclaimed || !uslub_config.mem_limit) {
			uslub_zone_unlock(n);
			errno = ENOMEM;
			return NULL;
		}
		/* Only blocking allocations get here; the high-order try never does. */
		uslub_reclaim_locked(n, node);
		reclaimed = true;
		borrowed = false;
	}
	d = uslub_take_block(n, d, order);
	if (!(gfp & GFP_TRYLOCK))
		uslub_maybe_decay(n);
	return d;
}

static void clear_tails(struct page_desc *d, size_t npages)
{
	for (size_t i = 1; i < npages; i++)
		d[i].head = NULL;
}

void uslub_free_range_locked(struct uslub_node *n, struct page_desc *d, size_t npages,
			     unsigned flags, uint16_t stamp)
{
	uintptr_t idx = page_index(d);
	while (npages) {
		/* The largest block that starts at idx and fits: the lowest set bit of idx, the
		 * highest of npages (a loop of one step an order cost a 2 MiB block's free some
		 * 180 instructions). */
		unsigned o =
		    (unsigned)(sizeof(long) * CHAR_BIT - 1) - (unsigned)__builtin_clzl(npages);
		unsigned low = idx ? (unsigned)__builtin_ctzl(idx) : o;
		if (low < o)
			o = low;
		if (o > USLUB_MAX_ORDER)
			o = USLUB_MAX_ORDER;
		uslub_free_one(n, d, o, flags, stamp);
		d += 1UL << o;
		idx += 1UL << o;
		npages -= 1UL << o;
	}
}

static void free_range(struct page_desc *d, size_t npages, bool marked)
{
	struct uslub_node *n = region_of(d)->node;
	uint32_t step = uslub_step_now();
	if (marked)
		clear_tails(d, npages);
	d->owner = NULL;
	/* A big block the program did not write through goes free cold (decay.c, 11). */
	unsigned flags = npages > PLACED_PAGES ? uslub_pages_unfilled(n, d, npages, step) : 0;
	uslub_lock(&n->lock, USLUB_LOCK_ZONE);
	/* A bare block kept whole where the zone keeps extents (extent.c): one of more
	 * than PLACED_PAGES, or one beside an extent; unless the look above handed its
	 * pages back. Smaller blocks are the buddy's, whose runs pack them end to end
	 * (blocks of up to 512 KiB replaced at random ran at 0.7x as extents). */
	if (marked || flags || npages > (1UL << USLUB_MAX_ORDER) ||
	    !uslub_extent_put_locked(n, d, npages, (uint16_t)step, npages > PLACED_PAGES))
		uslub_free_range_locked(n, d, npages, flags, (uint16_t)step);
	/* Where a big block's search looks first once the buddy has these pages again. */
	if (npages > PLACED_PAGES)
		n->freed[n->freed_next++ % FREED_HINTS] = d;
	uslub_note_free(n);
	uint64_t warm = n->warm_free_pages;
	uslub_zone_unlock(n);
	if (step != atomic_load_explicit(&n->decay_last, memory_order_relaxed))
		uslub_decay_zone(n, step);
	uslub_pages_bound();
	uslub_hooks.background_note(warm << USLUB_PAGE_SHIFT);
}

void uslub_pages_free_range(struct page_desc *d, size_t npages)
{
	free_range(d, npages, true);
}

void uslub_pages_free_bare(struct page_desc *d, size_t npages)
{
	free_range(d, npages, false);
}

void uslub_pages_free_blocks(struct page_desc *const *ds, const uint16_t *npages, unsigned k)
{
	uint32_t step = uslub_step_now();
	struct uslub_node *n = NULL;
	uint64_t warm = 0;
	for (unsigned i = 0; i < k; i++) {
		struct uslub_node *zone = region_of(ds[i])->node;
		clear_tails(ds[i], npages[i]);
		ds[i]->owner = NULL;
		if (zone != n) {
			if (n) {
				uslub_note_free(n);
				uslub_zone_unlock(n);
			}
			n = zone;
			uslub_lock(&n->lock, USLUB_LOCK_ZONE);
		}
		uslub_free_range_locked(n, ds[i], npages[i], 0, (uint16_t)step);
	}
	if (!n)
		return;
	uslub_note_free(n);
	warm = n->warm_free_pages;
	uslub_zone_unlock(n);
	if (step != atomic_load_explicit(&n->decay_last, memory_order_relaxed))
		uslub_decay_zone(n, step);
	uslub_pages_bound();
	uslub_hooks.background_note(warm << USLUB_PAGE_SHIFT);
}

void uslub_pages_free(struct page_desc *d, unsigned order)
{
	uslub_pages_free_range(d, 1UL << order);
}

/* The free block whose last page is d, or NULL. Every free block's last page says its
 * block's order (list_insert; an order-0 block's is its head): the value is checked
 * against the block it names, so a stale one, or a slab's word, answers NULL. The span
 * search asks this of the page before each free block it starts from (run.c,
 * free_before); the search of every order that uslub_free_block_of makes took half the
 * instructions of a MiB buffer's malloc (some 19,000, under the zone's lock, while the
 * other thread of two waited: tools/bench/results/span-search.md). */
struct page_desc *uslub_free_block_ending(struct page_desc *d)
{
	uintptr_t idx = page_index(d);
	if (idx < FIRST_PAGE)
		return NULL;
	if (__atomic_load_n(&d->kind, __ATOMIC_RELAXED) == PAGE_FREE)
		return d->order == 0 ? d : NULL;
	uint64_t hint = atomic_load_explicit(&d->word, memory_order_relaxed);
	if (!hint || hint > USLUB_MAX_ORDER)
		return NULL;
	uintptr_t len = 1UL << hint;
	if (((idx + 1) & (len - 1)) || idx + 1 - len < FIRST_PAGE)
		return NULL;
	struct page_desc *h = d - (len - 1);
	if (__atomic_load_n(&h->kind, __ATOMIC_RELAXED) == PAGE_FREE && h->order == hint)
		return h;
	return NULL;
}

/* The free block that holds page `d`, or NULL if the page is in use. A free head is its
 * own; any other page, the search of every order. */
struct page_desc *uslub_free_block_of(struct page_desc *d)
{
	uintptr_t idx = page_index(d);
	if (__atomic_load_n(&d->kind, __ATOMIC_RELAXED) == PAGE_FREE)
		return idx >= FIRST_PAGE ? d : NULL;
	for (unsigned o = 0; o <= USLUB_MAX_ORDER; o++) {
		uintptr_t start = idx & ~((1UL << o) - 1);
		if (start < FIRST_PAGE)
			return NULL;
		struct page_desc *h = d - (idx - start);
		if (__atomic_load_n(&h->kind, __ATOMIC_RELAXED) == PAGE_FREE && h->order == o)
			return h;
	}
	return NULL;
}

/* Zone n's lock, once no block of it is away being handed back (hand_back): fork must
 * not copy a heap whose blocks are on no list - a child would have lost them - nor may
 * the heap walker see one. The hand-back needs only this zone's lock to finish. */
static void lock_quiet(struct uslub_node *n)
{
	uslub_lock(&n->lock, USLUB_LOCK_ZONE);
	while (n->handing_back) {
		uslub_zone_unlock(n);
		uslub_os_yield();
		uslub_lock(&n->lock, USLUB_LOCK_ZONE);
	}
}

void uslub_pages_lock_all(void)
{
	USLUB_OUT(pthread_mutex_lock(&uslub_zone_make_lock));
	for (unsigned i = 0; i < uslub_nr_nodes; i++) {
		lock_quiet(&uslub_nodes[i]);
		for (unsigned a = 0; a < uslub_nr_arenas; a++) {
			if (zone_made(LARGE_ARENA_ZONE(i, a)))
				lock_quiet(&uslub_nodes[LARGE_ARENA_ZONE(i, a)]);
			if (zone_made(MEDIUM_ARENA_ZONE(i, a)))
				lock_quiet(&uslub_nodes[MEDIUM_ARENA_ZONE(i, a)]);
		}
	}
}

void uslub_pages_unlock_all(void)
{
	for (unsigned i = 0; i < uslub_nr_nodes; i++) {
		for (unsigned a = uslub_nr_arenas; a-- > 0;) {
			if (zone_made(MEDIUM_ARENA_ZONE(i, a)))
				pthread_mutex_unlock(&uslub_nodes[MEDIUM_ARENA_ZONE(i, a)].lock);
			if (zone_made(LARGE_ARENA_ZONE(i, a)))
				pthread_mutex_unlock(&uslub_nodes[LARGE_ARENA_ZONE(i, a)].lock);
		}
		pthread_mutex_unlock(&uslub_nodes[i].lock);
	}
	pthread_mutex_unlock(&uslub_zone_make_lock);
}

/* Only the zones in use (the nodes' count is known by now), and of those only the slab
 * zones: all 144 slots made every process touch 106 KiB of them (128 KiB more resident
 * memory at exit); the arenas' zones are made as blocks are cut from them. */
void uslub_pages_init(void)
{
	uslub_pages_use(uslub_nr_nodes, uslub_nr_arenas);
}

void uslub_pages_use(unsigned nodes, unsigned arenas)
{
	for (unsigned z = 0; z < nodes && z < MAX_NODES; z++)
		uslub_zone_ready(z);
	uslub_nr_arenas = arenas;
}

int uslub_pages_check(unsigned node)
{
	struct uslub_node *n = &uslub_nodes[node];
	uint64_t free_pages = 0, warm = 0, released = 0;
	int bad = 0;
	if (!zone_made(node))
		return n->free_pages || n->grown_pages ? 64 : 0; /* nothing, as never made */
	uslub_lock(&n->lock, USLUB_LOCK_ZONE);
	for (unsigned o = 0; o <= USLUB_MAX_ORDER; o++) {
		uint64_t count = 0;
		struct page_desc *d;
		cds_list_for_each_entry(d, &n->free_area[o], list)
		{
			count++;
			free_pages += 1UL << o;
			if (!(d->flags & PF_COLD))
				warm += 1UL << o;
			if (d->flags & PF_RELEASED)
				released += 1UL << o;
			if (d->kind != PAGE_FREE || d->order != o)
				bad |= 1;
			if (page_index(d) & ((1UL << o) - 1))
				bad |= 2; /* not naturally aligned */
			if (o < USLUB_MAX_ORDER) {
				struct page_desc *b = buddy_of(d, o);
				if (__atomic_load_n(&b->kind, __ATOMIC_RELAXED) == PAGE_FREE &&
				    b->order == o)
					bad |= 4; /* two free buddies left unmerged */
			}
			for (size_t i = 1; i < (1UL << o) && i < 64; i++)
				if (d[i].kind != PAGE_UNUSED)
					bad |= 8;
		}
		if (count != n->nr_free[o])
			bad |= 16;
	}
	bad |= uslub_extents_check(n);
	free_pages += n->ext_pages;
	warm += n->ext_pages;
	if (free_pages != n->free_pages || warm != n->warm_free_pages ||
	    released != n->released_free_pages)
		bad |= 32;
	uslub_zone_unlock(n);
	return bad;
}
