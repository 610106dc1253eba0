/* Regions: the address space the buddy's pages come from, and its accounting.
 *
 * 1. Regions. A region is a 256 MiB slot of the address space, aligned to its size, so the
 *    region table and page_desc_of find a pointer's region and descriptor at once. Its
 *    first 4 MiB hold one descriptor per page, the next 512 KiB free's 8-byte test of
 *    each page (types.h); its pages follow, from FIRST_PAGE (1152, so a new region's
 *    first steps are at most 128 pages, until the next is aligned to 1024). A region
 *    hands its pages to the buddy in steps as its node grows ("grown" is the high-water
 *    mark); nothing is resident until a page is touched.
 *
 * 2. Address space as it is used. A region maps only its descriptors and the steps grown
 *    so far, so a program's address space (what RLIMIT_AS and `ulimit -v` count) follows
 *    its heap instead of 256 MiB per region.
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
 *      past `grown` must read as zero, "not ours": it may be in someone else's mapping in
 *      the unused part of the slot, a huge block of ours included. Mapped as far as grown
 *      only, that read would fault.
 *    - Free memory stays mapped (handed back with MADV_DONTNEED, decay.c) and so keeps
 *      its address space. A huge block needs fresh address space, so when its mapping is
 *      refused under RLIMIT_AS, the free blocks at the top of every region are unmapped
 *      first (uslub_pages_unmap_free) and the region grows there again later.
 *    Every mapping call goes through os.c, so USLUB_FAULT can refuse any step; a refused
 *    step maps nothing and changes no figure.
 *
 * 5. Accounting. uslub_mapped_bytes counts the pages grown (descriptors aside) and huge
 *    blocks; memory handed back to the OS is subtracted and added again when a block that
 *    holds it is used. USLUB_MEM_LIMIT bounds that figure. */
#include "page/page.h"

#include "os/options.h"
#include "os/os.h"
#include "page/node.h"

#include <errno.h>
#include <string.h>
#include <sys/resource.h>

_Atomic uint64_t uslub_mapped_bytes;
_Atomic uint64_t uslub_peak_mapped;

void uslub_mapped_add(uint64_t bytes)
{
	uint64_t now = atomic_fetch_add(&uslub_mapped_bytes, bytes) + bytes;
	uint64_t peak = atomic_load(&uslub_peak_mapped);
	while (now > peak && !atomic_compare_exchange_weak(&uslub_peak_mapped, &peak, now))
		;
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
		if (!zone_in_use(z))
			continue;
		uslub_lock(&n->lock, USLUB_LOCK_ZONE);
		/* Only what is mapped: a region maps its pages as it grows. */
		for (struct region *r = n->regions; r; r = r->next)
			uslub_os_bind(r, r->grown << USLUB_PAGE_SHIFT, r->nid);
		uslub_zone_unlock(n);
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

bool uslub_space_limited;

/* Add a block of 2^min_order pages, or a smaller one that aligns the next, to the node,
 * under the lock: the only step that takes more memory from the OS. */
int uslub_grow(struct uslub_node *n, unsigned min_order)
{
	/* Looked at where address space is taken, since a program may set it at any time. */
	struct rlimit as;
	bool limited = uslub_config.mem_limit ||
		       (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY);
	if (limited != __atomic_load_n(&uslub_space_limited, __ATOMIC_RELAXED))
		__atomic_store_n(&uslub_space_limited, limited, __ATOMIC_RELAXED);
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
	__atomic_store_n(&n->grown_pages, n->grown_pages + (1UL << order), __ATOMIC_RELAXED);
	uslub_mapped_add(block_bytes(order));
	uslub_free_one(n, d, order, PF_COLD, 0);
	return 0;
}

bool uslub_over_limit(uint64_t bytes)
{
	uint64_t limit = uslub_config.mem_limit;
	return limit && atomic_load(&uslub_mapped_bytes) + bytes > limit;
}

size_t uslub_pages_unmap_free(void)
{
	size_t unmapped = 0;
	for (unsigned z = 0; z < NR_ZONES; z++) {
		struct uslub_node *n = &uslub_nodes[z];
		if (!zone_in_use(z))
			continue;
		uslub_lock(&n->lock, USLUB_LOCK_ZONE);
		uslub_extents_flush_locked(n);
		for (struct region *r = n->regions; r; r = r->next) {
			while (r->grown > FIRST_PAGE) {
				struct page_desc *b =
				    uslub_free_block_of((struct page_desc *)r + r->grown - 1);
				if (!b)
					break;
				unsigned order = b->order;
				uint64_t bytes = block_bytes(order);
				if (uslub_os_unmap(page_address(b), bytes) != 0)
					break;
				uslub_moved_forget_locked(n, page_address(b), bytes);
				if (!(b->flags & PF_RELEASED))
					atomic_fetch_sub(&uslub_mapped_bytes, bytes);
				uslub_list_remove(n, b);
				memset(b, 0, sizeof(*b)); /* as if never grown */
				__atomic_store_n(&r->grown, r->grown - (1UL << order),
						 __ATOMIC_RELAXED);
				__atomic_fetch_add(&n->released_bytes, bytes, __ATOMIC_RELAXED);
				unmapped += bytes;
			}
		}
		uslub_zone_unlock(n);
	}
	return unmapped;
}
