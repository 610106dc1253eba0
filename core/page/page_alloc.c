/* The page allocator: the kernel's buddy system over regions of address space.
 *
 * 1. Regions. A region is a 256 MiB slot of the address space, aligned to its size, so the
 *    region table and page_desc_of find a pointer's region and descriptor at once. Its
 *    first 4 MiB hold one descriptor per page, the next 512 KiB free's 8-byte test of
 *    each page (internal.h); its pages follow, from FIRST_PAGE (1152, so a new region's
 *    first steps are at most 128 pages, until the next is aligned to 1024). A region
 *    hands its pages
 *    to the buddy in steps as its node grows ("grown" is the high-water mark); nothing is
 *    resident until a page is touched.
 *
 * 2. Address space as it is used. A region maps only its descriptors and the steps grown
 *    so far, so a program's address space (what RLIMIT_AS and `ulimit -v` count) follows
 *    its heap instead of 256 MiB per region (before: each region was reserved whole, by
 *    over-mapping 512 MiB and trimming; with two zones, half a gigabyte before main).
 *    - Where: a new region goes into a free slot found with MAP_FIXED_NOREPLACE, trying
 *      slots from REGION_GAP below where the kernel places mappings downwards, one slot
 *      after another; only when REGION_TRIES slots are taken does it over-map (256 MiB
 *      more for a moment) and trim. The kernel places mappings top down, so the program's
 *      own mappings - and huge blocks - fill that gap before any reaches a region, whose
 *      steps go up.
 *    - Steps: each is mapped at the region's end with MAP_FIXED_NOREPLACE. When another
 *      mapping is there already the region ends (r->end) and a new one begins; when the
 *      kernel refuses (RLIMIT_AS) a smaller step is tried, down to what was asked for. A
 *      zone's first region starts with 256 KiB steps, doubling to 4 MiB, so a small
 *      program maps little; the adjacent steps merge into one mapping in the kernel.
 *    - Descriptors and tests are mapped whole (4.5 MiB, lazily backed, 1/57 of what the
 *      region can hold). Any pointer in a slot is classified by its descriptor or test
 *      with no bounds check - the free fast path reads the test directly - and a page
 *      past `grown` must read as
 *      zero, "not ours": it may be in someone else's mapping in the unused part of the
 *      slot, a huge block of ours included. Mapped as far as grown only, that read would
 *      fault.
 *    - Free memory stays mapped (handed back with MADV_DONTNEED, see below) and so keeps
 *      its address space. A huge block needs fresh address space, so when its mapping is
 *      refused under RLIMIT_AS, the free blocks at the top of every region are unmapped
 *      first (uslub_pages_unmap_free) and the region grows there again later.
 *    Every mapping call goes through os.c, so USLUB_FAULT can refuse any step; a refused
 *    step maps nothing and changes no figure.
 *
 * 3. Zones. Each node has two page allocators (internal.h): slabs, and large blocks, with
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
 *    zero.
 *
 * 5. Accounting. uslub_mapped_bytes counts the pages grown (descriptors aside) and huge
 *    blocks; memory handed back to the OS is subtracted and added again when a block that
 *    holds it is used. USLUB_MEM_LIMIT bounds that figure.
 *
 * 6. Decay: free memory follows recent use. Warm free memory goes back to the OS
 *    (MADV_DONTNEED) by the clock, not only when pages are freed (before: only at a free,
 *    and only past a quarter of the heap - 300 MiB of a 1.2 GiB spike stayed forever).
 *    - Age. Time is counted in steps, an eighth of USLUB_DECAY_MS (10 s: 1.25 s steps). A
 *      warm block carries the step it went free in; a split keeps it, a merge of two warm
 *      halves takes the mean (the age of its pages on average). Reuse is LIFO (warm
 *      blocks head each list), so what a program takes again stays young.
 *    - Recent reuse. Free memory that was in use once - warm, or handed back and still
 *      free - is a level that frees raise, reuse lowers and hand-backs leave alone; its
 *      largest fall from a high within the period is what the program took again. Up to
 *      that much (at least M_TRIM_THRESHOLD) is kept; it is the wave that a program which
 *      frees and reallocates in waves needs warm, and it is bounded by recent use, not by
 *      the peak.
 *    - A pass (decay_zone), once a step per zone: blocks free for the whole period go
 *      back; of the rest, what exceeds the recent reuse goes back oldest first, from
 *      blocks free for at least two steps. After a 1 GiB spike and with no reuse, that
 *      is everything but 32 MiB after two to three steps, and the rest after the period.
 *    - Who makes it: the first page allocation or free of a new step (a look at the
 *      coarse clock otherwise; never the no-wait high-order try, which must not wait for
 *      the lock), and the background thread (replenish.c) each step while any zone holds
 *      warm free memory - a program whose traffic is all fast paths reaches neither
 *      slow path.
 *    Measured on the stress and realloc workloads, the earlier rule's lessons stand: free
 *    memory handed back the moment it exceeds a bound is faulted in again at once
 *    (8 GB returned and refaulted in a 5-second stress run; 30 GB in a 3-second realloc
 *    run at a fixed 32 MiB live set, with a bound at 32 MiB), hence the minimum age and
 *    the reuse bound. malloc_trim hands back everything at once; the cap's reclaim too.
 *
 * 7. The bound: a collapsed live set keeps little. Decay alone keeps what recent reuse
 *    called for, so a program whose live set collapses keeps its last wave for the
 *    period: issue 13's mixed workload (two threads, 1 B - 8 MiB, malloc/free/realloc)
 *    held 517 MiB after freeing everything. So once less than a quarter of
 *    M_TRIM_THRESHOLD (8 MiB) is in use (slab pages, large and huge blocks), free memory
 *    kept - warm free pages of every zone and cached huge mappings (large.c) - may not
 *    exceed half of it (16 MiB).
 *    - Where: uslub_pages_bound, on the slow paths where free memory grows or memory in
 *      use falls - a page free, a huge free - never on an allocation. Past the bound,
 *      what exceeds three quarters of it goes back at once, oldest first (the decay's
 *      order, shed_locked), large zone first; the huge cache is cut to that too, and a
 *      mapping the bound has no room for is not cached. One thread sheds at a time, so
 *      two do not hand back the same excess.
 *    - Why only a collapse: a bound that follows a larger live set (kept at most half,
 *      then one or two times what is in use) cut the mixed workload's peak from 685 to
 *      ~430 MiB, under glibc's 561, but handed back memory that steady churn faulted in
 *      again at once: realloc_mix 8x slower at half, +22% at twice; stress 2x slower
 *      (sys time 0.1 -> 1.0 s) at twice, or with the collapse line at 32 MiB in use,
 *      because its live set dips that low between waves. At 8 MiB neither changed.
 *    - The cost: a program with almost nothing in use that frees and reallocates more
 *      than 16 MiB at a time (a lone 20 MiB buffer replaced in a loop) maps it afresh
 *      each time (glibc keeps it, having raised its mmap threshold). */
