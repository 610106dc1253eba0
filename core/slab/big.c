/* The thread's big-block cache: the last few large blocks of more than BIG_MIN_PAGES
 * pages (4 - 32 MiB, the spans of the large zone, slab.h) that the thread
 * freed, kept whole for its next request of as many pages or fewer, so a program that
 * replaces such buffers one after another does it without the zone's lock, without the
 * span search (a MiB block's search walks every free block of the zone under that lock:
 * some 21,000 instructions, tools/bench/results/span-search.md) and without the pay for
 * fresh pages (page/decay.c, section 9): the block's pages are the ones the program
 * touched last. tcmalloc's page heap and mimalloc's segments hand a freed span of the
 * size back the same way; the kernel's per-CPU lists stop at order 3.
 *
 *  - take: the smallest cached block that holds the request; what it has beyond the
 *    request is a cached block of its own (no lock), or goes back to its zone when it is
 *    4 MiB or less, so the pages a block keeps are always the pages it is asked for.
 *  - miss: when no cached block holds the request, all of them go back to their zones
 *    before the search, which then finds them free and merged with their neighbours, as
 *    it did before this cache: a block held here never keeps a larger one from the room
 *    it would take, and the zone's placement and pay see everything.
 *  - bound: BIG_SLOTS blocks and BIG_MAX_PAGES pages (32 MiB, the span's bound); past
 *    either the oldest goes back.
 *  - idle, exit, malloc_trim, the shrink hook, a move to another node: all of it goes
 *    back with the medium-block cache (medium.c, uslub_medium_drain), under the same
 *    ownership (medium_busy).
 *
 * A cached block stays a large block (kind PAGE_LARGE, PF_CACHED, PF_BARE kept), so a
 * second free of it is reported as a double free, the heap walker counts it as cached
 * and uslub_large_bytes keeps counting it (the stats take it back out, as they do the
 * medium-block cache's): a hit writes no shared counter. */
#include "slab/slab.h"
#include "os/os.h"
#include "page/page.h"

/* Blocks a thread keeps at most. */
#define BIG_SLOTS (sizeof(((struct uslub_thread *)0)->big) / sizeof(struct page_desc *))
/* Pages of one block at most, and of the thread's cached blocks together. */
#define BIG_MAX_PAGES (HUGE_THRESHOLD >> USLUB_PAGE_SHIFT)
_Static_assert(BIG_MAX_PAGES <= UINT16_MAX, "a large block's pages fit page_desc.objects");

/* Pages [d, d + npages) of a large block (bare or not, not counted any more) to the
 * zone: a bare block's tail pages name no block already. */
static void pages_back(struct page_desc *d, size_t npages, bool bare)
{
	uslub_bound_leaving(&uslub_large_bytes, npages << USLUB_PAGE_SHIFT);
	__atomic_store_n(&d->kind, PAGE_UNUSED, __ATOMIC_RELAXED);
	if (bare)
		uslub_pages_free_bare(d, npages);
	else
		uslub_pages_free_range(d, npages);
}

/* Cached block i out of the slots (the older ones keep their order). */
static struct page_desc *slot_remove(struct uslub_thread *t, unsigned i)
{
	struct page_desc *d = t->big[i];
	for (unsigned k = i + 1; k < t->big_count; k++)
		t->big[k - 1] = t->big[k];
	t->big_count--;
	t->big_pages -= d->objects;
	return d;
}

static void slot_back(struct uslub_thread *t, unsigned i)
{
	struct page_desc *d = slot_remove(t, i);
	bool bare = d->flags & PF_BARE;
	d->flags = 0;
	pages_back(d, d->objects, bare);
}

/* What a block taken had beyond the request: a cached block of its own while it is big
 * (no lock: the next miss gives it back, merged with its neighbours again, as any
 * other), else back to the zone. */
static void keep_tail(struct uslub_thread *t, struct page_desc *tail, size_t npages, bool bare)
{
	if (npages <= BIG_MIN_PAGES) {
		pages_back(tail, npages, bare);
		return;
	}
	tail->cls = CLS_NONE;
	tail->objects = (uint16_t)npages;
	tail->owner = NULL;
	tail->flags = bare ? PF_BARE : 0;
	if (!bare)
		for (size_t i = 1; i < npages; i++)
			tail[i].head = tail;
	__atomic_store_n(&tail->kind, PAGE_LARGE, __ATOMIC_RELAXED);
	__atomic_store_n(&tail->head, tail, __ATOMIC_RELEASE);
	uslub_big_free(t, tail, npages);
}

void uslub_big_drain(struct uslub_thread *t)
{
	while (t->big_count)
		slot_back(t, 0);
}

struct page_desc *uslub_big_take(struct uslub_thread *t, size_t npages)
{
	unsigned best = BIG_SLOTS;
	for (unsigned i = 0; i < t->big_count; i++) {
		size_t len = t->big[i]->objects;
		if (len >= npages && region_of(t->big[i])->nid == t->node &&
		    (best == BIG_SLOTS || len < t->big[best]->objects))
			best = i;
	}
	if (best == BIG_SLOTS) {
		uslub_big_drain(t);
		return NULL;
	}
	struct page_desc *d = slot_remove(t, best);
	bool bare = d->flags & PF_BARE;
	size_t len = d->objects;
	d->flags = bare ? PF_BARE : 0;
	d->objects = (uint16_t)npages;
	if (len > npages)
		keep_tail(t, d + npages, len - npages, bare);
	medium_stat(t, BIG_HIT, 1);
	return d;
}

bool uslub_big_free(struct uslub_thread *t, struct page_desc *d, size_t npages)
{
	if (npages <= BIG_MIN_PAGES || npages > BIG_MAX_PAGES || region_of(d)->nid != t->node)
		return false;
	while (t->big_count == BIG_SLOTS || t->big_pages + npages > BIG_MAX_PAGES)
		slot_back(t, 0);
	d->flags = (uint8_t)(PF_CACHED | (d->flags & PF_BARE));
	t->big[t->big_count++] = d;
	t->big_pages += (uint32_t)npages;
	medium_stat(t, BIG_FREE, 1);
	return true;
}