#include "internal.h"
#include "os/options.h"
#include "page/node.h"
#include "os/os.h"
#include "replenish/replenish.h"
#include "os/vg.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <time.h>

/* Flag of a free block whose pages are not counted in uslub_mapped_bytes. */
#define PF_RELEASED 0x4

/* What release_blocks hands back: warm blocks, or every block not handed back yet (fresh
 * ones included). The decay chooses by age (decay_zone). */
enum release_mode { RELEASE_ANY, RELEASE_ALL };
static size_t release_blocks(unsigned node, uint64_t keep, enum release_mode mode);
static void maybe_decay(struct uslub_node *n);
static void note_reuse(struct uslub_node *n);

struct uslub_lookup uslub_lookup;
struct uslub_node uslub_nodes[NR_ZONES];
_Atomic uint64_t uslub_mapped_bytes;
_Atomic uint64_t uslub_peak_mapped;
/* Warm free pages of every zone together: the bound (section 7) reads it without the
 * zone locks. */
static _Atomic uint64_t warm_pages_all;

/* Warm free memory beyond this is handed back to the OS at free time (mallopt's
 * M_TRIM_THRESHOLD sets it); half of it is kept. */
uint64_t uslub_trim_threshold = 32UL << 20;

static inline uint64_t block_bytes(unsigned order)
{
	return USLUB_PAGE_SIZE << order;
}

static inline uintptr_t page_index(const struct page_desc *d)
{
	return ((uintptr_t)d & REGION_MASK) >> DESC_SHIFT;
}

static inline struct page_desc *buddy_of(struct page_desc *d, unsigned order)
{
	uintptr_t a = (uintptr_t)d;
	return (struct page_desc *)(a ^ ((uintptr_t)1 << (order + DESC_SHIFT)));
}

static void mapped_add(uint64_t bytes)
{
	uint64_t now = atomic_fetch_add(&uslub_mapped_bytes, bytes) + bytes;
	uint64_t peak = atomic_load(&uslub_peak_mapped);
	while (now > peak && !atomic_compare_exchange_weak(&uslub_peak_mapped, &peak, now))
		;
}

/* A warm block's `objects` holds the decay step in which it went free (section 6). */
static void list_insert(struct uslub_node *n, struct page_desc *d, unsigned order, unsigned flags,
			uint16_t stamp)
{
	__atomic_store_n(&d->kind, PAGE_FREE, __ATOMIC_RELAXED);
	d->order = (uint8_t)order;
	d->flags = (uint8_t)flags;
	d->head = NULL;
	d->owner = NULL;
	if (flags & PF_COLD) {
		cds_list_add_tail(&d->list, &n->free_area[order]);
		if (flags & PF_RELEASED)
			n->released_free_pages += 1UL << order;
	} else {
		cds_list_add(&d->list, &n->free_area[order]);
		n->warm_free_pages += 1UL << order;
		atomic_fetch_add_explicit(&warm_pages_all, 1UL << order, memory_order_relaxed);
		n->nr_warm[order]++;
		d->objects = stamp;
	}
	n->nr_free[order]++;
	n->free_pages += 1UL << order;
}

static void list_remove(struct uslub_node *n, struct page_desc *d)
{
	unsigned order = d->order;
	cds_list_del(&d->list);
	n->nr_free[order]--;
	n->free_pages -= 1UL << order;
	if (!(d->flags & PF_COLD)) {
		n->warm_free_pages -= 1UL << order;
		atomic_fetch_sub_explicit(&warm_pages_all, 1UL << order, memory_order_relaxed);
		n->nr_warm[order]--;
	} else if (d->flags & PF_RELEASED) {
		n->released_free_pages -= 1UL << order;
	}
	__atomic_store_n(&d->kind, PAGE_UNUSED, __ATOMIC_RELAXED);
}

/* Put one naturally aligned block back and merge it with free buddies, under the lock.
 * `stamp`: the decay step it went free in, when warm. */
static void free_one(struct uslub_node *n, struct page_desc *d, unsigned order, unsigned flags,
		     uint16_t stamp)
{
	while (order < USLUB_MAX_ORDER) {
		struct page_desc *b = buddy_of(d, order);
		if (__atomic_load_n(&b->kind, __ATOMIC_RELAXED) != PAGE_FREE || b->order != order)
			break;
		list_remove(n, b);
		/* Two warm halves of one size: the merged block went free, on average over its
		 * pages, halfway between them (so a page freed next to a long-free block does
		 * not make it all look new, nor the other way round). */
		if (!(b->flags & PF_COLD))
			stamp = (flags & PF_COLD)
				    ? b->objects
				    : (uint16_t)(stamp + (int16_t)(b->objects - stamp) / 2);
		/* Merged halves: cold only if both are; released (uncounted) only if both
		 * are. Otherwise the released half is counted as mapped again - unless a cap
		 * is set, where the figure must stay exact: then the other half goes back to
		 * the OS too. */
		if ((flags ^ b->flags) & PF_RELEASED) {
			struct page_desc *warm = (flags & PF_RELEASED) ? b : d;
			if (uslub_config.mem_limit &&
			    uslub_os_release(page_address(warm), block_bytes(order)) == 0) {
				atomic_fetch_sub(&uslub_mapped_bytes, block_bytes(order));
				__atomic_fetch_add(&n->released_bytes, block_bytes(order),
						   __ATOMIC_RELAXED);
				flags |= PF_RELEASED | PF_COLD;
				b->flags |= PF_RELEASED | PF_COLD;
			} else {
				mapped_add(block_bytes(order));
			}
		}
		flags &= b->flags;
		if (b < d) {
			__atomic_store_n(&d->kind, PAGE_UNUSED, __ATOMIC_RELAXED);
			d = b;
		}
		order++;
	}
	list_insert(n, d, order, flags, stamp);
}

/* ---- regions: address space as it is used -------------------------------------- */

/* The first region of a zone grows by 2^GROW_FIRST_ORDER pages (256 KiB) at first, and
 * by steps as large as what it holds until they reach a 2^USLUB_MAX_ORDER block, so a
 * program that allocates little maps little. */
#define GROW_FIRST_ORDER 6
/* Slots tried top down from the first candidate before over-mapping to find one. */
#define REGION_TRIES 16
/* Regions start this far below where the kernel places mappings (at most an eighth of
 * that address): the program's own mappings, placed top down, fill that gap before they
 * can end a region's growth. */
#define REGION_GAP (64UL << 30)

/* The next slot to try, moving down; 0 until the first region. Racing zones may try the
 * same slot: MAP_FIXED_NOREPLACE lets one have it, and the other moves on. */
static _Atomic uintptr_t region_cursor;

static uintptr_t first_candidate(void)
{
	uintptr_t top = uslub_os_map_top();
	uintptr_t gap = top / 8 < REGION_GAP ? top / 8 : REGION_GAP;
	if (top < gap + 2 * REGION_SIZE)
		return 0;
	return ((top - gap) & ~REGION_MASK) - REGION_SIZE;
}

/* `bytes` mapped at the start of a free slot: the region's descriptors and first step. */
static void *region_map(size_t bytes)
{
	uintptr_t c = atomic_load_explicit(&region_cursor, memory_order_relaxed);
	if (!c)
		c = first_candidate();
	for (int i = 0; i < REGION_TRIES && c >= REGION_SIZE; i++, c -= REGION_SIZE) {
		void *p = uslub_os_map_at((void *)c, bytes);
		if (p) {
			atomic_store_explicit(&region_cursor, c - REGION_SIZE,
					      memory_order_relaxed);
			return p;
		}
		if (errno != EEXIST)
			return NULL; /* out of address space: no other slot does better */
	}
	return uslub_os_reserve(REGION_SIZE, REGION_SIZE, bytes);
}

/* A new region for zone n with 2^order pages mapped after its descriptors (not yet given
 * to the buddy: grow does that). */
static struct region *region_new(struct uslub_node *n, unsigned order)
{
	size_t bytes = (FIRST_PAGE + (1UL << order)) << USLUB_PAGE_SHIFT;
	void *base = region_map(bytes);
	if (!base)
		return NULL;
	uintptr_t slot = (uintptr_t)base >> REGION_SHIFT;
	if (slot >= REGION_SLOTS) {
		uslub_os_unmap(base, bytes);
		errno = ENOMEM;
		return NULL;
	}
	unsigned nid = (unsigned)(n - uslub_nodes) % MAX_NODES;
	if (uslub_topo.real_multi)
		uslub_os_bind(base, bytes, nid);
	struct region *r = base;
	r->node = n;
	r->nid = nid;
	r->grown = FIRST_PAGE;
	r->end = REGION_PAGES;
	r->next = n->regions;
	n->regions = r;
	n->region_count++;
	__atomic_store_n(&uslub_lookup.region[slot], (uintptr_t)r - (uintptr_t)uslub_lookup.nil,
			 __ATOMIC_RELEASE);
	return r;
}

void uslub_pages_bind_regions(void)
{
	if (!uslub_topo.real_multi)
		return;
	for (unsigned z = 0; z < NR_ZONES; z++) {
		struct uslub_node *n = &uslub_nodes[z];
		pthread_mutex_lock(&n->lock);
		/* Only what is mapped: a region maps its pages as it grows. */
		for (struct region *r = n->regions; r; r = r->next)
			uslub_os_bind(r, r->grown << USLUB_PAGE_SHIFT, r->nid);
		pthread_mutex_unlock(&n->lock);
	}
}

/* Map the region's next 2^order pages; -1 with EEXIST when another mapping lies there. */
static int region_extend(struct region *r, unsigned order)
{
	void *at = (char *)r + (r->grown << USLUB_PAGE_SHIFT);
	size_t bytes = USLUB_PAGE_SIZE << order;
	if (!uslub_os_map_at(at, bytes))
		return -1;
	if (uslub_topo.real_multi)
		uslub_os_bind(at, bytes, r->nid);
	return 0;
}

/* The step for zone n's newest region r (NULL: a new one): at least min_order, ramped up
 * in a zone's first region, and no larger than keeps blocks naturally aligned - a smaller
 * step is given to the buddy now and the caller comes back for more. */
static unsigned grow_order(struct uslub_node *n, struct region *r, unsigned min_order)
{
	unsigned order = USLUB_MAX_ORDER;
	if (!n->regions || (r && !r->next)) {
		size_t have = r ? r->grown - FIRST_PAGE : 0;
		order = GROW_FIRST_ORDER;
		while (order < USLUB_MAX_ORDER && (2UL << order) <= have)
			order++;
	}
	if (order < min_order)
		order = min_order;
	/* A new region's pages begin at FIRST_PAGE, aligned to 128 pages only. */
	size_t grown = r ? r->grown : FIRST_PAGE;
	while (order > 0 && (grown & ((1UL << order) - 1)))
		order--;
	return order;
}

/* Add a block of 2^min_order pages, or a smaller one that aligns the next, to the node,
 * under the lock: the only step that takes more memory from the OS. */
static int grow(struct uslub_node *n, unsigned min_order)
{
	struct region *r = n->regions;
	if (r && r->grown + (1UL << min_order) > r->end)
		r = NULL;
	unsigned order = grow_order(n, r, min_order);
	uint64_t limit = uslub_config.mem_limit;
	if (limit) {
		uint64_t mapped = atomic_load(&uslub_mapped_bytes);
		while (order > min_order && mapped + block_bytes(order) > limit)
			order--;
		if (mapped + block_bytes(order) > limit) {
			errno = ENOMEM;
			return -1;
		}
	}
	for (;;) {
		if (!r) {
			r = region_new(n, order);
			if (r)
				break;
		} else if (region_extend(r, order) == 0) {
			break;
		} else if (errno == EEXIST) {
			/* Someone else's mapping: the region ends here, a new one begins. */
			r->end = r->grown;
			r = NULL;
			order = grow_order(n, NULL, min_order);
			continue;
		}
		/* Refused (RLIMIT_AS, or a test's fault): a smaller step may still fit. */
		if (errno != ENOMEM || order <= min_order)
			return -1;
		order--;
	}
	struct page_desc *d = (struct page_desc *)((uintptr_t)r + (r->grown << DESC_SHIFT));
	__atomic_store_n(&r->grown, r->grown + (1UL << order), __ATOMIC_RELAXED); /* stats */
	n->grows++;
	mapped_add(block_bytes(order));
	free_one(n, d, order, PF_COLD, 0);
	return 0;
}

bool uslub_over_limit(uint64_t bytes)
{
	uint64_t limit = uslub_config.mem_limit;
	return limit && atomic_load(&uslub_mapped_bytes) + bytes > limit;
}

/* The first block of at least `order` that the flags allow, under the lock. Warm blocks
 * head each list and cold ones trail it, so looking at both ends suffices. */
static struct page_desc *find_block(struct uslub_node *n, unsigned order, unsigned gfp)
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

/* Take block d out of zone n's lists, giving back what lies beyond `order`; the lock is
 * held and dropped here. */
static struct page_desc *take_block(struct uslub_node *n, struct page_desc *d, unsigned order)
{
	unsigned o = d->order;
	unsigned flags = d->flags;
	list_remove(n, d);
	while (o > order) {
		o--;
		list_insert(n, d + (1UL << o), o, flags, d->objects); /* free as long as d */
	}
	note_reuse(n);
	if (flags & PF_RELEASED) {
		/* The halves split off above stay uncounted; only this block returns. */
		mapped_add(block_bytes(order));
	}
	pthread_mutex_unlock(&n->lock);
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

/* Before the large-block zone grows the heap, it borrows a free block from the node's slab
 * zone (the block stays in its region, and goes back to that zone when freed). Only this
 * way round: slab pages borrowed into the large zone's regions would split its free blocks
 * again (measured: 5x glibc's resident memory on the stress workload), while a large block
 * in a slab region leaves gaps that slabs fill. The slab zone borrows only when it cannot
 * grow (at the memory cap). */
static struct page_desc *borrow(unsigned node, unsigned order, unsigned gfp)
{
	unsigned other = node < MAX_NODES ? LARGE_ZONE(node) : node - MAX_NODES;
	struct uslub_node *o = &uslub_nodes[other];
	pthread_mutex_lock(&o->lock);
	struct page_desc *d = find_block(o, order, gfp);
	if (!d) {
		pthread_mutex_unlock(&o->lock);
		return NULL;
	}
	return take_block(o, d, order);
}

struct page_desc *uslub_pages_alloc(unsigned node, unsigned order, unsigned gfp)
{
	struct uslub_node *n = &uslub_nodes[node];
	if (gfp & GFP_TRYLOCK) {
		if (pthread_mutex_trylock(&n->lock) != 0) {
			__atomic_fetch_add(&n->nowait_misses, 1, __ATOMIC_RELAXED);
			return NULL;
		}
	} else {
		pthread_mutex_lock(&n->lock);
	}
	struct page_desc *d;
	bool reclaimed = false, borrowed = false;
	while (!(d = find_block(n, order, gfp))) {
		if (gfp & GFP_NOGROW) {
			n->nowait_misses++;
			pthread_mutex_unlock(&n->lock);
			return NULL;
		}
		/* The large zone borrows before it grows; the slab zone only when it cannot
		 * grow (at the cap, where memory beats tidiness). */
		if (!borrowed && node < MAX_NODES && grow(n, order) == 0)
			continue;
		if (!borrowed) {
			/* One zone's lock at a time: no order between the two to keep. */
			pthread_mutex_unlock(&n->lock);
			d = borrow(node, order, gfp);
			if (d)
				return d;
			pthread_mutex_lock(&n->lock);
			borrowed = true;
			continue;
		}
		if (grow(n, order) == 0)
			continue;
		if (reclaimed || !uslub_config.mem_limit) {
			pthread_mutex_unlock(&n->lock);
			errno = ENOMEM;
			return NULL;
		}
		/* At the cap, free warm memory still counts against it: hand it back to the
		 * OS, so the cap admits a block (a released one, or a fresh one) - reclaim, on
		 * the caller's time. Only blocking allocations get here; the high-order try
		 * never does. */
		n->reclaims++;
		pthread_mutex_unlock(&n->lock);
		release_blocks(node % MAX_NODES, 0, RELEASE_ALL);
		release_blocks(LARGE_ZONE(node % MAX_NODES), 0, RELEASE_ALL);
		pthread_mutex_lock(&n->lock);
		reclaimed = true;
		borrowed = false;
	}
	d = take_block(n, d, order);
	if (!(gfp & GFP_TRYLOCK))
		maybe_decay(n);
	return d;
}

static void clear_tails(struct page_desc *d, size_t npages)
{
	for (size_t i = 1; i < npages; i++)
		d[i].head = NULL;
}

static void free_range_locked(struct uslub_node *n, struct page_desc *d, size_t npages,
			      unsigned flags, uint16_t stamp)
{
	uintptr_t idx = page_index(d);
	while (npages) {
		unsigned o = 0;
		while (o < USLUB_MAX_ORDER && !(idx & (1UL << o)) && (2UL << o) <= npages)
			o++;
		free_one(n, d, o, flags, stamp);
		d += 1UL << o;
		idx += 1UL << o;
		npages -= 1UL << o;
	}
}

/* ---- decay: free memory follows recent use ---------------------------------------- */

/* Time in decay steps: an eighth of USLUB_DECAY_MS each (1.25 s by default), read from
 * the coarse clock (vDSO: no system call, a few nanoseconds). */
static uint64_t step_ms(void)
{
	/* Tests that link core/ without reading the settings see 0: the default then. */
	unsigned period = uslub_config.decay_ms ? uslub_config.decay_ms : 10000;
	return period / DECAY_STEPS ? period / DECAY_STEPS : 1;
}

static uint32_t step_now(void)
{
	return (uint32_t)(uslub_os_now_ms() / step_ms());
}

uint64_t uslub_release_threshold(void)
{
	return uslub_trim_threshold;
}

/* Free memory that was in use once: warm, or handed back and not used since. Frees raise
 * it, allocations that reuse memory lower it, hand-backs leave it as it is - so how far it
 * falls from a recent high is how much freed memory the program has taken again. */
static uint64_t used_free_pages(const struct uslub_node *n)
{
	return n->warm_free_pages + n->released_free_pages;
}

/* After pages went free, under the lock. */
static void note_free(struct uslub_node *n)
{
	uint64_t level = used_free_pages(n);
	uint64_t *high = &n->reuse_high[n->reuse_step % DECAY_STEPS];
	if (level > *high)
		*high = level;
	if (level > n->reuse_window_high)
		n->reuse_window_high = level;
}

/* After pages were taken, under the lock: the fall from the period's high is reuse. */
static void note_reuse(struct uslub_node *n)
{
	uint64_t high = n->reuse_window_high, level = used_free_pages(n);
	uint64_t *reuse = &n->reuse[n->reuse_step % DECAY_STEPS];
	if (high > level && high - level > *reuse)
		*reuse = high - level;
}

/* The slots of the steps since the last pass start empty; under the lock. */
static void reuse_advance(struct uslub_node *n, uint32_t step)
{
	uint32_t gap = step - n->reuse_step;
	if (gap > DECAY_STEPS)
		gap = DECAY_STEPS;
	for (uint32_t k = 1; k <= gap; k++) {
		n->reuse[(n->reuse_step + k) % DECAY_STEPS] = 0;
		n->reuse_high[(n->reuse_step + k) % DECAY_STEPS] = 0;
	}
	n->reuse_step = step;
	n->reuse_window_high = 0;
	for (unsigned k = 0; k < DECAY_STEPS; k++)
		if (n->reuse_high[k] > n->reuse_window_high)
			n->reuse_window_high = n->reuse_high[k];
	note_free(n); /* a fall from today's level counts */
}

static unsigned age_of(const struct page_desc *d, uint32_t step)
{
	unsigned age = (uint16_t)((uint16_t)step - d->objects);
	return age < DECAY_STEPS ? age : DECAY_STEPS;
}

static size_t hand_back(struct uslub_node *n, struct page_desc *batch);

/* Warm blocks looked at per pass, under the lock (largest orders first, so a heap of
 * whole free blocks is seen whole; a heap cut into more small free blocks than this is
 * decayed a part at a time). */
#define DECAY_SCAN 16384
/* Below this age (in steps) free memory stays, whatever the reuse says: long enough for
 * a program that frees and reallocates in waves to show its reuse. */
#define DECAY_MIN_AGE 2

/* Warm blocks of zone n off its lists, oldest first, until at most `keep` warm pages
 * stay or only blocks younger than `min_age` steps are left; blocks free for the whole
 * period go whatever `keep` says. Under the lock; the batch is for hand_back. */
static struct page_desc *shed_locked(struct uslub_node *n, uint32_t step, uint64_t keep,
				     int min_age)
{
	uint64_t by_age[DECAY_STEPS + 1] = {0};
	unsigned seen = 0;
	struct page_desc *d, *batch = NULL;
	for (int o = USLUB_MAX_ORDER; o >= 0 && seen < DECAY_SCAN; o--)
		cds_list_for_each_entry(d, &n->free_area[o], list)
		{
			if ((d->flags & PF_COLD) || ++seen > DECAY_SCAN)
				break;
			by_age[age_of(d, step)] += 1UL << o;
		}
	/* Everything of age > cut goes, and `quota` pages of age == cut. */
	uint64_t left = n->warm_free_pages - by_age[DECAY_STEPS], quota = by_age[DECAY_STEPS];
	unsigned cut = DECAY_STEPS;
	for (int a = DECAY_STEPS - 1; a >= min_age && left > keep; a--) {
		uint64_t take = left - keep < by_age[a] ? left - keep : by_age[a];
		left -= take;
		cut = (unsigned)a;
		quota = take;
	}
	seen = 0;
	for (int o = USLUB_MAX_ORDER; o >= 0 && seen < DECAY_SCAN && (cut < DECAY_STEPS || quota);
	     o--) {
		struct page_desc *tmp;
		cds_list_for_each_entry_safe(d, tmp, &n->free_area[o], list)
		{
			if ((d->flags & PF_COLD) || ++seen > DECAY_SCAN)
				break;
			unsigned age = age_of(d, step);
			if (age < cut || (age == cut && !quota))
				continue;
			if (age == cut)
				quota = quota > (1UL << o) ? quota - (1UL << o) : 0;
			list_remove(n, d);
			d->order = (uint8_t)o;
			d->next = batch;
			batch = d;
		}
	}
	if (batch)
		n->handing_back++;
	return batch;
}

/* One pass over zone n for `step`, if no one has made it yet:
 *   - warm blocks free for the whole period (DECAY_STEPS steps) go back;
 *   - of the rest, what the recent reuse does not call for goes back, oldest first,
 *     from blocks free at least DECAY_MIN_AGE steps.
 * "Recent reuse" is the most freed memory the program took again within the period
 * (note_reuse), at least M_TRIM_THRESHOLD: a program that reallocates in waves keeps a
 * wave's worth warm, one that freed a spike and stays small keeps the threshold. */
static size_t decay_zone(struct uslub_node *n, uint32_t step)
{
	uint32_t last = atomic_load_explicit(&n->decay_last, memory_order_relaxed);
	if (last == step ||
	    !atomic_compare_exchange_strong_explicit(&n->decay_last, &last, step,
						     memory_order_relaxed, memory_order_relaxed))
		return 0;
	pthread_mutex_lock(&n->lock);
	reuse_advance(n, step);
	/* An eighth more than the largest reuse: waves differ a little from one to the
	 * next, and without the margin the few MiB a wave needs beyond the last one's went
	 * back and were faulted in again every wave (measured with tools/bench/waves: 1.2%
	 * of its faults). */
	uint64_t keep = 0;
	for (unsigned k = 0; k < DECAY_STEPS; k++)
		if (n->reuse[k] > keep)
			keep = n->reuse[k];
	keep += keep / 8;
	if (keep < uslub_trim_threshold >> USLUB_PAGE_SHIFT)
		keep = uslub_trim_threshold >> USLUB_PAGE_SHIFT;
	struct page_desc *batch = shed_locked(n, step, keep, DECAY_MIN_AGE);
	if (batch)
		n->decay_passes++;
	pthread_mutex_unlock(&n->lock);
	if (!batch)
		return 0;
	return hand_back(n, batch);
}

/* ---- the bound: free memory follows the live set (section 7) ---------------------- */

uint64_t uslub_keep_bound(void)
{
	uint64_t in_use = atomic_load_explicit(&uslub_slab_bytes, memory_order_relaxed) +
			  atomic_load_explicit(&uslub_large_bytes, memory_order_relaxed) +
			  atomic_load_explicit(&uslub_huge_bytes, memory_order_relaxed);
	/* A live set under a quarter of M_TRIM_THRESHOLD has collapsed (or never grew): free
	 * memory kept is held to half the threshold. Above, the decay alone decides. */
	return in_use < uslub_trim_threshold / 4 ? uslub_trim_threshold / 2 : UINT64_MAX;
}

/* One thread sheds at a time: two reading the same excess would hand it back twice. */
static _Atomic int bounding;

void uslub_pages_bound(void)
{
	uint64_t bound = uslub_keep_bound();
	uint64_t warm = atomic_load_explicit(&warm_pages_all, memory_order_relaxed)
			<< USLUB_PAGE_SHIFT;
	uint64_t huge = atomic_load_explicit(&uslub_huge_cached_bytes, memory_order_relaxed);
	if (likely(warm + huge <= bound) || atomic_exchange(&bounding, 1))
		return;
	/* Down to three quarters of the bound, so a program hovering at it does not pay a
	 * hand-back at every free. */
	uint64_t target = bound - bound / 4;
	if (huge > target)
		uslub_huge_cache_trim(target);
	uint32_t step = step_now();
	for (unsigned z = 0; z < NR_ZONES; z++) {
		unsigned zone = z < MAX_NODES ? LARGE_ZONE(z) : z - MAX_NODES; /* large first */
		if (zone % MAX_NODES >= uslub_nr_nodes)
			continue;
		struct uslub_node *n = &uslub_nodes[zone];
		uint64_t kept =
		    (atomic_load_explicit(&warm_pages_all, memory_order_relaxed)
		     << USLUB_PAGE_SHIFT) +
		    atomic_load_explicit(&uslub_huge_cached_bytes, memory_order_relaxed);
		if (kept <= target)
			break;
		uint64_t excess = (kept - target) >> USLUB_PAGE_SHIFT;
		pthread_mutex_lock(&n->lock);
		uint64_t keep = n->warm_free_pages > excess ? n->warm_free_pages - excess : 0;
		struct page_desc *batch = n->warm_free_pages ? shed_locked(n, step, keep, 0) : NULL;
		if (batch)
			n->bound_sheds++;
		pthread_mutex_unlock(&n->lock);
		if (batch)
			hand_back(n, batch);
	}
	atomic_store(&bounding, 0);
}

/* On the allocator's slow paths (pages freed or taken, never the no-wait try): a pass
 * when a step has begun since the last; a look at the clock otherwise. */
static void maybe_decay(struct uslub_node *n)
{
	uint32_t step = step_now();
	if (step != atomic_load_explicit(&n->decay_last, memory_order_relaxed))
		decay_zone(n, step);
}

size_t uslub_pages_decay_all(void)
{
	uint32_t step = step_now();
	size_t released = 0;
	for (unsigned i = 0; i < uslub_nr_nodes; i++) {
		released += decay_zone(&uslub_nodes[i], step);
		released += decay_zone(&uslub_nodes[LARGE_ZONE(i)], step);
	}
	return released;
}

/* Read under each zone's lock: a free that the thread does not see here takes the lock
 * after it, and so sees the thread's `idle` (uslub_background_note) - no fence on the
 * free path. */
static bool zone_warm(struct uslub_node *n)
{
	pthread_mutex_lock(&n->lock);
	bool warm = n->warm_free_pages != 0;
	pthread_mutex_unlock(&n->lock);
	return warm;
}

long uslub_pages_decay_wait_ms(void)
{
	for (unsigned i = 0; i < uslub_nr_nodes; i++)
		if (zone_warm(&uslub_nodes[i]) || zone_warm(&uslub_nodes[LARGE_ZONE(i)])) {
			uint64_t len = step_ms();
			return (long)(len - uslub_os_now_ms() % len + 1);
		}
	return -1;
}

void uslub_pages_free_range(struct page_desc *d, size_t npages)
{
	struct uslub_node *n = region_of(d)->node;
	uint32_t step = step_now();
	clear_tails(d, npages);
	d->owner = NULL;
	pthread_mutex_lock(&n->lock);
	free_range_locked(n, d, npages, 0, (uint16_t)step);
	note_free(n);
	uint64_t warm = n->warm_free_pages;
	pthread_mutex_unlock(&n->lock);
	if (step != atomic_load_explicit(&n->decay_last, memory_order_relaxed))
		decay_zone(n, step);
	uslub_pages_bound();
	uslub_background_note(warm << USLUB_PAGE_SHIFT);
}

void uslub_pages_free(struct page_desc *d, unsigned order)
{
	uslub_pages_free_range(d, 1UL << order);
}

/* The free block that holds page `d`, or NULL if the page is in use. */
static struct page_desc *free_block_of(struct page_desc *d)
{
	uintptr_t idx = page_index(d);
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

/* Takes pages [d, d + npages), all free, out of zone n's lists, giving back what the
 * free blocks holding them have outside the range; the lock is held. -1 if a page is not
 * free. */
static int claim_locked(struct uslub_node *n, struct page_desc *d, size_t npages)
{
	for (size_t i = 0; i < npages;) {
		struct page_desc *h = free_block_of(d + i);
		if (!h)
			return -1;
		i = (size_t)(h + (1UL << h->order) - d);
	}
	if (uslub_memcheck)
		vg_undefined(page_address(d), npages << USLUB_PAGE_SHIFT);
	for (size_t i = 0; i < npages;) {
		struct page_desc *h = free_block_of(d + i);
		unsigned flags = h->flags;
		uint16_t stamp = h->objects;
		size_t len = 1UL << h->order;
		list_remove(n, h);
		if (flags & PF_RELEASED)
			mapped_add(block_bytes(h->order));
		flags &= PF_COLD;
		/* Give back what lies outside the claimed range. */
		if (h < d)
			free_range_locked(n, h, (size_t)(d - h), flags, stamp);
		struct page_desc *end = h + len;
		if (end > d + npages)
			free_range_locked(n, d + npages, (size_t)(end - (d + npages)), flags,
					  stamp);
		i = (size_t)(end - d);
	}
	note_reuse(n);
	return 0;
}

int uslub_pages_claim(struct page_desc *d, size_t npages)
{
	struct region *r = region_of(d);
	struct uslub_node *n = r->node;
	if (page_index(d) + npages > r->grown)
		return -1;
	pthread_mutex_lock(&n->lock);
	int rc = claim_locked(n, d, npages);
	pthread_mutex_unlock(&n->lock);
	return rc;
}

/* Free pages from `h` on: how many follow in a row (up to `want`), block after block. A
 * block handed back to the OS ends the run where taking it would pass the cap. */
static size_t run_length(struct page_desc *h, size_t want)
{
	struct region *r = region_of(h);
	size_t got = 0;
	while (got < want && page_index(h + got) < r->grown) {
		struct page_desc *b = free_block_of(h + got);
		if (!b || ((b->flags & PF_RELEASED) && uslub_over_limit(block_bytes(b->order))))
			break;
		got = (size_t)(b + (1UL << b->order) - h);
	}
	return got;
}

/* A large block of npages that no free block of its order can hold: neighbouring free
 * blocks of lower orders, taken together, before the heap grows. Without this, a heap of
 * large blocks of mixed sizes (each a power-of-two block with its tail given back) grows
 * whenever no block of the full order is left, however much free memory lies in smaller
 * neighbouring pieces (measured: a realloc-heavy program mapped twice its peak in use).
 * First fit from the larger pieces down; at most RUN_TRIES blocks looked at, under the
 * lock. */
#define RUN_TRIES 256

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
		struct page_desc *b = free_block_of(h + got);
		if (!b || !(b->flags & PF_COLD) ||
		    ((b->flags & PF_RELEASED) && uslub_over_limit(block_bytes(b->order))))
			return NULL;
		got = (size_t)(b + (1UL << b->order) - h);
	}
	claim_locked(n, h, npages);
	return h;
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
		struct page_desc *h = free_block_of(d - k - 1);
		if (!h || ((h->flags & PF_RELEASED) && uslub_over_limit(block_bytes(h->order))))
			break;
		k += 1UL << h->order;
	}
	return k;
}

struct page_desc *uslub_pages_alloc_run(unsigned node, size_t npages)
{
	unsigned order = uslub_get_order(npages << USLUB_PAGE_SHIFT);
	struct uslub_node *n = &uslub_nodes[node];
	pthread_mutex_lock(&n->lock);
	struct page_desc *d = find_block(n, order, 0);
	/* Large blocks whose size is not a power of two are packed end to end (25 pages each
	 * for 100 KiB) rather than each in a power-of-two block whose tail nothing of that
	 * size can use - a fifth of the heap lost, which a tight RLIMIT_AS makes plain. Warm
	 * memory is reused first, as always, from the start of the free pages right before
	 * its block; cold memory is cut in address order, after the block cut last. */
	if (!d || (d->flags & PF_COLD)) {
		struct page_desc *h = next_fit(n, npages);
		if (h) {
			n->large_next = h + npages;
			pthread_mutex_unlock(&n->lock);
			h->flags = 0;
			h->order = (uint8_t)order;
			return h;
		}
	}
	if (d) {
		/* In warm memory only to go on right after the block cut last (blocks of one
		 * size filling freed memory again), not wherever free pages lie before a block:
		 * in a mix of sizes, blocks started off their power-of-two boundaries split the
		 * free memory up (measured: realloc_mix searched for runs 13 times as often, and
		 * took 15% longer). */
		struct page_desc *last = n->large_next;
		bool cold = d->flags & PF_COLD;
		size_t k = cold || (last && last < d && d - last < (1L << USLUB_MAX_ORDER))
			       ? free_before(d)
			       : 0;
		if (!cold && d - k != last)
			k = 0;
		n->large_next = d - k + npages;
		if (k) {
			/* From the start of the free pages: all of them before d, or some of
			 * d's block too. */
			d -= k;
			claim_locked(n, d, npages);
			pthread_mutex_unlock(&n->lock);
			d->flags = 0;
			d->order = (uint8_t)order;
			return d;
		}
		d = take_block(n, d, order);
		if (npages < (1UL << order))
			uslub_pages_free_range(d + npages, (1UL << order) - npages);
		return d;
	}
	unsigned tries = 0;
	for (unsigned o = order; o-- > 0 && tries < RUN_TRIES;) {
		struct page_desc *h;
		cds_list_for_each_entry(h, &n->free_area[o], list)
		{
			if (++tries > RUN_TRIES)
				break;
			if (run_length(h, npages) < npages)
				continue;
			claim_locked(n, h, npages);
			n->runs++;
			n->large_next = h + npages;
			pthread_mutex_unlock(&n->lock);
			h->flags = 0;
			h->order = (uint8_t)order;
			return h;
		}
	}
	pthread_mutex_unlock(&n->lock);
	return NULL;
}

struct page_desc *uslub_pages_alloc_exact(unsigned node, unsigned order, size_t npages,
					  bool aligned)
{
	struct page_desc *d = uslub_pages_alloc(node, order, 0);
	if (!d)
		return NULL;
	/* Moved back to the start of the free pages before it, as in alloc_run: a block cut
	 * from a fresh step continues where the last one before the step ended. */
	struct uslub_node *n = region_of(d)->node; /* a borrowed block: the slab zone */
	struct page_desc *end = d + (1UL << order), *start = d;
	unsigned flags = d->flags & PF_COLD; /* of what is given back: a tail is as fresh */
	pthread_mutex_lock(&n->lock);
	size_t k = aligned ? 0 : free_before(d);
	if (k) {
		start = d - k;
		claim_locked(n, start, k < npages ? k : npages);
		d->flags = 0;
		start->flags = 0;
		start->order = (uint8_t)order;
	}
	struct page_desc *rest = start + npages > d ? start + npages : d;
	free_range_locked(n, rest, (size_t)(end - rest), flags, (uint16_t)step_now());
	if (n == &uslub_nodes[node])
		n->large_next = start + npages;
	pthread_mutex_unlock(&n->lock);
	return start;
}

/* Descriptors inside a free block describe nothing; those filling whole pages after the
 * block's first descriptor page are handed back too, so a trimmed heap keeps ~1/64 of
 * nothing rather than 1/64 of its peak. */
static void release_descriptors(struct page_desc *d, unsigned order)
{
	uintptr_t first = ((uintptr_t)d + USLUB_PAGE_SIZE) & ~(USLUB_PAGE_SIZE - 1);
	uintptr_t end = (uintptr_t)(d + (1UL << order));
	if (end > first)
		uslub_os_release((void *)first, end - first);
}

size_t uslub_pages_unmap_free(void)
{
	size_t unmapped = 0;
	for (unsigned z = 0; z < NR_ZONES; z++) {
		struct uslub_node *n = &uslub_nodes[z];
		pthread_mutex_lock(&n->lock);
		for (struct region *r = n->regions; r; r = r->next) {
			while (r->grown > FIRST_PAGE) {
				struct page_desc *b =
				    free_block_of((struct page_desc *)r + r->grown - 1);
				if (!b)
					break;
				unsigned order = b->order;
				uint64_t bytes = block_bytes(order);
				if (uslub_os_unmap(page_address(b), bytes) != 0)
					break;
				if (!(b->flags & PF_RELEASED))
					atomic_fetch_sub(&uslub_mapped_bytes, bytes);
				list_remove(n, b);
				memset(b, 0, sizeof(*b)); /* as if never grown */
				__atomic_store_n(&r->grown, r->grown - (1UL << order),
						 __ATOMIC_RELAXED);
				__atomic_fetch_add(&n->released_bytes, bytes, __ATOMIC_RELAXED);
				unmapped += bytes;
			}
		}
		pthread_mutex_unlock(&n->lock);
	}
	return unmapped;
}

size_t uslub_pages_release(unsigned node, uint64_t keep)
{
	return release_blocks(node, keep, RELEASE_ANY);
}

/* Hand warm free blocks back until at most `keep` warm pages stay (RELEASE_ANY), or every
 * block (RELEASE_ALL). */
static size_t release_blocks(unsigned node, uint64_t keep, enum release_mode mode)
{
	struct uslub_node *n = &uslub_nodes[node];
	struct page_desc *batch = NULL;

	pthread_mutex_lock(&n->lock);
	for (int o = USLUB_MAX_ORDER; o >= 0 && (mode == RELEASE_ALL || n->warm_free_pages > keep);
	     o--) {
		struct page_desc *d, *tmp;
		cds_list_for_each_entry_safe(d, tmp, &n->free_area[o], list)
		{
			if (d->flags & PF_RELEASED)
				continue;
			/* Cold blocks trail the list. Never-touched ones count against the cap
			 * all the same: RELEASE_ALL (reclaim at the cap) hands them back too,
			 * which costs the kernel nothing to undo. */
			if ((d->flags & PF_COLD) && mode != RELEASE_ALL)
				break;
			if (mode != RELEASE_ALL && n->warm_free_pages <= keep)
				break;
			list_remove(n, d);
			d->order = (uint8_t)o;
			d->next = batch;
			batch = d;
		}
	}
	if (batch)
		n->handing_back++;
	pthread_mutex_unlock(&n->lock);
	if (!batch)
		return 0;
	return hand_back(n, batch);
}

/* Blocks taken off zone n's lists go back to the OS and onto the lists again, handed back
 * (or as they were, where the OS refused). madvise outside the lock: other threads keep
 * allocating meanwhile. Bytes handed back. */
static size_t hand_back(struct uslub_node *n, struct page_desc *batch)
{
	size_t released = 0;
	struct page_desc *done = batch;
	for (struct page_desc *d = batch; d; d = d->next) {
		uint64_t bytes = block_bytes(d->order);
		if (uslub_os_release(page_address(d), bytes) == 0) {
			d->flags = PF_COLD | PF_RELEASED;
			released += bytes;
			release_descriptors(d, d->order);
		} else {
			d->flags &= PF_COLD; /* as it was: still counted, still in place */
		}
	}
	pthread_mutex_lock(&n->lock);
	while (done) {
		struct page_desc *next = done->next;
		done->next = NULL;
		if (done->flags & PF_RELEASED)
			atomic_fetch_sub(&uslub_mapped_bytes, block_bytes(done->order));
		free_one(n, done, done->order, done->flags, done->objects);
		done = next;
	}
	/* Atomic: the statistics read them without the lock, now also while the
	 * background thread hands memory back. */
	__atomic_fetch_add(&n->released_bytes, released, __ATOMIC_RELAXED);
	__atomic_fetch_add(&n->release_calls, 1, __ATOMIC_RELAXED);
	n->handing_back--;
	pthread_mutex_unlock(&n->lock);
	return released;
}

/* Zone n's lock, once no block of it is away being handed back (hand_back): fork must
 * not copy a heap whose blocks are on no list - a child would have lost them - nor may
 * the heap walker see one. The hand-back needs only this zone's lock to finish. */
static void lock_quiet(struct uslub_node *n)
{
	pthread_mutex_lock(&n->lock);
	while (n->handing_back) {
		pthread_mutex_unlock(&n->lock);
		uslub_os_yield();
		pthread_mutex_lock(&n->lock);
	}
}

void uslub_pages_lock_all(void)
{
	for (unsigned i = 0; i < uslub_nr_nodes; i++) {
		lock_quiet(&uslub_nodes[i]);
		lock_quiet(&uslub_nodes[LARGE_ZONE(i)]);
	}
}

void uslub_pages_unlock_all(void)
{
	for (unsigned i = 0; i < uslub_nr_nodes; i++) {
		pthread_mutex_unlock(&uslub_nodes[LARGE_ZONE(i)].lock);
		pthread_mutex_unlock(&uslub_nodes[i].lock);
	}
}

void uslub_pages_init(void)
{
	for (unsigned i = 0; i < NR_ZONES; i++) {
		struct uslub_node *n = &uslub_nodes[i];
		pthread_mutex_init(&n->lock, NULL);
		for (unsigned o = 0; o <= USLUB_MAX_ORDER; o++)
			CDS_INIT_LIST_HEAD(&n->free_area[o]);
	}
}

int uslub_pages_check(unsigned node)
{
	struct uslub_node *n = &uslub_nodes[node];
	uint64_t free_pages = 0, warm = 0, released = 0;
	int bad = 0;
	pthread_mutex_lock(&n->lock);
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
	if (free_pages != n->free_pages || warm != n->warm_free_pages ||
	    released != n->released_free_pages)
		bad |= 32;
	pthread_mutex_unlock(&n->lock);
	return bad;
}
